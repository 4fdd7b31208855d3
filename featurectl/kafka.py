"""featurectl's Kafka-protocol path: one blocking connection to a gateway (or broker).

Why not kafka-python or confluent-kafka: neither sends UpdateFeatures (confluent-kafka's
Admin API has no features calls at all, and kafka-python has no UpdateFeatures request
type), and both are test-only dependencies here. The messages, their framing
and the connection are the gateway's own (``gateway.wire``), so featurectl encodes
ApiVersions and UpdateFeatures exactly as the gateway decodes them; what is left is
Python's ``ssl`` settings and the SASL PLAIN / SCRAM exchanges (RFC 4616, RFC 5802), which
are a few lines each.

``--command-config`` (a Kafka client properties file, as Kafka's own tools read) is
``featurectl.client_config``'s.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.update_features.v0.request import FeatureUpdateKey as FeatureUpdateKeyV0
from kio.schema.update_features.v0.request import UpdateFeaturesRequest as UpdateFeaturesV0
from kio.schema.update_features.v1.request import FeatureUpdateKey as FeatureUpdateKeyV1
from kio.schema.update_features.v1.request import UpdateFeaturesRequest as UpdateFeaturesV1
from kio.schema.update_features.v2.request import FeatureUpdateKey as FeatureUpdateKeyV2
from kio.schema.update_features.v2.request import UpdateFeaturesRequest as UpdateFeaturesV2

from gateway import __version__
from gateway.features.validation import FeatureUpdate, UpdateResult, UpgradeType
from gateway.features.znode import Finalized
from gateway.interceptors.api_versions import read_broker_software
from gateway.wire import (
    API_VERSIONS,
    UPDATE_FEATURES,
    KafkaConnection,
    WrongAnswer,
    api_versions_request,
    decode_response,
    decode_with_unknown_tags,
    encode_request,
)

from .client_config import ClientConfig

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
UNSUPPORTED_VERSION = 35
_CLIENT_ID = "featurectl"

VersionRange = tuple[int, int]


class KafkaClientError(Exception):
    """The gateway could not be reached, or the connection failed (exit 2)."""


# --------------------------------------------------------------------------------------
# SCRAM (RFC 5802), client side
# --------------------------------------------------------------------------------------


class ScramClient:
    """The two client messages of a SCRAM exchange and the check of the server's proof."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None):
        self._hash = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self._password = password.encode()
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={name},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(item.split("=", 1) for item in text.split(","))
        if not attrs.get("r", "").startswith(self._nonce):
            raise KafkaClientError("SCRAM: the server's nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac(
            self._hash, self._password, base64.b64decode(attrs["s"]), int(attrs["i"])
        )
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(item.split("=", 1) for item in server_final.decode().split(","))
        if "e" in attrs:
            raise KafkaClientError(f"SCRAM: the server refused: {attrs['e']}")
        if base64.b64decode(attrs.get("v", "")) != self._server_signature:
            raise KafkaClientError("SCRAM: the server's signature does not match")

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()


# --------------------------------------------------------------------------------------
# The connection
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Described:
    """What one ApiVersions v3+ answer says about features (KIP-584)."""

    supported: dict[str, VersionRange]
    finalized: Finalized
    api_ranges: dict[int, VersionRange]
    broker_software: tuple[str, str] | None


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too); ValueError when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


