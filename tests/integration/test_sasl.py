"""SASL through a real gateway process: SaslHandshake v0 raw tokens and v1 SaslAuthenticate.

No SASL-capable broker is available here (Tansu has no SASL), so ``FakeSaslBroker`` below
is a small real TCP server that speaks just enough Kafka: ApiVersions v0-3 before and
after authentication (the gateway asks it on every upstream connection), SaslHandshake
v0 (then raw length-prefixed tokens, as Kafka does) and v1 (then SaslAuthenticate),
PLAIN and SCRAM-SHA-256/512 verified server side with hashlib/hmac (RFC 5802), and
Metadata once authenticated. Like Kafka it closes the connection on a failed login, and
on any other request before authentication.

The gateway runs as its own process in front of it; tests drive it with raw sockets and
with real clients: librdkafka (confluent-kafka) and kafka-python both fall back to raw
v0 tokens when the broker offers SaslHandshake v0 only, and use SaslAuthenticate when it
offers v1.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import logging
import os
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka.net.sasl.scram import ScramClient
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest

from tests.harness import GatewayProcess, KafkaConnection
from tests.harness.kafka_wire import (
    ConnectionClosed,
    decode,
    encode,
    encode_request_header,
    is_flexible,
    skip_tagged_fields,
)
from tests.unit._kafka import build, schema_module, top_level

USERS = {"alice": "alice-secret"}
TOPIC = "sasl-topic"
OP_TIMEOUT_S = 15.0

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
UNSUPPORTED_VERSION = 35
UNSUPPORTED_SASL_MECHANISM = 33
SASL_AUTHENTICATION_FAILED = 58

# --------------------------------------------------------------------------------------
# The fake broker
# --------------------------------------------------------------------------------------


class AuthFailed(Exception):
    pass


class PlainServer:
    """RFC 4616: one token "authzid NUL authcid NUL passwd", answered with nothing."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.user: str | None = None

    def step(self, token: bytes) -> bytes:
        try:
            _authzid, user, password = token.decode().split("\0")
        except ValueError:
            raise AuthFailed("malformed PLAIN token") from None
        if self.users.get(user) != password:
            raise AuthFailed(f"bad password for {user!r}")
        self.user = user
        return b""

    @property
    def done(self) -> bool:
        return self.user is not None


class ScramServer:
    """RFC 5802 server side: client-first → server-first, client-final → server-final."""

    ITERATIONS = 4096

    def __init__(self, users: dict[str, str], mechanism: str) -> None:
        self.users = users
        self.hash = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}[mechanism]
        self.user: str | None = None
        self._state: dict[str, Any] = {}

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    def step(self, token: bytes) -> bytes:
        if not self._state:
            return self._first(token.decode())
        return self._final(token.decode())

    def _first(self, message: str) -> bytes:
        gs2_flag, _authzid, bare = message.split(",", 2)
        attrs = dict(part.split("=", 1) for part in bare.split(","))
        user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
        password = self.users.get(user)
        if gs2_flag != "n" or password is None:
            raise AuthFailed(f"unknown user {user!r}")
        salt = os.urandom(16)
        nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
        server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={self.ITERATIONS}"
        salted = hashlib.pbkdf2_hmac(self.hash().name, password.encode(), salt, self.ITERATIONS)
        self._state = {
            "user": user,
            "nonce": nonce,
            "gs2": message[: len(message) - len(bare)],
            "auth_prefix": f"{bare},{server_first}",
            "stored_key": self.hash(self._hmac(salted, b"Client Key")).digest(),
            "server_key": self._hmac(salted, b"Server Key"),
        }
        return server_first.encode()

    def _final(self, message: str) -> bytes:
        state = self._state
        without_proof, _, proof = message.rpartition(",p=")
        attrs = dict(part.split("=", 1) for part in without_proof.split(","))
        if attrs.get("r") != state["nonce"]:
            raise AuthFailed("nonce mismatch")
        if base64.b64decode(attrs.get("c", "")) != state["gs2"].encode():
            raise AuthFailed("channel binding mismatch")
        auth_message = f"{state['auth_prefix']},{without_proof}".encode()
        signature = self._hmac(state["stored_key"], auth_message)
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=True))
        if self.hash(client_key).digest() != state["stored_key"]:
            raise AuthFailed(f"bad password for {state['user']!r}")
        self.user = state["user"]
        server_signature = self._hmac(state["server_key"], auth_message)
        return b"v=" + base64.b64encode(server_signature)

    @property
    def done(self) -> bool:
        return self.user is not None


