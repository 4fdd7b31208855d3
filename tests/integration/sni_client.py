"""A real client run by test_sni in a mount namespace of its own (where the SNI names
resolve to 127.0.0.1): create a topic, produce, consume and list the brokers, all over
TLS through the gateway's one port. Prints one JSON line with what it saw.

Usage: python -m tests.integration.sni_client confluent|kafka-python BOOTSTRAP TOPIC CA
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.integration.test_clients import ClientDriver, KafkaPythonDriver
from tests.integration.test_tls import confluent


def driver(name: str, ca: str) -> ClientDriver:
    if name == "confluent":
        return confluent(**{"security.protocol": "SSL", "ssl.ca.location": ca})

    class Tls(KafkaPythonDriver):
        @property
        def _common(self) -> dict[str, Any]:
            return {**super()._common, "security_protocol": "SSL", "ssl_cafile": ca}

    return Tls()


def main(name: str, bootstrap: str, topic: str, ca: str) -> None:
    client = driver(name, ca)
    values = [f"{topic}/sni/{i}".encode() for i in range(5)]
    client.create_topic(bootstrap, topic)
    client.produce(bootstrap, topic, values, acks="all")
    got = client.consume_assigned(bootstrap, topic, len(values))
    brokers = [[b.node_id, b.host, b.port] for b in client.describe_cluster(bootstrap)]
    print(
        json.dumps(
            {
                "produced": [v.decode() for v in values],
                "consumed": [v.decode() for v in got],
                "brokers": brokers,
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
