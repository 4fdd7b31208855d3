"""The environment variables an operator sets for the gateway: read here and nowhere else.

Where a running gateway uses one, it is the default of a ``Config`` key (``embedded_home``,
``cache_dir``) and the file or a flag may set it instead. Code that runs without a Config
(the Kafka tools, featurectl, the test harness, or an import that happens before the
config is loaded, such as the choice of the compiled scanner) calls these functions for
the same answer. A module of its own, outside ``gateway.config``, so that the protocol
core can ask without importing the config (which imports the protocol core).
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "KAFKA_GATEWAY_HOME"
PURE_PYTHON_ENV = "KAFKA_GATEWAY_PURE_PYTHON"
# The XDG base directory spec's: a user's cache, wherever they keep it.
CACHE_ENV = "XDG_CACHE_HOME"


def default_embedded_home() -> str | None:
    """``$KAFKA_GATEWAY_HOME``: where the embedded stack keeps its logs and data; None
    (unset or empty): a temporary directory, removed on exit."""
    return os.environ.get(HOME_ENV) or None


def default_cache_dir() -> str:
    """The gateway's folder in the user's cache (the XDG base directory spec):
    ``$XDG_CACHE_HOME/kafka-gateway``, else ``~/.cache/kafka-gateway``."""
    base = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache")
    return str(Path(base) / "kafka-gateway")


def pure_python() -> bool:
    """``KAFKA_GATEWAY_PURE_PYTHON`` set (non-empty): run the Python path alone, without
    the compiled lane (to compare, or to debug). Read when the lane is chosen, at import,
    before any Config exists: so not a Config key."""
    return bool(os.environ.get(PURE_PYTHON_ENV))