@dataclass
class Session:
    """What the fake broker saw on one connection, for the tests to check."""

    handshakes: list[tuple[int, str]] = field(default_factory=list)  # (version, mechanism)
    logins: list[str] = field(default_factory=list)
    api_keys: list[int] = field(default_factory=list)  # requests after authentication
    failure: str | None = None


class FakeSaslBroker:
    """A one-node Kafka broker that requires SASL (see the module docstring)."""

    def __init__(
        self,
        *,
        handshake_max: int,
        mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        users: dict[str, str] = USERS,
    ) -> None:
        self.handshake_max = handshake_max
        self.mechanisms = mechanisms
        self.users = users
        self.sessions: list[Session] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ranges(self) -> dict[int, tuple[int, int]]:
        ranges = {API_VERSIONS: (0, 3), METADATA: (0, 12), SASL_HANDSHAKE: (0, self.handshake_max)}
        if self.handshake_max >= 1:
            ranges[SASL_AUTHENTICATE] = (0, 2)
        return ranges

    def authenticated_sessions(self) -> list[Session]:
        with self._lock:
            return [s for s in self.sessions if s.logins]

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            for conn in self._conns:
                conn.close()

    # -- connections -------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            session = Session()
            with self._lock:
                self._conns.append(conn)
                self.sessions.append(session)
            threading.Thread(target=self._serve, args=(conn, session), daemon=True).start()

    def _serve(self, conn: socket.socket, session: Session) -> None:
        try:
            self._converse(conn, session)
        except (AuthFailed, ConnectionError, OSError) as exc:
            session.failure = session.failure or str(exc)
        finally:
            conn.close()  # Kafka closes a connection whose authentication failed

    def _converse(self, conn: socket.socket, session: Session) -> None:
        mechanism: PlainServer | ScramServer | None = None
        raw = False  # SaslHandshake v0 succeeded: raw tokens until the mechanism is done
        authenticated = False
        while True:
            payload = _read_frame(conn)
            if raw:
                assert mechanism is not None
                conn.sendall(_frame(mechanism.step(payload)))  # AuthFailed: close
                if mechanism.done:
                    raw, authenticated = False, True
                    session.logins.append(mechanism.user or "")
                continue
            key, version, correlation_id = struct.unpack_from(">hhi", payload)
            body = payload[8 + 2 + max(0, struct.unpack_from(">h", payload, 8)[0]) :]
            if is_flexible(key, version):
                body = body[skip_tagged_fields(body, 0) :]
            if authenticated:
                session.api_keys.append(key)
            if key == API_VERSIONS:
                conn.sendall(self._api_versions(version, correlation_id))
            elif key == SASL_HANDSHAKE and version <= self.handshake_max:
                name = decode(load_request_schema(key, version), body, exact=False).mechanism
                session.handshakes.append((version, name))
                ok = name in self.mechanisms
                conn.sendall(
                    _response(
                        key,
                        version,
                        correlation_id,
                        error_code=ErrorCode(0 if ok else UNSUPPORTED_SASL_MECHANISM),
                        mechanisms=list(self.mechanisms),
                    )
                )
                if not ok:
                    raise AuthFailed(f"unsupported mechanism {name}")
                mechanism = (
                    PlainServer(self.users) if name == "PLAIN" else ScramServer(self.users, name)
                )
                raw = version == 0
            elif key == SASL_AUTHENTICATE and mechanism is not None:
                request = decode(load_request_schema(key, version), body, exact=False)
                try:
                    reply = mechanism.step(request.auth_bytes)
                except AuthFailed as exc:
                    conn.sendall(
                        _response(
                            key,
                            version,
                            correlation_id,
                            error_code=ErrorCode(SASL_AUTHENTICATION_FAILED),
                            error_message=str(exc),
                        )
                    )
                    raise
                conn.sendall(_response(key, version, correlation_id, auth_bytes=reply))
                if mechanism.done:
                    authenticated = True
                    session.logins.append(mechanism.user or "")
            elif authenticated and key == METADATA:
                conn.sendall(self._metadata(version, correlation_id))
            else:
                raise AuthFailed(f"unexpected request key {key} v{version}")

    def _api_versions(self, version: int, correlation_id: int) -> bytes:
        if version > 3:  # as Kafka: a v0 body, UNSUPPORTED_VERSION, only key 18's range
            return _response(
                API_VERSIONS,
                0,
                correlation_id,
                error_code=ErrorCode(UNSUPPORTED_VERSION),
                api_keys=[{"api_key": API_VERSIONS, "min_version": 0, "max_version": 3}],
            )
        keys = [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(self.ranges.items())
        ]
        return _response(API_VERSIONS, version, correlation_id, api_keys=keys)

    def _metadata(self, version: int, correlation_id: int) -> bytes:
        partition = {"partition_index": 0, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}
        return _response(
            METADATA,
            version,
            correlation_id,
            brokers=[{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
            cluster_id="fake-sasl-cluster",
            controller_id=0,
            topics=[{"name": TOPIC, "partitions": [partition]}],
        )


def _read_frame(conn: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _read_exact(conn, 4))
    return _read_exact(conn, size)


def _read_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _response(key: int, version: int, correlation_id: int, **values: Any) -> bytes:
    """A response frame; fields the schema version lacks are left out."""
    api = {API_VERSIONS: "api_versions", METADATA: "metadata"}.get(key) or (
        "sasl_handshake" if key == SASL_HANDSHAKE else "sasl_authenticate"
    )
    cls = top_level(schema_module(api, version, "response"))
    names = {f.name for f in dataclasses.fields(cls)}
    entity = build(cls, **{k: v for k, v in values.items() if k in names})
    header = struct.pack(">i", correlation_id)
    if cls.__header_schema__.__version__ >= 1:
        header += b"\x00"
    return _frame(header + encode(entity))


# --------------------------------------------------------------------------------------
# Fixtures and a raw SASL client
# --------------------------------------------------------------------------------------


@pytest.fixture
def fake_v0() -> Iterator[FakeSaslBroker]:
    broker = FakeSaslBroker(handshake_max=0)
    yield broker
    broker.close()


@pytest.fixture
def fake_v1() -> Iterator[FakeSaslBroker]:
    broker = FakeSaslBroker(handshake_max=1)
    yield broker
    broker.close()


def connect(gw: GatewayProcess) -> KafkaConnection:
    return KafkaConnection("127.0.0.1", gw.port, timeout=OP_TIMEOUT_S)


def handshake_v0(conn: KafkaConnection, mechanism: str) -> tuple[int, list[str]]:
    conn.send(SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism=mechanism))
    body = conn.recv(flexible_header=False).body
    (error_code, count) = struct.unpack_from(">hi", body)
    mechanisms, pos = [], 6
    for _ in range(count):
        (length,) = struct.unpack_from(">h", body, pos)
        mechanisms.append(body[pos + 2 : pos + 2 + length].decode())
        pos += 2 + length
    return error_code, mechanisms


def raw_token(conn: KafkaConnection, token: bytes) -> bytes:
    """Send one raw token (no header) and return the broker's raw reply."""
    conn.send_frame(token)
    return conn.recv_frame()


def plain_login(conn: KafkaConnection, password: str = USERS["alice"]) -> None:
    assert handshake_v0(conn, "PLAIN")[0] == 0
    assert raw_token(conn, f"\0alice\0{password}".encode()) == b""


def scram_login(conn: KafkaConnection, mechanism: str = "SCRAM-SHA-256") -> None:
    # kafka-python's SCRAM client: written independently of the fake's server side.
    assert handshake_v0(conn, mechanism)[0] == 0
    scram = ScramClient("alice", USERS["alice"], mechanism)
    scram.process_server_first_message(raw_token(conn, scram.first_message()))
    scram.process_server_final_message(raw_token(conn, scram.final_message()))


def metadata(conn: KafkaConnection) -> MetadataResponse:
    request = MetadataRequest(
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return conn.request_entity(request)


def assert_rewritten_to(response: MetadataResponse, gw: GatewayProcess) -> None:
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, "127.0.0.1", gw.port)]
    assert [t.name for t in response.topics] == [TOPIC]


