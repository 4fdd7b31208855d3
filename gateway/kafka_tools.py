"""Apache Kafka's own command-line tools, as console scripts of this project.

``.venv/bin/kafka-topics``, ``kafka-console-producer``, ``kafka-console-consumer``,
``kafka-broker-api-versions`` and ``kafka-features`` run the classes Kafka's
``bin/*.sh`` scripts run, from the jars ``gateway.server.apache_kafka`` fetches with Maven
(once, into ``~/.cache/kafka-gateway``). So the walkthrough needs no client installed by
hand, and what it shows is what an operator's own Kafka tools would show through a
gateway: the same arguments, output and exit codes (the JVM is exec'd, not wrapped).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from .server.apache_kafka import KRAFT_VERSION, KafkaDistError, fetch, is_fetched, jars_dir, java

#: A short-lived client JVM: small heap, quick start (C1 only). slf4j-simple is the
#: binding in Kafka's dependency set; at its default (INFO) every Admin or producer prints
#: its whole config, which Kafka's own scripts silence with tools-log4j2 at WARN.
TOOL_JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
)

#: Console script name -> the class Kafka's bin/<name>.sh runs (Kafka 4.x).
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
}


def tool_command(name: str, args: list[str], version: str = KRAFT_VERSION) -> list[str]:
    """The java command line of Kafka's tool ``name`` with ``args``, jars fetched first."""
    if not is_fetched(version):
        print(
            f"{name}: fetching Apache Kafka {version}'s jars with Maven into "
            f"{jars_dir(version)} (once, about 55 MB)",
            file=sys.stderr,
            flush=True,
        )
    classpath = f"{fetch(version)}/*"
    return [java(), *TOOL_JVM_OPTIONS, "-cp", classpath, TOOLS[name], *args]


def run(name: str, args: list[str]) -> int:
    """Replace this process with Kafka's tool; 2 when it cannot be started (no mvn/java)."""
    try:
        command = tool_command(name, args)
    except KafkaDistError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execv(command[0], command)
    raise AssertionError("unreachable: execv returns only by raising")


def _entry_point(name: str) -> Callable[[], int]:
    def main() -> int:
        return run(name, sys.argv[1:])

    main.__name__ = name.replace("-", "_")
    main.__doc__ = f"{name}: Apache Kafka's {TOOLS[name]}, as bin/{name}.sh runs it."
    return main


kafka_topics = _entry_point("kafka-topics")
kafka_console_producer = _entry_point("kafka-console-producer")
kafka_console_consumer = _entry_point("kafka-console-consumer")
kafka_broker_api_versions = _entry_point("kafka-broker-api-versions")
kafka_features = _entry_point("kafka-features")
