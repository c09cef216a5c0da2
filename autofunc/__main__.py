"""``python -m autofunc ...``: the command line (see :mod:`autofunc.cli`)."""

import sys

from .cli import main

sys.exit(main())
