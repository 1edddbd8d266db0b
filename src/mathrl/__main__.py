"""`python -m mathrl`."""

import sys

from mathrl.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
