"""``python -m autofunc.bench [options]``: same as ``autofunc bench [options]``."""

import sys

from ..cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
