"""Sans-I/O Kafka protocol core: bytes in, frames and events out. No sockets here."""

from ._answered import answered_fields, api_of
from ._apis import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    METADATA,
    PRODUCE,
    SASL_AUTHENTICATE,
    UPDATE_FEATURES,
    ApiSpec,
    api_name,
    api_range,
    api_spec,
    codec_version,
    known_api_keys,
    protocol_data,
)
from ._entry import InFlightRequest
from ._events import (
    DroppedResponse,
    Item,
    ProtocolViolation,
    RequestFrame,
    ResponseFrame,
    ResponseHead,
    ResponseTail,
    TailPolicy,
    UnreadableResponse,
)
from ._finders import HeadFinder, TailFinder
from ._framing import DEFAULT_MAX_FRAME_BYTES
from ._headers import (
    RequestHeader,
    frame,
    parse_request_header,
    produce_acks,
    response_body_offset,
    response_header,
)
from ._inflight import InFlight
from ._requests import RequestReader
from ._responses import ResponseReader
from ._sasl_login import LoginWatcher, SaslLogin
from ._scanner import COMPILED as SCANNER_COMPILED
from ._walk import field_offset, measure, tags_offset, tail_program
from ._wire import Incomplete, Malformed, read_tagged_fields, write_tagged_fields

__all__ = [
    "API_VERSIONS",
    "DEFAULT_MAX_FRAME_BYTES",
    "DESCRIBE_CLUSTER",
    "FETCH",
    "FIND_COORDINATOR",
    "METADATA",
    "PRODUCE",
    "SASL_AUTHENTICATE",
    "SCANNER_COMPILED",
    "UPDATE_FEATURES",
    "ApiSpec",
    "DroppedResponse",
    "HeadFinder",
    "InFlight",
    "InFlightRequest",
    "Incomplete",
    "Item",
    "LoginWatcher",
    "Malformed",
    "ProtocolViolation",
    "RequestFrame",
    "RequestHeader",
    "RequestReader",
    "ResponseFrame",
    "ResponseHead",
    "ResponseReader",
    "ResponseTail",
    "SaslLogin",
    "TailFinder",
    "TailPolicy",
    "UnreadableResponse",
    "answered_fields",
    "api_name",
    "api_of",
    "api_range",
    "api_spec",
    "codec_version",
    "field_offset",
    "frame",
    "known_api_keys",
    "measure",
    "parse_request_header",
    "produce_acks",
    "protocol_data",
    "read_tagged_fields",
    "response_body_offset",
    "response_header",
    "tags_offset",
    "tail_program",
    "write_tagged_fields",
]
