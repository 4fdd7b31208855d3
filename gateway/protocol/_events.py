"""What the readers hand out besides buffers to forward: the events of a stream.

Order in a reader's output list is the order on the wire; the I/O layer keeps it. Each
event names what takes it (``handled_by``: one method of ``Events``), so what takes a
reader's output needs no switch on the event's type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ._entry import InFlightRequest
from ._finders import HeadFinder, TailFinder
from ._headers import RequestHeader


class Events(Protocol):
    """What takes a reader's events (``gateway.server.pair.Pair``), a method each. Each
    returns True when the rest of that read is not taken (the connection closed)."""

    def request_frame(self, item: RequestFrame) -> bool: ...
    def response_frame(self, item: ResponseFrame) -> bool: ...
    def response_head(self, item: ResponseHead) -> bool: ...
    def response_tail(self, item: ResponseTail) -> bool: ...
    def unreadable(self, item: UnreadableResponse) -> bool: ...
    def dropped(self, item: DroppedResponse) -> bool: ...
    def violation(self, item: ProtocolViolation) -> bool: ...


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """A whole request an interceptor asked for. ``frame`` includes the length prefix.

    ``request`` is its in-flight entry, taken when the frame was read so that its place
    in the response order is where the client sent it (an interceptor answers through
    ``InFlight.answer_locally``).
    """

    header: RequestHeader
    frame: bytes
    request: InFlightRequest = field(compare=False)

    def handled_by(self, events: Events) -> bool:
        return events.request_frame(self)


@dataclass(frozen=True, slots=True)
class ResponseFrame:
    """A whole response an interceptor asked for, with the request it answers."""

    request: InFlightRequest
    frame: bytes | bytearray

    def handled_by(self, events: Events) -> bool:
        return events.response_frame(self)


@dataclass(frozen=True, slots=True)
class ResponseTail:
    """The top-level tagged section of a response whose earlier bytes already went out.

    The frame's length prefix went out too, so whatever replaces ``tail`` must have
    exactly its length.
    """

    request: InFlightRequest
    tail: bytes

    def handled_by(self, events: Events) -> bool:
        return events.response_tail(self)


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """The start of a response, length prefix included, up to the end of the part its
    ``HeadFinder`` looked for; nothing of the frame went out yet, the rest follows as
    buffers.

    Whatever replaces ``head`` must start with the frame's new length prefix: the old
    size plus the difference in length between the new head and ``head``.
    """

    request: InFlightRequest
    head: bytes

    def handled_by(self, events: Events) -> bool:
        return events.response_head(self)


@dataclass(frozen=True, slots=True)
class UnreadableResponse:
    """A streamed response whose fields could not be followed; it went out untouched."""

    request: InFlightRequest
    detail: str

    def handled_by(self, events: Events) -> bool:
        return events.unreadable(self)


@dataclass(frozen=True, slots=True)
class DroppedResponse:
    """An upstream response nobody awaits. ``acks0`` is set when it answers an acks=0
    produce (Tansu does that; Kafka sends nothing), which is expected, not a fault."""

    correlation_id: int
    size: int
    acks0: bool = False

    def handled_by(self, events: Events) -> bool:
        return events.dropped(self)


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The stream cannot be followed any further; the connection must close.

    ``reason`` is a short, bounded metric label (oversize_frame, malformed_frame);
    ``detail`` is for the log line.
    """

    reason: str
    detail: str
    # Whose stream it is: "client" (requests) or "upstream" (responses).
    side: str = ""

    def handled_by(self, events: Events) -> bool:
        return events.violation(self)


Item = (
    bytes
    | memoryview
    | RequestFrame
    | ResponseFrame
    | ResponseTail
    | ResponseHead
    | UnreadableResponse
    | DroppedResponse
    | ProtocolViolation
)

# Decides whether a request must be gathered whole and handed to an interceptor.
# Called with (api_key, api_version); must be cheap, it runs for every request.
RequestPolicy = Callable[[int, int], bool]
# For an intercepted response (request, frame size): a TailFinder to stream it and gather
# only its top-level tagged section, a HeadFinder to hold back only its head and stream
# the rest, or None to gather it whole.
TailPolicy = Callable[[InFlightRequest, int], TailFinder | HeadFinder | None]
