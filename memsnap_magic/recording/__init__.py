"""Recording: the options, the ``Recorder`` and its process-wide state, the backends that turn
a device's history on and off. Imports ``core``, ``files`` and ``results``; never a view."""
