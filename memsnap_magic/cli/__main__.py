"""``python -m memsnap_magic.cli``: the ``memsnap`` command line, as ``python -m memsnap_magic``."""

import sys

from . import main

if __name__ == "__main__":  # worker processes of a folder scan import this module again
    sys.exit(main())
