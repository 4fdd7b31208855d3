"""``--command-config``: the Kafka client properties file featurectl's Kafka-protocol path
(``featurectl.kafka``) connects with, read as Kafka's own tools read it (Java
``.properties``, the Java clients' key names and librdkafka's PEM-file ones), checked
before any connection is made.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

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


__all__ = [
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "SUPPORTED_KEYS",
    "ClientConfig",
    "CommandConfigError",
    "client_config",
    "load_command_config",
    "parse_jaas",
    "read_properties",
]
