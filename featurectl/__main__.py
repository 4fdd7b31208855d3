"""``python -m featurectl``: the same as the ``featurectl`` console script."""

import sys

from .cli import main

sys.exit(main())
