"""`python -m mathrl`."""

import sys

from mathrl.cli import main

if __name__ == "__main__":
    sys.exit(main())
