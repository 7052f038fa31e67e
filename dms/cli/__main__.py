"""``python -m dms.cli``: the ``dms`` command."""

import sys

from dms.cli import main

sys.exit(main())
