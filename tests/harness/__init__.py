"""Test harness: real ZooKeeper, Tansu and gateway processes, plus a raw Kafka wire client.

Kept free of pytest imports so it can also drive parts from a REPL or a benchmark.
"""

from .kafka_wire import (
    ApiVersions,
    ConnectionClosed,
    KafkaConnection,
    Response,
    decode,
    encode,
    parse_api_versions,
)
from .ports import LOOPBACK, free_port, parse_host_port, port_accepts, wait_port_closed
from .procs import (
    TANSU_NODE_ID,
    UNREACHABLE_HOST,
    Broker,
    ExternalBroker,
    GatewayProcess,
    HarnessError,
    ManagedProcess,
    TansuBroker,
    ZooKeeperProcess,
    pyspark_jars_dir,
)

__all__ = [
    "LOOPBACK",
    "TANSU_NODE_ID",
    "UNREACHABLE_HOST",
    "ApiVersions",
    "Broker",
    "ConnectionClosed",
    "ExternalBroker",
    "GatewayProcess",
    "HarnessError",
    "KafkaConnection",
    "ManagedProcess",
    "Response",
    "TansuBroker",
    "ZooKeeperProcess",
    "decode",
    "encode",
    "free_port",
    "parse_api_versions",
    "parse_host_port",
    "port_accepts",
    "pyspark_jars_dir",
    "wait_port_closed",
]
