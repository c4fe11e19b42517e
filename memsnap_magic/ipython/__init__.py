"""The IPython front end: ``%load_ext``, ``%%memsnap`` and ``%memsnap``, a cell body run as
IPython runs a cell."""
