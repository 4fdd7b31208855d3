"""A confluent-kafka consumer that keeps reading from a thread while a test changes
things under it (feature levels, the gateway), counting what it read and every error.

confluent_kafka is imported when a consumer starts, so the harness loads without it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any


class ContinuousConsumer:
    """Polls ``topic`` from a thread until ``stop``; each record's value is an int.

    ``config``: the consumer's own settings (``group.id`` at least: a classic group, a
    KIP-848 one with ``group.protocol=consumer``, ...), besides ``bootstrap.servers`` and
    the error callback. ``partition``: read that partition from offset 0 (assigned, no
    group coordination); None subscribes to the topic and the group assigns.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        config: Mapping[str, Any],
        *,
        partition: int | None = None,
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.values: list[int] = []
        self.received_at: list[float] = []  # time.time() per value, in the same order
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                **config,
                "bootstrap.servers": bootstrap,
                "error_cb": lambda err: self.errors.append(str(err)),
            }
        )
        if partition is None:
            self._consumer.subscribe([topic])
        else:
            self._consumer.assign([TopicPartition(topic, partition, 0)])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self._consumer.consume(500, 0.2):
                if msg.error() is None:
                    self.received_at.append(time.time())
                    self.values.append(int(msg.value()))
                else:
                    self.errors.append(str(msg.error()))

    def since(self, when: float) -> int:
        """How many records arrived at or after ``when`` (a time.time())."""
        return sum(1 for t in list(self.received_at) if t >= when)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()
