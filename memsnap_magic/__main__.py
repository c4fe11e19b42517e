"""``python -m memsnap_magic``: the ``memsnap`` command line."""

import sys

from .cli import main

if __name__ == "__main__":  # worker processes of a folder scan import this module again
    sys.exit(main())
