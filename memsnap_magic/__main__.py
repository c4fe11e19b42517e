"""``python -m memsnap_magic``: the ``memsnap`` command line."""

import sys

from .cli import main

sys.exit(main())