class KafkaClient:
    """One connection: TLS if configured, ApiVersions, then SASL if configured."""

    def __init__(self, address: str, config: ClientConfig, timeout: float) -> None:
        self.address = address
        self._config = config
        self._timeout = timeout
        self._conn: KafkaConnection | None = None

    def __enter__(self) -> KafkaClient:
        host, port = split_address(self.address)
        tls = self._tls_context() if self._config.tls else None
        try:
            self._conn = KafkaConnection.open(
                host, port, timeout_s=self._timeout, tls=tls, client_id=_CLIENT_ID
            )
        except ssl.SSLError as exc:
            raise KafkaClientError(f"TLS handshake with {self.address} failed: {exc}") from None
        except OSError as exc:
            raise KafkaClientError(f"cannot connect to {self.address}: {exc}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            self._conn.close()

    def _tls_context(self) -> ssl.SSLContext:
        cfg = self._config
        context = ssl.create_default_context(cafile=cfg.ssl_ca)
        context.check_hostname = cfg.ssl_check_hostname
        if cfg.ssl_certificate:
            context.load_cert_chain(cfg.ssl_certificate, cfg.ssl_key, cfg.ssl_key_password)
        return context

    def roundtrip(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send one request; the response body (after its header)."""
        assert self._conn is not None
        try:
            return self._conn.roundtrip(api_key, version, body)
        except WrongAnswer:
            raise KafkaClientError(f"{self.address} answered another request") from None
        except OSError as exc:  # ConnectionError and socket timeouts included
            raise KafkaClientError(f"{self.address}: {exc}") from None

    def request(self, entity: Any) -> Any:
        api_key, version = entity.__api_key__, entity.__version__
        body = self.roundtrip(api_key, version, encode_request(entity))
        return decode_response(api_key, version, body)

    # -- ApiVersions -----------------------------------------------------------------
    def describe(self) -> Described:
        """ApiVersions v4 (v3 from a peer that refuses v4): features and API ranges.

        v4 first: below v4, supported features whose minimum is 0 are left out, and a
        gateway's ranges usually start at 0.
        """
        version = 4
        body = self.roundtrip(API_VERSIONS, 4, encode_request(_api_versions(4)))
        if struct.unpack_from(">h", body)[0] == UNSUPPORTED_VERSION:
            version = 3
            body = self.roundtrip(API_VERSIONS, 3, encode_request(_api_versions(3)))
        # The gateway's KIP-885 tags are unknown to kio's schema: set them aside.
        answer, _unknown = decode_with_unknown_tags(API_VERSIONS, version, body)
        if int(answer.error_code) != 0:
            raise KafkaClientError(
                f"{self.address} answered ApiVersions v{version} with error "
                f"{int(answer.error_code)}; it needs ApiVersions v3+ to describe features"
            )
        return Described(
            supported={
                f.name: (int(f.min_version), int(f.max_version)) for f in answer.supported_features
            },
            finalized=Finalized(
                {f.name: int(f.max_version_level) for f in answer.finalized_features},
                int(answer.finalized_features_epoch),
            ),
            api_ranges={
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys
            },
            broker_software=read_broker_software(body, version=version),
        )

    # -- SASL ------------------------------------------------------------------------
    def authenticate(self) -> None:
        """SaslHandshake v1 then SaslAuthenticate v1 tokens, when the config asks for SASL."""
        cfg = self._config
        if not cfg.sasl:
            return
        assert cfg.sasl_username is not None and cfg.sasl_password is not None
        answer = self.request(SaslHandshakeRequest(mechanism=cfg.sasl_mechanism))
        if int(answer.error_code) != 0:
            raise KafkaClientError(
                f"{self.address} refused SASL mechanism {cfg.sasl_mechanism} "
                f"(error {int(answer.error_code)}; it offers {', '.join(answer.mechanisms)})"
            )
        if cfg.sasl_mechanism == "PLAIN":
            token = f"\0{cfg.sasl_username}\0{cfg.sasl_password}".encode()
            self._sasl_token(token)
            return
        scram = ScramClient(cfg.sasl_mechanism, cfg.sasl_username, cfg.sasl_password)
        server_first = self._sasl_token(scram.first())
        scram.verify(self._sasl_token(scram.final(server_first)))

    def _sasl_token(self, token: bytes) -> bytes:
        answer = self.request(SaslAuthenticateRequest(auth_bytes=token))
        if int(answer.error_code) != 0:
            raise KafkaClientError(
                f"SASL authentication with {self.address} failed: {answer.error_message}"
            )
        return bytes(answer.auth_bytes)

    # -- UpdateFeatures --------------------------------------------------------------
    def update_features(
        self, version: int, updates: list[FeatureUpdate], *, validate_only: bool = False
    ) -> tuple[list[UpdateResult], int, str | None]:
        """(per-feature results, top-level error code, its message).

        v0 has no UpgradeType (a downgrade is AllowDowngrade) and no ValidateOnly;
        v2 answers all or nothing with no per-feature results, so every update gets the
        top-level outcome.
        """
        if version == 0:
            if validate_only:
                raise ValueError("UpdateFeatures v0 has no ValidateOnly")
            request: Any = UpdateFeaturesV0(
                feature_updates=tuple(
                    FeatureUpdateKeyV0(
                        feature=u.feature,
                        max_version_level=u.level,
                        allow_downgrade=u.upgrade_type != UpgradeType.UPGRADE,
                    )
                    for u in updates
                )
            )
        else:
            request_type, key_type = (
                (UpdateFeaturesV1, FeatureUpdateKeyV1)
                if version == 1
                else (UpdateFeaturesV2, FeatureUpdateKeyV2)
            )
            request = request_type(
                feature_updates=tuple(
                    key_type(
                        feature=u.feature,
                        max_version_level=u.level,
                        upgrade_type=int(u.upgrade_type),
                    )
                    for u in updates
                ),
                validate_only=validate_only,
            )
        answer = self.request(request)
        code, message = int(answer.error_code), answer.error_message
        results = getattr(answer, "results", None)
        if results is None or (code != 0 and not results):
            return [UpdateResult(u.feature, code, message) for u in updates], code, message
        return (
            [UpdateResult(r.feature, int(r.error_code), r.error_message) for r in results],
            code,
            message,
        )


def _api_versions(version: int) -> Any:
    return api_versions_request(version, "featurectl", __version__)


def update_features_range(described: Described) -> VersionRange | None:
    return described.api_ranges.get(UPDATE_FEATURES)


__all__ = [
    "Described",
    "KafkaClient",
    "KafkaClientError",
    "ScramClient",
    "split_address",
    "update_features_range",
]
