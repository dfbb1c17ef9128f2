"""``python -m crfkit``: the command line (see :mod:`crfkit.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
