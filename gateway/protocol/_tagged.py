"""Exact access to the top-level tagged-field section of a flexible response body.

Why this exists: the gateway adds tagged fields kio does not know (KIP-885's
BrokerSoftwareName/Version), and kio refuses to *decode* unknown tags (it raises
``KeyError: 'Unknown tagged field tag'``) although the protocol says they must be
skipped. So the gateway encodes a body with kio, then splices its extra tags into the
body's last part, the top-level tagged section; and before decoding a body that may
carry foreign tags it strips them.

Finding where the top-level tagged section starts takes a walk over the body along
kio's schema (``gateway.protocol._walk``), which only measures, so it works on bytes
from any encoder (another gateway, a real broker), canonical or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._apis import response_schema
from ._codec import decode_response
from ._walk import layout, skip_tagged_fields, tags_offset
from ._wire import (
    Incomplete,
    Malformed,
    read_tagged_fields,
    write_tagged_fields,
)


def top_level_tags_offset(api_key: int, version: int, body: bytes | memoryview) -> int:
    """Offset in a response ``body`` where its top-level tagged-field section starts.

    Raises ``Malformed`` when the body is truncated or the section does not end
    exactly at the end of the body (then it is not a body of this schema).
    """
    try:
        offset = tags_offset(api_key, version, body)
        end = skip_tagged_fields(body, offset)
    except Incomplete:
        raise Malformed(f"response {api_key} v{version} body is truncated") from None
    if end != len(body):
        raise Malformed(
            f"response {api_key} v{version} body has {len(body) - end} bytes after its end"
        )
    return offset


def read_top_level_tags(api_key: int, version: int, body: bytes | memoryview) -> dict[int, bytes]:
    """All top-level tagged fields of a response body as {tag: raw value bytes}."""
    offset = top_level_tags_offset(api_key, version, body)
    fields, _end = read_tagged_fields(body, offset)
    return fields


def splice_tagged_fields(
    api_key: int, version: int, body: bytes | memoryview, extra: Mapping[int, bytes]
) -> bytes:
    """Return ``body`` with ``extra`` tagged fields merged into its top-level section.

    Tags are written in ascending order as the protocol requires. A tag already present
    is replaced by the one in ``extra`` (so splicing is idempotent). Works for any
    flexible response whose top-level tagged section ends the body, which is all of
    them (e.g. ApiVersions v3+, DescribeCluster).
    """
    offset = top_level_tags_offset(api_key, version, body)
    existing, _end = read_tagged_fields(body, offset)
    merged = {**existing, **extra}
    return bytes(body[:offset]) + write_tagged_fields(merged)


def split_unknown_tags(
    api_key: int, version: int, body: bytes | memoryview
) -> tuple[bytes, dict[int, bytes]]:
    """(body without top-level tags kio does not know, those tags as {tag: raw value}).

    kio refuses unknown tags; splitting them off lets it decode the rest, and a caller
    that re-encodes can splice them back so nothing the broker sent is lost.
    Non-flexible versions have no tags and come back unchanged.
    """
    schema: type = response_schema(api_key, version)
    if not schema.__flexible__:  # type: ignore[attr-defined]
        return bytes(body), {}
    offset = top_level_tags_offset(api_key, version, body)
    existing, _end = read_tagged_fields(body, offset)
    known = layout(schema)[1]
    unknown = {tag: value for tag, value in existing.items() if tag not in known}
    if not unknown:
        return bytes(body), {}
    kept = {tag: value for tag, value in existing.items() if tag in known}
    return bytes(body[:offset]) + write_tagged_fields(kept), unknown


def decode_with_unknown_tags(
    api_key: int, version: int, body: bytes | memoryview
) -> tuple[Any, dict[int, bytes]]:
    """(the response decoded by kio, its top-level tags kio does not know).

    kio's native decode is several times faster than the walk that finds the tagged
    section (a large Metadata response: ~9 ms against ~33 ms), so the walk only runs
    when kio refuses a tag.
    """
    try:
        return decode_response(api_key, version, body, exact=True), {}
    except KeyError as exc:
        if "Unknown tagged field" not in str(exc):
            raise
    known_only, unknown = split_unknown_tags(api_key, version, body)
    return decode_response(api_key, version, known_only, exact=True), unknown


def strip_unknown_tags(api_key: int, version: int, body: bytes | memoryview) -> bytes:
    """Drop top-level tags the kio schema does not know, so kio can decode the body."""
    return split_unknown_tags(api_key, version, body)[0]
