"""What the gateway knows about each Kafka API: name, version range, flexibility.

The facts come from Kafka's own message specs: ``scripts/kafka-protocol`` reads them
from the ``kafka-clients`` jar of every Apache Kafka release and writes
``data/kafka_protocol.json``, committed and stamped with the releases it read. An API's
range is the union over those releases (every version any Kafka accepted, 4.0's removed
ones included), so the gateway never narrows what the broker behind it offers.

Which versions the gateway can *decode* is another question: the interceptors decode
with ``kio`` (``has_schema``), whose schemas are one Kafka release's snapshot. Only the
APIs the gateway rewrites or answers are limited to those (``gateway.interceptors``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

API_VERSIONS = 18
PRODUCE = 0
FETCH = 1
METADATA = 3
FIND_COORDINATOR = 10
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
UPDATE_FEATURES = 57
DESCRIBE_CLUSTER = 60
CONTROLLED_SHUTDOWN = 7

Entity = Literal["request", "response"]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    # First version whose request uses header v2 and whose response uses header v1;
    # None when no version of any release is flexible.
    first_flexible: int | None

    def is_flexible(self, version: int) -> bool:
        # Versions above the newest spec keep the flexibility of the newest one:
        # Kafka never turns a flexible API back into a classic one.
        return self.first_flexible is not None and version >= self.first_flexible

    def request_header_version(self, version: int) -> int:
        if self.key == CONTROLLED_SHUTDOWN and version == 0:
            return 0
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions responses always use header v0: clients parse them before they
        # know which versions the broker speaks (KIP-511).
        if self.key == API_VERSIONS:
            return 0
        return 1 if self.is_flexible(version) else 0


@cache
def protocol_data() -> dict[str, Any]:
    """``data/kafka_protocol.json`` as written by ``scripts/kafka-protocol``."""
    text = resources.files("gateway").joinpath("data/kafka_protocol.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _specs() -> dict[int, ApiSpec]:
    specs = {}
    for key, api in protocol_data()["apis"].items():
        low, high = api["versions"]
        specs[int(key)] = ApiSpec(int(key), api["name"], low, high, api["flexible_from"])
    return specs


# Read at import (18 kB of JSON, well under a millisecond): a request header's parse
# looks its key up here, and a plain dict lookup is the cheapest there is.
_SPECS = _specs()


def api_spec(key: int) -> ApiSpec | None:
    """The spec of an API key, or None for a key no Kafka release read has."""
    return _SPECS.get(key)


def api_range(key: int) -> tuple[int, int] | None:
    """Every version of ``key`` some Kafka release accepted, (min, max); None for an
    unknown key."""
    spec = _SPECS.get(key)
    return None if spec is None else (spec.min_version, spec.max_version)


def api_name(key: int) -> str:
    """A stable, bounded label for metrics and logs ("Unknown" for foreign keys)."""
    spec = _SPECS.get(key)
    return spec.name if spec is not None else "Unknown"


def known_api_keys() -> list[int]:
    return sorted(_SPECS)


def api_key_of(name: str) -> int | None:
    """The key of an API named as Kafka names it ("ConsumerGroupHeartbeat")."""
    return _keys_by_name().get(name)


@cache
def _keys_by_name() -> dict[str, int]:
    return {spec.name: key for key, spec in _SPECS.items()}


def has_schema(key: int, version: int, entity: EntityType = EntityType.request) -> bool:
    """Whether the gateway's codec (kio) can decode and encode this version."""
    name = api_key_map.get(key)
    return name is not None and entity in schema_name_map[name].get(version, {})


def codec_version(key: int, version: int, entity: Entity) -> int | None:
    """The version whose kio schema reads and writes ``version``'s bytes: itself, or
    the lower version Kafka's specs give the same wire layout (ApiVersions responses
    v5 and v4); None when kio has neither."""
    kind = EntityType.request if entity == "request" else EntityType.response
    if has_schema(key, version, kind):
        return version
    api = protocol_data()["apis"].get(str(key))
    same = None if api is None else api["same_layout"][entity].get(str(version))
    if same is not None and has_schema(key, same, kind):
        return int(same)
    return None


def request_schema(key: int, version: int) -> Any:
    """kio's request class that reads and writes ``version`` (``codec_version``); raises
    kio's UnknownEntity when there is none."""
    return load_request_schema(key, _codec_or(key, version, "request"))


def response_schema(key: int, version: int) -> Any:
    """kio's response class that reads and writes ``version`` (``codec_version``);
    raises kio's UnknownEntity when there is none."""
    return load_response_schema(key, _codec_or(key, version, "response"))


def _codec_or(key: int, version: int, entity: Entity) -> int:
    # Without a codec version the version itself goes to kio, which raises its own error.
    found = codec_version(key, version, entity)
    return version if found is None else found
