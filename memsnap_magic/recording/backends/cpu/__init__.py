"""The CPU route: profiler sessions (``backend``), their events read into a snapshot
(``history``), and the namespace walk that finds the tensors live at a cell's edges
(``live_tensors``)."""
