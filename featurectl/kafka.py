"""featurectl's Kafka-protocol path: one blocking connection to a gateway (or broker).

Why not kafka-python or confluent-kafka: neither sends UpdateFeatures (confluent-kafka's
Admin API has no features calls at all, and kafka-python has no UpdateFeatures request
type), and both are test-only dependencies here. The messages, their framing
and the connection are the gateway's own (``gateway.wire``), so featurectl encodes
ApiVersions and UpdateFeatures exactly as the gateway decodes them; what is left is
Python's ``ssl`` settings and the SASL PLAIN / SCRAM exchanges (RFC 4616, RFC 5802), which
are a few lines each.

``--command-config`` reads a Kafka client properties file, as Kafka's own tools do.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
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

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
UNSUPPORTED_VERSION = 35
_CLIENT_ID = "featurectl"

VersionRange = tuple[int, int]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# The --command-config keys featurectl honours (Java client names, and librdkafka's
# PEM-file names, which is what Python's ssl module can load). Listed in --help.
SUPPORTED_KEYS: Mapping[str, str] = {
    "security.protocol": "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL",
    "ssl.ca.location": "PEM file of the CA(s) to trust (librdkafka's name)",
    "ssl.truststore.location": "the same, with ssl.truststore.type=PEM (not JKS/PKCS12)",
    "ssl.truststore.type": "PEM only",
    "ssl.certificate.location": "client certificate PEM (mutual TLS)",
    "ssl.key.location": "its private key PEM",
    "ssl.key.password": "the key's password, if encrypted",
    "ssl.endpoint.identification.algorithm": "https (default) checks the host name; empty: not",
    "sasl.mechanism": "PLAIN (default), SCRAM-SHA-256 or SCRAM-SHA-512",
    "sasl.username": "SASL user (librdkafka's name)",
    "sasl.password": "its password",
    "sasl.jaas.config": 'the Java form: ...LoginModule required username="u" password="p";',
}
# Keys a Kafka client file commonly holds that do not matter to featurectl's single
# request; accepted silently so an operator's existing admin.properties works as is.
_IGNORED_KEYS = frozenset(
    {"client.id", "request.timeout.ms", "default.api.timeout.ms", "retries", "retry.backoff.ms"}
)


class KafkaClientError(Exception):
    """The gateway could not be reached, or the connection failed (exit 2)."""


class CommandConfigError(ValueError):
    """A --command-config file featurectl cannot honour (exit 2)."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """TLS and SASL settings of the connection (from --command-config)."""

    security_protocol: str = "PLAINTEXT"
    ssl_ca: str | None = None
    ssl_certificate: str | None = None
    ssl_key: str | None = None
    ssl_key_password: str | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    # Keys present in the file that featurectl does not know (warned about, not fatal).
    unknown_keys: tuple[str, ...] = ()

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


def read_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` as Kafka's tools read them: ``key=value`` or ``key: value``,
    ``#``/``!`` comments, and a trailing backslash continuing the line (multi-line
    ``sasl.jaas.config`` values are written that way)."""
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)", logical)
        if match:
            key, value = match.group(1), match.group(2)
            props[key] = value.strip()
        logical = ""
    return props


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas(text: str) -> tuple[str | None, str | None]:
    """(username, password) from a ``sasl.jaas.config`` value (PlainLoginModule or
    ScramLoginModule, options in double quotes)."""
    options = {name: value.replace('\\"', '"') for name, value in _JAAS_OPTION.findall(text)}
    return options.get("username"), options.get("password")


def load_command_config(path: str) -> ClientConfig:
    """The ClientConfig of a Kafka client properties file; CommandConfigError says why not."""
    try:
        with open(path, encoding="utf-8") as handle:
            props = read_properties(handle.read())
    except OSError as exc:
        raise CommandConfigError(f"cannot read --command-config {path}: {exc.strerror}") from None
    return client_config(props)


def client_config(props: Mapping[str, str]) -> ClientConfig:
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise CommandConfigError(
            f"security.protocol {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    ca = props.get("ssl.ca.location")
    if "ssl.truststore.location" in props:
        if props.get("ssl.truststore.type", "JKS").upper() != "PEM":
            raise CommandConfigError(
                "ssl.truststore.location needs ssl.truststore.type=PEM (featurectl cannot read "
                "JKS/PKCS12 stores); or give the CA as a PEM file in ssl.ca.location"
            )
        ca = props["ssl.truststore.location"]
    if any(key.startswith("ssl.keystore.") for key in props):
        raise CommandConfigError(
            "ssl.keystore.* is not supported: give the client certificate and key as PEM files "
            "in ssl.certificate.location and ssl.key.location"
        )
    mechanism = props.get("sasl.mechanism", "PLAIN").upper()
    if mechanism not in SASL_MECHANISMS:
        raise CommandConfigError(
            f"sasl.mechanism {mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}"
        )
    username, password = props.get("sasl.username"), props.get("sasl.password")
    if "sasl.jaas.config" in props:
        jaas_user, jaas_password = parse_jaas(props["sasl.jaas.config"])
        username, password = username or jaas_user, password or jaas_password
    if protocol.startswith("SASL_") and (username is None or password is None):
        raise CommandConfigError(
            f"security.protocol {protocol} needs sasl.username and sasl.password "
            '(or sasl.jaas.config with username="..." password="...")'
        )
    for path in (ca, props.get("ssl.certificate.location"), props.get("ssl.key.location")):
        if path is not None and not os.path.isfile(path):
            raise CommandConfigError(f"TLS file {path} does not exist")
    unknown = sorted(set(props) - set(SUPPORTED_KEYS) - _IGNORED_KEYS)
    return ClientConfig(
        security_protocol=protocol,
        ssl_ca=ca,
        ssl_certificate=props.get("ssl.certificate.location"),
        ssl_key=props.get("ssl.key.location"),
        ssl_key_password=props.get("ssl.key.password"),
        ssl_check_hostname=props.get("ssl.endpoint.identification.algorithm", "https") != "",
        sasl_mechanism=mechanism,
        sasl_username=username,
        sasl_password=password,
        unknown_keys=tuple(unknown),
    )


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
    "SUPPORTED_KEYS",
    "ClientConfig",
    "CommandConfigError",
    "Described",
    "KafkaClient",
    "KafkaClientError",
    "ScramClient",
    "client_config",
    "load_command_config",
    "parse_jaas",
    "read_properties",
    "split_address",
    "update_features_range",
]
