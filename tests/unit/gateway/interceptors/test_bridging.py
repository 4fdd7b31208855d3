"""The bridge on a connection, through a fake ``Exchange``: what it sends upstream, what
the client gets back, what the policy refuses, and bad requests and answers fuzzed."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecordsBuilder
from prometheus_client import CollectorRegistry

from gateway.bridge.messages import decode, encode
from gateway.client_info import ClientInfo
from gateway.config import Config
from gateway.interceptors import bridging as hook
from gateway.interceptors.verdicts import carry_out
from gateway.kafka_client import request_frame
from gateway.observability.metrics import Metrics
from gateway.protocol import InFlight, RequestFrame, parse_request_header
from gateway.versions import release_tracks

KAFKA_44 = dict(release_tracks()["kraft"][-1].versions)


@dataclass
class FakeExchange:
    config: Config = field(default_factory=Config)
    upstream_ranges: dict[int, tuple[int, int]] = field(default_factory=lambda: dict(KAFKA_44))
    principal: str | None = None
    sent: list[tuple[int, bytes]] = field(default_factory=list)
    unanswered: list[bytes] = field(default_factory=list)
    answers: list[bytes] = field(default_factory=list)
    handlers: list[Any] = field(default_factory=list)
    closed: bool = False
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.gateway = SimpleNamespace(config=self.config, metrics=Metrics(CollectorRegistry()))
        self.info = ClientInfo(1, "peer", "sidecar", 0.0)
        self.ranges = dict(KAFKA_44)

    def ask_upstream(self, api_key: int, build: Any, handler: Any) -> int:
        version, request = build(-5)
        self.sent.append((version, request))
        self.handlers.append(handler)
        return int(version)

    def send_unanswered(self, entry: Any, request: bytes) -> None:
        self.unanswered.append(request)

    def answer(self, entry: Any, payload: bytes) -> None:
        self.answers.append(payload)

    def violation(self, side: str, reason: str, detail: str) -> None:
        self.violations.append(reason)
        self.closed = True

    def rewrite_failed(self, entry: Any, error: str) -> None:
        self.violations.append("rewrite_failed")

    def close(self) -> None:
        self.closed = True

    def who(self) -> dict[str, object]:
        return {"peer": "peer"}


def carry(ctx: FakeExchange, request: RequestFrame, body: memoryview) -> bool:
    """The bridge's verdict, carried out on ``ctx`` as the connection would; whether it
    took the request."""
    verdict = hook.carry(ctx, request, body)
    if verdict is not None:
        carry_out(ctx, request, verdict)  # type: ignore[arg-type]
    return verdict is not None


def _request(frame: bytes) -> tuple[RequestFrame, memoryview]:
    header = parse_request_header(memoryview(frame)[4:])
    entry = InFlight().add(header.api_key, header.api_version, header.correlation_id, False)
    return RequestFrame(header, frame, entry), memoryview(frame)[4 + header.body_offset :]


def _produce(acks: int, client_id: str = "app") -> bytes:
    builder = MemoryRecordsBuilder(1, 0, 1 << 20)
    builder.append(timestamp=5, key=b"k", value=b"v")
    builder.close()
    body = encode(
        "ProduceRequest",
        2,
        {
            "Acks": acks,
            "TimeoutMs": 1000,
            "TopicData": [
                {
                    "Name": "t",
                    "PartitionData": [{"Index": 0, "Records": bytes(builder.buffer())}],
                }
            ],
        },
    )
    return request_frame(0, 2, 77, body, client_id)


def test_a_produce_v2_goes_up_as_v3_and_its_answer_comes_back_as_v2() -> None:
    ctx = FakeExchange()
    request, body = _request(_produce(-1))
    assert carry(ctx, request, body)
    ((version, sent),) = ctx.sent
    assert version == 3 and struct.unpack(">hhi", sent[4:12]) == (0, 3, -5)
    answer = encode(
        "ProduceResponse",
        3,
        {"Responses": [{"Name": "t", "PartitionResponses": [{"Index": 0, "BaseOffset": 9}]}]},
    )
    ctx.handlers[0](memoryview(struct.pack(">i", -5) + answer))
    (payload,) = ctx.answers
    assert struct.unpack(">i", payload[:4]) == (77,)  # the client's correlation id
    got = decode("ProduceResponse", 2, payload[4:])
    assert got["Responses"][0]["PartitionResponses"][0]["BaseOffset"] == 9
    assert ctx.info.bridged == 1
    assert ctx.gateway.metrics.bridge.connections._value.get() == 1


def test_acks_0_goes_up_unanswered() -> None:
    ctx = FakeExchange()
    request, body = _request(_produce(0))
    assert carry(ctx, request, body)
    assert not ctx.sent and len(ctx.unanswered) == 1
    assert struct.unpack(">hh", ctx.unanswered[0][4:8]) == (0, 3)


def test_the_policy_refuses_and_the_switch_turns_it_off() -> None:
    refusing = FakeExchange(Config(bridge_policy=("client_id=^legacy -> refuse",)))
    request, body = _request(_produce(-1, client_id="legacy-1"))
    assert not carry(refusing, request, body)
    off = FakeExchange(Config(bridge_old_clients=False))
    request, body = _request(_produce(-1))
    assert not carry(off, request, body)
    assert hook.advertised(off, off.ranges, 0, "app") is off.ranges  # type: ignore[arg-type]


def test_an_old_bridged_client_is_told_the_old_versions_and_no_other_is() -> None:
    ctx = FakeExchange(Config(bridge_policy=("client_id=^legacy -> refuse",)))
    told = hook.advertised(ctx, ctx.ranges, 0, "app")  # type: ignore[arg-type]
    assert told[1][0] == 0 and told[2][0] == 0 and ctx.ranges[1][0] == 4
    assert hook.advertised(ctx, ctx.ranges, 2, "legacy-1") is ctx.ranges  # type: ignore[arg-type]
    # ApiVersions v3+ (KIP-511, Kafka 2.4's clients on): the broker's ranges, unchanged.
    assert hook.advertised(ctx, ctx.ranges, 3, "app") is ctx.ranges  # type: ignore[arg-type]


def test_versions_the_upstream_accepts_are_not_bridged() -> None:
    ctx = FakeExchange()
    body = encode("ProduceRequest", 3, {"Acks": 1, "TimeoutMs": 1, "TopicData": []})
    request, view = _request(request_frame(0, 3, 1, body, "app"))
    assert not carry(ctx, request, view)
    ctx39 = FakeExchange(upstream_ranges={k: (0, v[1]) for k, v in KAFKA_44.items()})
    request, view = _request(_produce(-1))
    assert not carry(ctx39, request, view)


FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(st.data())
def test_mangled_requests_and_answers_close_the_connection_and_raise_nothing(data: Any) -> None:
    frame = bytearray(_produce(-1))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(12, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(14, len(frame)))
    frame = frame[:cut]
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    ctx = FakeExchange()
    try:
        request, body = _request(bytes(frame))
    except ValueError:
        return  # a header the reader refuses before the bridge sees it
    carried = carry(ctx, request, body)
    assert carried
    if ctx.violations:
        assert ctx.closed and not ctx.sent
        return
    junk = data.draw(st.binary(max_size=64))
    ctx.handlers[0](memoryview(struct.pack(">i", -5) + junk))
    assert ctx.answers or ctx.closed


def _fetch_answer() -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        builder.append(i, 10, b"k", b"v%d" % i, [])
    return encode(
        "FetchResponse",
        4,
        {
            "Responses": [
                {
                    "Topic": "t",
                    "Partitions": [
                        {"PartitionIndex": 0, "HighWatermark": 3, "Records": bytes(builder.build())}
                    ],
                }
            ]
        },
    )


@FUZZ
@given(st.data())
def test_mangled_fetch_answers_close_the_connection_and_raise_nothing(data: Any) -> None:
    body = encode(
        "FetchRequest",
        2,
        {
            "ReplicaId": -1,
            "Topics": [
                {
                    "Topic": "t",
                    "Partitions": [
                        {"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}
                    ],
                }
            ],
        },
    )
    ctx = FakeExchange()
    request, view = _request(request_frame(1, 2, 3, body, "app"))
    assert carry(ctx, request, view)
    answer = bytearray(_fetch_answer())
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(answer) - 1))
        answer[at] = data.draw(st.integers(0, 255))
    answer = answer[: data.draw(st.integers(0, len(answer)))]
    ctx.handlers[0](memoryview(struct.pack(">i", -5) + bytes(answer)))
    assert ctx.answers or ctx.closed


def test_the_policy_file_is_read_again_on_reload(tmp_path: Any) -> None:
    rules = tmp_path / "bridge-policy.txt"
    rules.write_text("# who is refused\nclient_id=^legacy -> refuse\n")
    config = Config(bridge_policy_file=str(rules))
    ctx = FakeExchange(config)
    assert not hook.serves(ctx, "legacy-1")  # type: ignore[arg-type]
    assert hook.serves(ctx, "app")  # type: ignore[arg-type]
    rules.write_text("client_id=^app -> refuse\n")
    assert hook.reload_policy(config)
    assert hook.serves(ctx, "legacy-1") and not hook.serves(ctx, "app")  # type: ignore[arg-type]
    assert not hook.reload_policy(config)  # unchanged
    rules.write_text("client_id=x -> maybe\n")
    with pytest.raises(hook.PolicyFileError, match=r"bridge-policy\.txt:1"):
        hook.reload_policy(config)
    assert not hook.serves(ctx, "app")  # type: ignore[arg-type]  # the rules before it stay


def test_a_capped_client_is_told_no_version_above_its_cap() -> None:
    ctx = FakeExchange(Config(bridge_policy=("client_id=^legacy -> cap Fetch=1,Produce=1",)))
    told = hook.advertised(ctx, ctx.ranges, 0, "legacy-1")  # type: ignore[arg-type]
    assert (told[0], told[1], told[2]) == ((0, 1), (0, 1), (0, KAFKA_44[2][1]))
    assert hook.advertised(ctx, ctx.ranges, 0, "app")[1] == (0, KAFKA_44[1][1])  # type: ignore[arg-type]
    # A modern client (ApiVersions v3+) matching the rule is capped too: Fetch v4 is its
    # lowest, above the cap, so it is told no Fetch; one that does not match: unchanged.
    modern = hook.advertised(ctx, ctx.ranges, 3, "legacy-2")  # type: ignore[arg-type]
    assert 1 not in modern and modern[0] == (KAFKA_44[0][0], 1)
    assert hook.advertised(ctx, ctx.ranges, 3, "app") is ctx.ranges  # type: ignore[arg-type]
    metrics = ctx.gateway.metrics.bridge  # type: ignore[attr-defined]
    assert metrics.capped._value.get() == 2
    # Capped and bridged: its Produce v2 goes up as v3 all the same.
    request, body = _request(_produce(-1, client_id="legacy-1"))
    assert carry(ctx, request, body)
    assert [version for version, _ in ctx.sent] == [3]


def test_a_cap_by_software_reads_the_kip_511_name_of_the_request() -> None:
    ctx = FakeExchange(Config(bridge_policy=("software=kcat version=<2 -> cap Metadata=4",)))
    body = encode(
        "ApiVersionsRequest",
        3,
        {"ClientSoftwareName": "kcat", "ClientSoftwareVersion": "1.7.1"},
    )
    told = hook.advertised(ctx, ctx.ranges, 3, "rdkafka", body)  # type: ignore[arg-type]
    assert told[3] == (KAFKA_44[3][0], 4)
    newer = encode(
        "ApiVersionsRequest", 3, {"ClientSoftwareName": "kcat", "ClientSoftwareVersion": "2.0"}
    )
    assert hook.advertised(ctx, ctx.ranges, 3, "rdkafka", newer) is ctx.ranges  # type: ignore[arg-type]