# --------------------------------------------------------------------------------------
# Raw sockets
# --------------------------------------------------------------------------------------


def test_handshake_v0_then_raw_plain_token_then_requests(fake_v0, gateway_factory):
    gw = gateway_factory(upstream=fake_v0.address)
    with connect(gw) as conn:
        conn.api_versions(3)  # answered by the gateway, before authentication
        error_code, mechanisms = handshake_v0(conn, "PLAIN")
        assert (error_code, mechanisms) == (0, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        assert raw_token(conn, b"\0alice\0alice-secret") == b""  # the broker's empty token
        assert_rewritten_to(metadata(conn), gw)
        assert_rewritten_to(metadata(conn), gw)
    (session,) = fake_v0.authenticated_sessions()
    assert session.handshakes == [(0, "PLAIN")] and session.logins == ["alice"]
    assert session.api_keys == [METADATA, METADATA]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_handshake_v0_then_two_raw_scram_rounds_then_requests(fake_v0, gateway_factory, mechanism):
    gw = gateway_factory(upstream=fake_v0.address)
    with connect(gw) as conn:
        scram_login(conn, mechanism)
        assert_rewritten_to(metadata(conn), gw)
    (session,) = fake_v0.authenticated_sessions()
    assert session.handshakes == [(0, mechanism)] and session.logins == ["alice"]


def test_token_sent_right_behind_the_handshake_waits_for_its_answer(fake_v0, gateway_factory):
    # Not what clients do, but the gateway must not read the token as a request: it holds
    # it until the broker accepted the handshake, then forwards it as a token.
    gw = gateway_factory(upstream=fake_v0.address)
    with connect(gw) as conn:
        header = encode_request_header(SASL_HANDSHAKE, 0, 1, "tests", header_version=1)
        handshake = _frame(header + encode(SaslHandshakeRequest(mechanism="PLAIN")))
        conn._sock.sendall(handshake + _frame(b"\0alice\0alice-secret"))  # one write
        assert conn.recv(flexible_header=False).body[:2] == b"\x00\x00"
        assert conn.recv_frame() == b""
        assert_rewritten_to(metadata(conn), gw)
    assert [s.logins for s in fake_v0.authenticated_sessions()] == [["alice"]]


def test_wrong_password_closes_the_client_and_the_gateway_serves_on(fake_v0, gateway_factory):
    gw = gateway_factory(upstream=fake_v0.address)
    with connect(gw) as conn:
        assert handshake_v0(conn, "PLAIN")[0] == 0
        conn.send_frame(b"\0alice\0wrong")
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)
    with connect(gw) as conn:
        scram = ScramClient("alice", "wrong", "SCRAM-SHA-256")
        assert handshake_v0(conn, "SCRAM-SHA-256")[0] == 0
        scram.process_server_first_message(raw_token(conn, scram.first_message()))
        conn.send_frame(scram.final_message())
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)
    with connect(gw) as conn:
        plain_login(conn)
        assert_rewritten_to(metadata(conn), gw)
    failures = [s.failure for s in fake_v0.sessions if s.failure and "password" in s.failure]
    assert len(failures) == 2
    assert "connection.protocol_violation" not in gw.log_text()


