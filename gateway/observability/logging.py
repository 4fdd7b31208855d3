"""structlog setup: JSON lines by default (console rendering when attached to a TTY)."""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable

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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
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


class Throttle:
    """Rate limit for log lines that bad input can trigger at will: at most one line per
    key every ``interval_s`` seconds; the lines held back are counted and reported with
    the next one that goes out (``suppressed=N``), so nothing is silently lost."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self._clock = clock
        self._next: dict[object, float] = {}
        self._held: dict[object, int] = {}

    def allow(self, key: object) -> int | None:
        """None: stay quiet; else log now, reporting this many lines held back."""
        now = self._clock()
        if now < self._next.get(key, 0.0):
            self._held[key] = self._held.get(key, 0) + 1
            return None
        if len(self._next) > 1000:  # keys come from clients: bound the table
            self._next.clear()
        self._next[key] = now + self.interval_s
        return self._held.pop(key, 0)
