"""A drained connection ends the way a broker's does: every answer, then a clean close.

Draining (SIGTERM, a level drop, a broker's changed answer) stops reading a client's
requests and closes once what was forwarded is answered. A socket closed with bytes
unread is reset (RFC 1122 4.2.2.13): the client read ``connection reset by peer`` after
the last answer, and over a real network the reset also throws away what of that answer
the kernel had not sent yet. Here a raw client has a Fetch in flight when the gateway
(a real process, in front of the session's broker) is sent SIGTERM, then sends fifty
Metadata requests the gateway never reads, and only then starts reading: it must get
the whole Fetch answer (40 MB from Apache Kafka, which answers with what it has after
max_wait; Tansu answers without records), nothing for the unread requests, then
end-of-stream.
"""

from __future__ import annotations

import datetime
import threading
import time

from kio.schema.fetch.v16.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i32

from tests.conftest import GatewayFactory
from tests.harness import LOOPBACK, KafkaConnection
from tests.integration.test_fetch_streaming import _produce, _topic_id

FETCH, FETCH_VERSION, METADATA = 1, 16, 3
RECORDS, RECORD_BYTES = 400, 100_000


def test_a_drained_connection_answers_what_it_forwarded_then_closes_without_a_reset(
    gateway_factory: GatewayFactory, unique_topic: str
) -> None:
    gw = gateway_factory("--workers", "1")
    _produce(gw.bootstrap, unique_topic, [bytes(RECORD_BYTES)] * RECORDS)
    with KafkaConnection(LOOPBACK, gw.port, timeout=10) as conn:
        conn.api_versions(3)
        partition = FetchPartition(
            partition=i32(0), fetch_offset=0, partition_max_bytes=i32(64 << 20)
        )
        fetch = FetchRequest(
            # Waits for more than there is: answered after max_wait, the drain begun.
            max_wait=datetime.timedelta(milliseconds=1500),
            min_bytes=i32(64 << 20),
            max_bytes=i32(64 << 20),
            topics=(FetchTopic(topic_id=_topic_id(conn, unique_topic), partitions=(partition,)),),
            forgotten_topics_data=(),
        )
        fetch_id = conn.send(FETCH, FETCH_VERSION, fetch)
        time.sleep(0.3)
        exit_codes: list[int | None] = []
        stopping = threading.Thread(target=lambda: exit_codes.append(gw.stop()))
        stopping.start()
        time.sleep(0.5)
        everything = MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        for _ in range(50):
            conn.send(METADATA, 12, everything)
        time.sleep(3.0)  # answered and closed by now, the client not reading

        # Read whole or not at all: an answer cut short ends in ConnectionClosed here.
        answer = conn.recv(flexible_header=True, timeout=10)
        assert answer.correlation_id == fetch_id
        conn._sock.settimeout(10)
        assert conn._sock.recv(1) == b"", "end-of-stream, not a reset or another answer"
        stopping.join(30)
    assert exit_codes == [0]