def test_unsupported_mechanism_answer_is_forwarded_then_the_connection_closes(
    fake_v0, gateway_factory
):
    gw = gateway_factory(upstream=fake_v0.address)
    with connect(gw) as conn:
        error_code, mechanisms = handshake_v0(conn, "GSSAPI")
        assert error_code == UNSUPPORTED_SASL_MECHANISM and "PLAIN" in mechanisms
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)


def test_second_v0_handshake_mid_connection_is_followed_too(fake_v0, gateway_factory):
    # Kafka re-authenticates with v1 only (KIP-368); a v0 one must not derail the gateway.
    gw = gateway_factory(upstream=fake_v0.address)
    with connect(gw) as conn:
        plain_login(conn)
        assert_rewritten_to(metadata(conn), gw)
        scram_login(conn)
        assert_rewritten_to(metadata(conn), gw)
        plain_login(conn)
        assert_rewritten_to(metadata(conn), gw)
    (session,) = fake_v0.authenticated_sessions()
    assert session.logins == ["alice", "alice", "alice"]
    assert [v for v, _ in session.handshakes] == [0, 0, 0]


def test_handshake_v1_and_authenticate_then_kip368_reauthentication(fake_v1, gateway_factory):
    gw = gateway_factory(upstream=fake_v1.address)
    with connect(gw) as conn:
        handshake_v1 = top_level(schema_module("sasl_handshake", 1, "request"))
        authenticate = top_level(schema_module("sasl_authenticate", 2, "request"))
        for _ in range(2):  # login, then re-authentication on the same connection
            handshake = conn.request(SASL_HANDSHAKE, 1, handshake_v1(mechanism="PLAIN"))
            assert handshake.body[:2] == b"\x00\x00"  # error code 0
            token = authenticate(auth_bytes=b"\0alice\0alice-secret")
            assert conn.request(SASL_AUTHENTICATE, 2, token).body[:2] == b"\x00\x00"
            assert_rewritten_to(metadata(conn), gw)
    (session,) = fake_v1.authenticated_sessions()
    assert session.handshakes == [(1, "PLAIN"), (1, "PLAIN")]
    assert session.logins == ["alice", "alice"]


