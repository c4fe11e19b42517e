"""The CPU route: ``backend`` (``CpuBackend``) runs ``profiler`` sessions; ``events`` reads what
they report by columns, ``frames`` the Python tracer's stacks, ``history`` turns both into a
snapshot; ``live_tensors`` walks the namespace for the tensors live at a cell's edges, which
``storage_refs`` follows between walks; ``oom`` reads a failed allocation."""
