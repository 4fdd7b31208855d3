"""Apache Kafka itself as a test part: 4.x in KRaft combined mode, 3.9 in ZooKeeper mode.

The properties, the Maven fetch and the storage format live in
``gateway/server/apache_kafka.py`` (the embedded stack starts the same broker); this
wraps them in a ``ManagedProcess`` so tests get the harness's cleanup, logs and
readiness checks. Ready means: the broker answers Metadata with itself in the broker
list, which a KRaft broker does only once it has registered with its controller.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path

from gateway.server.apache_kafka import (
    KRAFT_VERSION,
    ZOOKEEPER_MODE_VERSION,
    KafkaNode,
    is_zookeeper_mode,
)

from .ports import LOOPBACK, free_port, port_accepts
from .procs import UNREACHABLE_HOST, ManagedProcess

__all__ = ["KRAFT_VERSION", "ZOOKEEPER_MODE_VERSION", "ApacheKafkaBroker"]


class ApacheKafkaBroker(ManagedProcess):
    """One Apache Kafka broker on loopback ports, advertising ``advertised_host``.

    ``version`` picks the mode: 4.x is KRaft (storage formatted in ``workdir``), 3.9 is
    ZooKeeper mode and needs ``zookeeper`` (a connect string; a chroot of its own is
    added, so several brokers can share one ZooKeeper). ``stop()``/``start()`` keep the
    ports and the data: topics survive a restart, as with a real broker.
    """

    external = False
    start_timeout = 90.0
    stop_timeout = 20.0
    _probe_interval = 0.25

    def __init__(
        self,
        workdir: Path,
        *,
        version: str = KRAFT_VERSION,
        advertised_host: str = UNREACHABLE_HOST,
        zookeeper: str | None = None,
        port: int | None = None,
        properties: Mapping[str, str] | None = None,
        jvm_options: tuple[str, ...] | None = None,
        name: str | None = None,
    ) -> None:
        name = name or f"kafka-{version}"
        workdir = Path(workdir) / name
        super().__init__(name, workdir / f"{name}.log")
        self.version = version
        self.host = LOOPBACK
        self.port = port or free_port()
        self.advertised_host = advertised_host
        self.chroot: str | None = None
        connect = None
        if is_zookeeper_mode(version):
            if zookeeper is None:
                raise ValueError(f"Kafka {version} runs in ZooKeeper mode: pass zookeeper=")
            self.chroot = f"/kafka-{uuid.uuid4().hex[:8]}"
            connect = zookeeper + self.chroot
        self.node = KafkaNode(
            workdir=workdir,
            port=self.port,
            internal_port=free_port(),
            controller_port=0 if connect else free_port(),
            version=version,
            advertised_host=advertised_host,
            zookeeper=connect,
            properties=dict(properties or {}),
        )
        if jvm_options is not None:
            self.node.jvm_options = jvm_options
        self.node_id = self.node.node_id

    @property
    def zookeeper_mode(self) -> bool:
        return self.node.zookeeper_mode

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def classpath(self) -> str:
        """The jars' classpath (``dir/*``): kafka-clients and the tools at this version."""
        from gateway.server.apache_kafka import classpath

        return classpath(self.version)

    def _before_start(self) -> None:
        self.node.prepare()

    def command(self) -> list[str]:
        return self.node.command()

    def _probe_ready(self) -> bool:
        if not port_accepts(self.host, self.port, timeout=0.5):
            self._last_probe_error = "port not accepting yet"
            return False
        from kio.schema.metadata.v12.request import MetadataRequest

        from .kafka_wire import KafkaConnection

        request = MetadataRequest(
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        with KafkaConnection(self.host, self.port, timeout=3.0) as conn:
            body = conn.request_entity(request)
        if not body.brokers or body.controller_id < 0:
            self._last_probe_error = "Metadata has no brokers or no controller yet"
            return False
        return True