def test_requests_before_authentication_close_the_connection_as_kafka_does(
    fake_v0, gateway_factory
):
    gw = gateway_factory(upstream=fake_v0.address)
    with connect(gw) as conn:
        request = MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        conn.send(METADATA, 12, request)
        with pytest.raises(ConnectionClosed):
            conn.recv(flexible_header=True)


# --------------------------------------------------------------------------------------
# Real clients
# --------------------------------------------------------------------------------------


def _confluent_topics(bootstrap: str, mechanism: str, password: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": "alice",
            "sasl.password": password,
            "socket.timeout.ms": int(OP_TIMEOUT_S * 1000),
            "logger": logging.getLogger("tests.librdkafka"),
        }
    )
    metadata = admin.list_topics(timeout=OP_TIMEOUT_S)
    host, port = bootstrap.rsplit(":", 1)
    assert {(b.host, b.port) for b in metadata.brokers.values()} == {(host, int(port))}
    return sorted(metadata.topics)


def _kafka_python_topics(bootstrap: str, mechanism: str, password: str) -> list[str]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        # kafka-python takes SCRAM credentials from the PLAIN settings too.
        sasl_plain_username="alice",
        sasl_plain_password=password,
        request_timeout_ms=int(OP_TIMEOUT_S * 1000),
    )
    try:
        return sorted(consumer.topics())
    finally:
        consumer.close()


CLIENTS = {"confluent": _confluent_topics, "kafka-python": _kafka_python_topics}


@pytest.mark.parametrize("handshake_max", [0, 1], ids=["raw-v0", "authenticate-v1"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_real_client_logs_in_through_the_gateway(gateway_factory, client, mechanism, handshake_max):
    fake = FakeSaslBroker(handshake_max=handshake_max)
    try:
        gw = gateway_factory(upstream=fake.address)
        assert CLIENTS[client](gw.bootstrap, mechanism, USERS["alice"]) == [TOPIC]
        sessions = fake.authenticated_sessions()
        assert sessions, "no client connection authenticated"
        for session in sessions:
            assert session.handshakes[0] == (handshake_max, mechanism)
            assert session.logins == ["alice"]
        assert "connection.protocol_violation" not in gw.log_text()
    finally:
        fake.close()
