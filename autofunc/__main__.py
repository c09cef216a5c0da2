"""``python -m autofunc ...``: the command line (see :mod:`autofunc.cli`)."""

import sys

from .cli import main

__all__: list[str] = []

sys.exit(main())
