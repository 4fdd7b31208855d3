"""What the gateway knows about each Kafka API: name, version range, flexibility.

The facts come from ``kio``'s generated schemas (Kafka's own message JSON files), so
there is one source of truth and no hand-copied table to drift. Lookups are cached per
key: the first request of a key pays for importing its schemas, later ones a dict hit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from kio.index import load_request_schema
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


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    # First version whose request uses header v2 and whose response uses header v1;
    # None when no version known to kio is flexible.
    first_flexible: int | None

    def is_flexible(self, version: int) -> bool:
        # Versions above the newest schema keep the flexibility of the newest one:
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
def api_spec(key: int) -> ApiSpec | None:
    """The spec of an API key, or None for a key this gateway does not know."""
    name = api_key_map.get(key)
    if name is None:
        return None
    versions = sorted(schema_name_map[name])
    first_flexible = next((v for v in versions if load_request_schema(key, v).__flexible__), None)
    return ApiSpec(key, display_name(name), versions[0], versions[-1], first_flexible)


def api_range(key: int) -> tuple[int, int] | None:
    """The versions kio has schemas for, (min, max); None for an unknown key.

    Read from kio's index alone: unlike ``api_spec`` it imports no schema module (a
    process that only negotiates, such as a multi-worker gateway's supervisor, never
    loads the ~17 MB of schemas that telling flexible versions apart takes).
    """
    name = api_key_map.get(key)
    if name is None:
        return None
    versions = schema_name_map[name]
    return min(versions), max(versions)


def api_name(key: int) -> str:
    """A stable, bounded label for metrics and logs ("unknown" for foreign keys)."""
    spec = api_spec(key)
    return spec.name if spec is not None else "Unknown"


def known_api_keys() -> list[int]:
    return sorted(api_key_map)


def display_name(snake: str) -> str:
    # "describe_cluster" -> "DescribeCluster", the names Kafka's own metrics use.
    return "".join(part.capitalize() for part in snake.split("_"))


def has_schema(key: int, version: int, entity: EntityType = EntityType.request) -> bool:
    name = api_key_map.get(key)
    return name is not None and entity in schema_name_map[name].get(version, {})
