"""The gateway's own ApiVersions answer (KIP-35, KIP-511, KIP-584, KIP-885).

The gateway never forwards ApiVersions: it answers with the negotiated ranges (what it
and the upstream can both handle, capped by feature levels), so a client never learns
a version one side would reject. Behaviour copied from Kafka's broker:

* A version the gateway does not serve (newer than kio knows, or outside key 18's
  advertised range): the body is not parsed; the answer is in the **v0 format** with
  UNSUPPORTED_VERSION (35) and ApiKeys holding only key 18 with its advertised range,
  so the client retries with a version it now knows works.
* v3+ carries ClientSoftwareName/Version (KIP-511). Both must fully match Kafka's
  shipped regex; otherwise, or when the body does not decode, the answer is
  INVALID_REQUEST (42) with an empty ApiKeys list, the connection stays open and the
  client stays "unknown".
* Features (v3+): for requests below v4, supported features whose min version is 0 are
  left out (older clients cannot represent them); finalized features at level 0 are
  always left out.

KIP-885 (broker software; never shipped in Kafka): every v3+ answer carries two extra
**top-level tagged fields**, BrokerSoftwareName and BrokerSoftwareVersion, as compact
strings. Tagged fields are skipped by every flexible-version parser that does not know
them, so real clients are unaffected (kio itself is an exception: it raises on unknown
tags, which is why the gateway strips them before decoding, see ``_tagged``).

Tag numbers: **10000** (name) and **10001** (version) by default, configurable through
``SoftwareTags``. Kafka numbers the tags of a message from 0 upwards (ApiVersions uses
0-3 today), so a number far above them cannot collide with any tag Kafka is likely to
add, and 10000 still fits a 2-byte varint. The same tags are used at the top level of
DescribeCluster responses (see ``add_broker_software``); ``describe_cluster`` puts them on
each broker entry as well.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta, i64

from ..protocol import (
    API_VERSIONS,
    Incomplete,
    Malformed,
    RequestHeader,
    api_spec,
    encode_response,
    read_compact_string,
    read_top_level_tags,
    response_header,
    response_schema,
    skip_tagged_fields,
    splice_tagged_fields,
    write_uvarint,
)
from ..versions import UNKNOWN_SOFTWARE, BrokerSoftware, VersionRange

# Kafka's ApiVersionsRequest.isValid() pattern, as shipped (KIP-511).
SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

FIRST_TAGGED_VERSION = 3  # ApiVersions is flexible (and carries client software) from v3
FEATURES_MIN_ZERO_VERSION = 4  # v4 lets SupportedFeatures carry min version 0


class SoftwareTags(NamedTuple):
    """Tag numbers of the KIP-885 fields."""

    name: int = 10000
    version: int = 10001


DEFAULT_SOFTWARE_TAGS = SoftwareTags()


@dataclass(frozen=True, slots=True)
class ApiVersionsAnswer:
    """The gateway's ApiVersions response and what it learned from the request."""

    payload: bytes  # response header v0 + body; the caller frames it
    error_code: int
    client_software: tuple[str, str] | None  # (name, version) when valid (v3+ only)
    response_version: int  # schema version of the body (0 for a too-new request)


def _encode_compact_string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return write_uvarint(len(raw) + 1) + raw


def software_tag_values(
    software: BrokerSoftware | tuple[str, str], tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS
) -> dict[int, bytes]:
    """The raw tagged-field values (compact strings) for a broker software pair."""
    name, version = software
    return {tags.name: _encode_compact_string(name), tags.version: _encode_compact_string(version)}


def add_broker_software(
    api_key: int,
    version: int,
    body: bytes | memoryview,
    software: BrokerSoftware | tuple[str, str],
    tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS,
) -> bytes:
    """Splice the KIP-885 fields into the top-level tagged section of a response body.

    For ApiVersions v3+ and, for now at its top level, DescribeCluster (any version;
    all are flexible). Raises ValueError for a non-flexible version.
    """
    return splice_tagged_fields(api_key, version, body, software_tag_values(software, tags))


def read_broker_software(
    data: bytes | memoryview,
    *,
    api_key: int = API_VERSIONS,
    version: int = 3,
    tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS,
) -> tuple[str, str] | None:
    """Read KIP-885 BrokerSoftwareName/Version back from a gateway's response.

    Public helper for UX tools. ``data`` is either the response body or the whole
    response payload (header + body, no length prefix); both are tried. ``version`` is
    the version the response was requested at (ApiVersions v3 and v4 share a layout).
    Returns None when the fields are absent (a real Kafka broker, or a v0-v2 response)
    or the bytes are not such a response.
    """
    data = bytes(data)
    header_version = api_spec(api_key).response_header_version(version)  # type: ignore[union-attr]
    for start in _body_starts(data, header_version):
        try:
            fields = read_top_level_tags(api_key, version, data[start:])
        except (Malformed, ValueError):
            continue
        if tags.name not in fields or tags.version not in fields:
            return None
        try:
            name, _ = read_compact_string(fields[tags.name], 0)
            value, _ = read_compact_string(fields[tags.version], 0)
        except (Incomplete, Malformed):
            return None
        if name is None or value is None:
            return None
        return name, value
    return None


def _body_starts(data: bytes, header_version: int) -> list[int]:
    # The body alone first, then after a v0 (correlation id) or v1 (+ tags) header.
    starts = [0]
    if header_version == 0:
        starts.append(4)
    else:
        with contextlib.suppress(Incomplete, Malformed):
            starts.append(skip_tagged_fields(data, 4))
    return starts


