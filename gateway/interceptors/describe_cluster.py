"""KIP-885 per broker in DescribeCluster: BrokerSoftwareName/Version on each broker entry.

kio encodes DescribeCluster but knows nothing of these tags, so they are spliced into
each broker's own tagged-field section after encoding. DescribeCluster is flexible from
v0, so every broker entry ends in such a section; its layout (v0-v2) is:

    BrokerId int32, Host compact string, Port int32, Rack compact nullable string,
    IsFenced bool (v2+), tagged fields

The response-level tags (the answering broker's software) are added separately by
``api_versions.add_broker_software``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..protocol import (
    INT32,
    read_compact_string,
    read_tagged_fields,
    read_uvarint,
    skip_compact_string,
    skip_tagged_fields,
    write_tagged_fields,
)
from ..versions import BrokerSoftware
from .api_versions import DEFAULT_SOFTWARE_TAGS, SoftwareTags, software_tag_values

# Which software a broker runs, by node id; None when the gateway cannot know.
SoftwareLookup = Callable[[int], BrokerSoftware | None]


def _broker_entries(version: int, body: bytes) -> Iterator[tuple[int, int, int]]:
    """(node id, start of its tagged section, end of the entry) for each broker entry."""
    pos = 4 + 2  # ThrottleTimeMs, ErrorCode
    pos = skip_compact_string(body, pos)  # ErrorMessage
    if version >= 1:
        pos += 1  # EndpointType
    pos = skip_compact_string(body, pos)  # ClusterId
    pos += 4  # ControllerId
    count_plus_one, pos = read_uvarint(body, pos)
    for _ in range(max(count_plus_one - 1, 0)):
        (node_id,) = INT32.unpack_from(body, pos)
        pos = skip_compact_string(body, pos + 4)  # Host
        pos = skip_compact_string(body, pos + 4)  # Port, then Rack
        if version >= 2:
            pos += 1  # IsFenced
        tags_start = pos
        pos = skip_tagged_fields(body, pos)
        yield node_id, tags_start, pos


def add_software_per_broker(
    version: int, body: bytes, lookup: SoftwareLookup, tags: SoftwareTags
) -> bytes:
    """Return a DescribeCluster response body whose broker entries carry KIP-885 tags."""
    out = bytearray()
    copied = 0
    for node_id, tags_start, end in _broker_entries(version, body):
        software = lookup(node_id)
        if software is None:
            continue
        existing, _ = read_tagged_fields(body, tags_start)
        existing.update(software_tag_values(software, tags))
        out += body[copied:tags_start]
        out += write_tagged_fields(existing)
        copied = end
    out += body[copied:]
    return bytes(out)


def read_software_per_broker(
    version: int, body: bytes, tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS
) -> dict[int, tuple[str, str]]:
    """Public read-back for UX tools: {node id: (software name, version)} of a gateway's
    DescribeCluster response body (brokers without the tags are left out)."""
    found = {}
    for node_id, tags_start, _end in _broker_entries(version, body):
        fields, _ = read_tagged_fields(body, tags_start)
        name, version_value = fields.get(tags.name), fields.get(tags.version)
        if name is not None and version_value is not None:
            found[node_id] = (
                read_compact_string(name, 0)[0] or "",
                read_compact_string(version_value, 0)[0] or "",
            )
    return found


def strip_software_per_broker(version: int, body: bytes) -> bytes:
    """The body with every broker entry's tagged section emptied: for readers such as
    kio that refuse tags they do not know (top-level tags: ``_tagged.strip_unknown_tags``)."""
    out = bytearray()
    copied = 0
    for _node_id, tags_start, end in _broker_entries(version, body):
        out += body[copied:tags_start]
        out += b"\x00"
        copied = end
    out += body[copied:]
    return bytes(out)
