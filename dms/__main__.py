"""``python -m dms``: the ``dms`` command."""

import sys

from dms.cli import main

# Guarded: fleet commands start worker processes, which import the main module again.
if __name__ == "__main__":
    sys.exit(main())
