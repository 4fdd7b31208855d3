"""structlog setup: JSON lines by default (console rendering when attached to a TTY)."""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import structlog


def configure_logging(fmt: str = "auto", level: str = "info") -> None:
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # One write per line: workers share the supervisor's stderr, and with
        # PYTHONUNBUFFERED (set in the image) stderr writes straight through, so print()'s
        # separate writes of the line and of its newline let another worker's line land
        # between them (a CI run saw two JSON objects on one line). WriteLogger writes
        # line + newline at once; a write to a file or a pipe of up to PIPE_BUF (4 kB)
        # bytes is not split.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # kazoo logs every failed reconnect attempt through stdlib logging, unformatted; the
    # gateway logs ZooKeeper state changes itself (features.zookeeper_state).
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)


class RequestLog:
    """The request log: one line per answered request, for a sampled fraction of them.

    ``sample_rate`` 1.0 logs every request, 0.01 one in a hundred (chosen at random, so
    every client and API shows up in proportion). ``level`` is the level the lines are
    logged at, so ``log_level`` can still filter them.
    """

    def __init__(self, sample_rate: float, level: str = "info") -> None:
        self.sample_rate = sample_rate
        self._log = get_logger("gateway.requests")
        self._emit = getattr(self._log, level.lower())
        self._random = random.random

    def sampled(self) -> bool:
        return self.sample_rate >= 1.0 or self._random() < self.sample_rate

    def emit(self, event: str, **fields: object) -> None:
        self._emit(event, **fields)


# Bad input can arrive once per frame: without a limit, one client sending garbage
# writes a log line per frame (the issue that brought this in saw 199,000 lines). Each
# event logs at most ``BAD_INPUT_BURST`` lines per ``BAD_INPUT_INTERVAL_S``; the first
# line of a later interval carries ``suppressed``, the count of lines left out.
BAD_INPUT_BURST = 10
BAD_INPUT_INTERVAL_S = 10.0
# Distinct (event, key) windows kept before they are forgotten all at once.
_MAX_LIMITED_KEYS = 1000
# Keys with a window of their own per event; later keys share one, OTHER_KEY. Keys can
# come from clients (a fuzzer sends every API key there is): without this, each new key
# brought its own burst, and a live fuzz run wrote 60,000 lines in 10 minutes.
MAX_KEYS_PER_EVENT = 16
OTHER_KEY = "other"


class RateLimitedLogger:
    """A logger whose lines are limited per event name (see BAD_INPUT_BURST).

    ``configure`` sets the limits for every instance (from ``[log]`` in the config).
    """

    _burst = BAD_INPUT_BURST
    _interval_s = BAD_INPUT_INTERVAL_S

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = get_logger(name)
        self._clock = clock
        # event -> [window start, lines logged in the window, lines suppressed in it]
        self._windows: dict[object, list[float]] = {}
        # event -> keyed windows it holds (bounded by MAX_KEYS_PER_EVENT)
        self._keys: dict[str, int] = {}

    @classmethod
    def configure(cls, burst: int, interval_s: float) -> None:
        cls._burst = burst
        cls._interval_s = interval_s

    # ``limit_key``: limit lines per (event, key) instead of per event, e.g. one line per
    # unknown API key, so one noisy key does not hide another.
    def info(self, event: str, *, limit_key: object = None, **fields: object) -> None:
        self._emit(self._log.info, event, limit_key, fields)

    def warning(self, event: str, *, limit_key: object = None, **fields: object) -> None:
        self._emit(self._log.warning, event, limit_key, fields)

    def error(self, event: str, *, limit_key: object = None, **fields: object) -> None:
        self._emit(self._log.error, event, limit_key, fields)

    def _emit(
        self, method: Callable[..., Any], event: str, limit_key: object, fields: dict[str, object]
    ) -> None:
        now = self._clock()
        key: object = event if limit_key is None else (event, limit_key)
        window = self._windows.get(key)
        if window is None and limit_key is not None:
            if self._keys.get(event, 0) >= MAX_KEYS_PER_EVENT:
                key = (event, OTHER_KEY)
                window = self._windows.get(key)
            else:
                self._keys[event] = self._keys.get(event, 0) + 1
        if window is None or now - window[0] >= self._interval_s:
            if window is not None and window[2]:
                fields["suppressed"] = int(window[2])
            if window is None and len(self._windows) >= _MAX_LIMITED_KEYS:
                # Keys can come from clients (API keys): bound the table.
                self._windows.clear()
                self._keys.clear()
            window = self._windows[key] = [now, 0, 0]
        if window[1] >= self._burst:
            window[2] += 1
            return
        window[1] += 1
        method(event, **fields)
