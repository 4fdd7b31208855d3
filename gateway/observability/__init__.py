"""Metrics, logs and the small HTTP endpoint operators scrape."""

import sys

# structlog imports rich whenever it is installed (it is: featurectl draws its tables with
# it), only so that its ConsoleRenderer and dict tracebacks can use it. In the gateway that
# is ~70 modules (rich and pygments) and ~5 MB loaded in the supervisor and again in the
# workers' fork server: 10 MB of a 16-worker gateway's ~300 (bench/scale_bench.py, memory).
# So structlog is loaded here, before logging.py imports it, with rich hidden; rich stays
# importable afterwards (featurectl), and a console log shows plain tracebacks.
if "structlog" not in sys.modules and "rich" not in sys.modules:
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]
