"""What a snapshot means and what a session keeps: figures, blocks alive, labels, stacks and
sites, intervals, findings, the session, and files read back as intervals. Pure: no recording,
no process state, no words for people beyond a stack's frames."""
