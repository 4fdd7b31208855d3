"""What the workers' fork server imports before it forks a worker (supervisor.py).

Every worker then shares these modules' pages with the others instead of holding its own
copy (about 30 MB of a worker's 50), and ``gc.freeze()`` moves what is loaded into the
permanent generation so that a worker's garbage collections never write to (and so copy)
the shared pages.
"""

import gc

from ..versions import gateway_supported
from . import app, supervisor  # noqa: F401  (imported for their side effect: loaded)

# Every worker computes this at start, importing the schema of every API version kio
# knows (~1,000 modules, ~17 MB): once here, shared by all.
gateway_supported()
gc.collect()
gc.freeze()
