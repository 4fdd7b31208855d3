"""What the workers' fork server imports before it forks a worker (``server.supervisor``,
``server.workers``). Beside the packages it loads, not in one of them: it loads the
command line (``cli``) and the server alike.

Every worker then shares these modules' pages with the others instead of holding its own
copy (about 30 MB of a worker's 50), and ``gc.freeze()`` moves what is loaded into the
permanent generation so that a worker's garbage collections never write to (and so copy)
the shared pages.
"""

import concurrent.futures.thread  # noqa: F401  (asyncio's default executor)
import encodings.idna  # noqa: F401  (host names in create_connection)
import gc

import uvloop  # noqa: F401  (each worker's event loop: a 10 MB extension module)

# `cli`: started as the console script `kafka-gateway` (the image's entrypoint), the
# gateway's workers each run that script again (multiprocessing does, as "__mp_main__", so
# main() does not run), and the script imports gateway.cli. Loaded here, a worker finds it
# loaded; importing it itself left ~1 MB more in each worker (tests/unit/test_worker_context).
from . import cli  # noqa: F401
from .features.catalogue import load_catalogue
from .interceptors import dispatch
from .protocol import api_spec, known_api_keys
from .server import app, supervisor  # noqa: F401  (app: imported for its side effect, loaded)
from .versions import release_tracks

# A worker looks up each API's spec on its first request of that API, which imports
# that API's schemas (~1,000 modules, ~17 MB for all of them): all of them here, once,
# shared by every worker.
for key in known_api_keys():
    api_spec(key)
dispatch.warm_up()  # and those of the APIs the interceptors decode, both ways
release_tracks()  # Kafka's releases, to fingerprint the upstream (read once, cached)
load_catalogue()  # the built-in feature catalogue (read once, cached)
supervisor.prebuild_worker_metrics()  # each forked worker starts with its own copy
gc.collect()
gc.freeze()