def read_client_software(body: bytes | memoryview) -> tuple[str | None, str | None]:
    """ClientSoftwareName and ClientSoftwareVersion of a v3+ request: its first two
    fields in every version (v5 adds ClusterId and NodeId after them, which the answer
    does not need); (None, None) when they cannot be read."""
    try:
        name, pos = read_compact_string(body, 0)
        version, _ = read_compact_string(body, pos)
    except (Incomplete, Malformed):
        return None, None
    return name, version


def client_software_valid(name: str, version: str) -> bool:
    """KIP-511 validation exactly as Kafka ships it."""
    return bool(SOFTWARE_PATTERN.fullmatch(name) and SOFTWARE_PATTERN.fullmatch(version))


def answer_api_versions(
    header: RequestHeader,
    body: bytes | memoryview,
    ranges: Mapping[int, VersionRange],
    *,
    supported_features: Mapping[str, VersionRange] | None = None,
    finalized_features: Mapping[str, int | VersionRange] | None = None,
    finalized_epoch: int = -1,
    broker_software: BrokerSoftware | tuple[str, str] | None = UNKNOWN_SOFTWARE,
    software_tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS,
) -> ApiVersionsAnswer:
    """Build the ApiVersions response payload for a client request.

    ``body`` is the request body (after the header). ``ranges`` are the negotiated
    ranges to advertise. ``finalized_features`` maps a feature to its level, or to
    (min_level, max_level) for the ZooKeeper-mode layout that still has a min level.
    ``broker_software`` goes into the KIP-885 tags of v3+ answers (None: no tags).
    """
    version = header.api_version
    spec = api_spec(API_VERSIONS)
    assert spec is not None
    own_range = ranges.get(API_VERSIONS, (spec.min_version, spec.max_version))
    served_max = min(own_range[1], spec.max_version)
    served_min = max(own_range[0], spec.min_version)
    if not served_min <= version <= served_max:
        # Never parse the body of a version we do not serve; answer in v0, which every
        # client can read, with the range it should retry within.
        return _answer(
            header.correlation_id,
            0,
            ErrorCode.unsupported_version,
            {API_VERSIONS: (served_min, served_max)},
            None,
        )

    client_software: tuple[str, str] | None = None
    if version >= FIRST_TAGGED_VERSION:
        name, software_version = read_client_software(body)
        if (
            not isinstance(name, str)
            or not isinstance(software_version, str)
            or not client_software_valid(name, software_version)
        ):
            return _answer(
                header.correlation_id,
                version,
                ErrorCode.invalid_request,
                {},
                None,
                broker_software=broker_software,
                software_tags=software_tags,
            )
        client_software = (name, software_version)

    features = None
    if version >= FIRST_TAGGED_VERSION:
        features = _features(
            version, supported_features or {}, finalized_features or {}, finalized_epoch
        )
    answer = _answer(
        header.correlation_id,
        version,
        ErrorCode.none,
        ranges,
        features,
        broker_software=broker_software,
        software_tags=software_tags,
    )
    return ApiVersionsAnswer(answer.payload, 0, client_software, version)


def _features(
    version: int,
    supported: Mapping[str, VersionRange],
    finalized: Mapping[str, int | VersionRange],
    epoch: int,
) -> dict[str, Any]:
    schema = response_schema(API_VERSIONS, version)
    module = importlib.import_module(schema.__module__)
    supported_cls = module.SupportedFeatureKey
    finalized_cls = module.FinalizedFeatureKey
    supported_keys = tuple(
        supported_cls(name=name, min_version=i16(low), max_version=i16(high))
        for name, (low, high) in sorted(supported.items())
        if version >= FEATURES_MIN_ZERO_VERSION or low != 0
    )
    finalized_keys = []
    for name, level in sorted(finalized.items()):
        low, high = (level, level) if isinstance(level, int) else level
        if high == 0:
            continue  # level 0 means "not enabled": Kafka never lists it
        finalized_keys.append(
            finalized_cls(name=name, max_version_level=i16(high), min_version_level=i16(low))
        )
    return {
        "supported_features": supported_keys,
        "finalized_features": tuple(finalized_keys),
        "finalized_features_epoch": i64(epoch),
    }


def _answer(
    correlation_id: int,
    version: int,
    error: ErrorCode,
    ranges: Mapping[int, VersionRange],
    features: dict[str, Any] | None,
    *,
    broker_software: BrokerSoftware | tuple[str, str] | None = None,
    software_tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS,
) -> ApiVersionsAnswer:
    schema = response_schema(API_VERSIONS, version)
    module = importlib.import_module(schema.__module__)
    api_keys = tuple(
        module.ApiVersion(api_key=i16(key), min_version=i16(low), max_version=i16(high))
        for key, (low, high) in sorted(ranges.items())
    )
    kwargs: dict[str, Any] = {"error_code": error, "api_keys": api_keys}
    if version >= 1:
        kwargs["throttle_time"] = i32Timedelta.parse(datetime.timedelta(0))
    if features:
        kwargs.update(features)
    body = encode_response(schema(**kwargs))
    if version >= FIRST_TAGGED_VERSION and broker_software is not None:
        body = add_broker_software(API_VERSIONS, version, body, broker_software, software_tags)
    # ApiVersions responses always use response header v0 (KIP-511).
    payload = response_header(correlation_id, 0) + body
    return ApiVersionsAnswer(payload, int(error), None, version)


__all__ = [
    "DEFAULT_SOFTWARE_TAGS",
    "SOFTWARE_PATTERN",
    "ApiVersionsAnswer",
    "SoftwareTags",
    "add_broker_software",
    "answer_api_versions",
    "client_software_valid",
    "read_broker_software",
    "software_tag_values",
]
