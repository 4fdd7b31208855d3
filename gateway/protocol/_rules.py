"""The readers' loops: the rules each frame is held to, applied on the Python path.

Two loops, one per direction, apply them to the frames of a read:
``take_requests`` reads each request's head and checks its size, tells whether it
awaits an answer (a Produce's acks, ``produce_acks``), gives it an in-flight entry and
counts it; ``take_responses`` reads each response's head and checks its size, matches
it to the oldest entry (``takes_answer``) and counts it (``count_response``). The rules
themselves are the scanner's (``_scan.py``: one source, which the compiled scanner
runs compiled), run here as plain Python (``_hot``). The readers
(``RequestReader``, ``ResponseReader``) run these loops on what the scanner left, under
their interceptors' policy, and handle only the frame where a loop stops: an
intercepted one, a SaslHandshake, an acks=0 produce, a frame not all here yet, an answer
the table's order does not settle (``InFlight.match_upstream``, ``finish``), or the
error that closes the connection. Why each rule holds: docs/protocol.md#wire-rules.

They run for every frame on the Python path, so they are loops, not a call a frame:
what a frame costs here is what a hand-written loop would. Where a loop stops it says
why (``PARTIAL`` … ``DONE``), so a reader acts on the frame without judging it again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NoReturn

from ._apis import PRODUCE, SASL_HANDSHAKE
from ._headers import produce_acks
from ._hot import request_end, response_end, takes_answer
from ._wire import INT32, Incomplete, Malformed

# The first bytes of a frame: a request's size, api key, api version and correlation id;
# a response's size and correlation id.
REQUEST_HEAD = struct.Struct(">ihhi")
RESPONSE_HEAD = struct.Struct(">ii")
REQUEST_HEAD_BYTES = REQUEST_HEAD.size
RESPONSE_HEAD_BYTES = RESPONSE_HEAD.size
# The least a raw SASL token's size may say: it may be empty. (A request's and a
# response's: ``_scan.request_end``, ``response_end``.)
TOKEN_MIN_SIZE = 0

# Why a loop stopped at a frame (its size is within bounds):
PARTIAL = 0  # not all here (a reader takes a request if its acks are here, see below)
LEFT = 1  # an answer the reader's to judge
INTERCEPTED = 2  # a request a reader's policy asks for (counted; gathered by the reader)
# A SaslHandshake: its mechanism is read (a login starts); after v0, raw SASL tokens
# may follow, and what comes next waits.
TOKENS = 3
UNANSWERED = 4  # a Produce with acks=0: Kafka sends no answer (left without ``unanswered``)
UNREADABLE = 5  # a Produce whose acks cannot be read (``produce_acks`` says why)
DONE = 6  # no frame to stop at: fewer bytes than a head left, or ``most`` taken


class FrameError(Exception):
    """A frame whose size rules it out: the connection closes (as on a broker).
    ``reason`` labels ``kafka_gateway_rejected_requests_total``; ``detail`` is the log
    line's; ``at``: where the frame starts."""

    def __init__(self, reason: str, detail: str, at: int) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.at = at


def _refuse(size: int, max_frame_bytes: int, at: int) -> NoReturn:
    if size > max_frame_bytes:
        raise FrameError(
            "oversize_frame", f"frame of {size} bytes exceeds max_frame_bytes={max_frame_bytes}", at
        )
    raise FrameError("malformed_frame", f"frame of {size} bytes is shorter than a header", at)


def token_end(buf: Any, pos: int, max_frame_bytes: int) -> int:
    """Where the raw SASL token whose size is at ``pos`` ends (after a SaslHandshake v0,
    ``_sasl``); raises FrameError when its size is negative or above
    ``max_frame_bytes``."""
    (size,) = INT32.unpack_from(buf, pos)
    if TOKEN_MIN_SIZE <= size <= max_frame_bytes:
        return pos + 4 + size
    _refuse(size, max_frame_bytes, pos)


def take_requests(
    buf: Any,
    start: int,
    end: int,
    intercept: Callable[[int, int], bool] | None,
    make: Callable[[int, int, int], Any],
    entries: list[Any],
    counts: Any,
    max_frame_bytes: int,
    most: int = -1,
    tokens: bool = False,
    unanswered: Callable[[int, int, int, int], None] | None = None,
) -> tuple[int, int]:
    """Take the requests of ``buf[start:end]`` that need no more than the rules: give
    each an entry (``make``; its size) at the end of ``entries`` and a count in
    ``counts``, ``most`` of them at most (-1: all). Returns where it stopped
    and why (``PARTIAL`` … ``DONE``); raises FrameError at a frame whose size rules it
    out (``at``: where; those before it are taken).

    A frame may be the last, not all here (its end, returned, is then past ``end``);
    ``intercept`` (a reader's ``RequestPolicy``) leaves the frames it asks for, counted
    (their entries come once they are gathered). A SaslHandshake (any version) is left
    unless ``tokens`` (the reader read its mechanism); an acks=0 produce too, unless
    ``unanswered`` (a reader's ``InFlight.add_acks0``, which counts it and may keep it)
    takes it."""
    pos = start
    while end - pos >= REQUEST_HEAD_BYTES:
        size, key, version, correlation_id = REQUEST_HEAD.unpack_from(buf, pos)
        stop = request_end(size, pos, max_frame_bytes)
        if stop < 0:
            _refuse(size, max_frame_bytes, pos)
        if intercept is not None and intercept(key, version):
            counts.request(key, version)
            return pos, INTERCEPTED
        awaited = True
        if key == PRODUCE:  # the one request Kafka may leave unanswered: acks=0
            here = stop if stop < end else end  # no min(): a call a frame
            try:  # read in place, however long the produce is
                awaited = produce_acks(buf, version, pos + 4, here) != 0
            except Incomplete:
                return pos, PARTIAL if stop > end else UNREADABLE
            except Malformed:
                return pos, UNREADABLE
            if not awaited and unanswered is None:
                return pos, UNANSWERED
        elif key == SASL_HANDSHAKE and not tokens:
            return pos, TOKENS
        if awaited:
            entry = make(key, version, correlation_id)
            entry.request_bytes = stop - pos
            entries.append(entry)
            counts.request(key, version)
        else:
            unanswered(key, version, correlation_id, stop - pos)  # type: ignore[misc]
        pos = stop
        most -= 1
        if not most:
            break
    return pos, DONE


def count_response(counts: Any, entry: Any, now: float) -> None:
    """Count the answer to ``entry`` and its latency, from the request's read to ``now``
    (the gateway's own requests, which carry a handler in ``context``, are not client
    traffic)."""
    if entry.context is None:
        counts.response(entry.api_key, entry.api_version, now - entry.started)


def take_responses(
    buf: Any,
    start: int,
    end: int,
    intercept: Callable[[Any], bool] | None,
    now: float,
    entries: list[Any],
    counts: Any,
    max_frame_bytes: int,
    done: list[Any] | None,
    most: int = -1,
) -> tuple[int, int]:
    """Take the whole responses of ``buf[start:end]`` that answer the oldest entries of
    ``entries`` in order, need no more than the rules and release no local answer: take
    those entries off the table, count them, and put them in ``done`` when it is a list
    (the request log), ``most`` of them at most (-1: all). Returns where it stopped and
    why (``PARTIAL``, ``LEFT`` or ``DONE``); raises FrameError at a frame whose size
    rules it out (``at``: where; those before it are taken).

    ``intercept`` (a reader's) leaves the answers it asks for; and an entry with a
    handler (``context``: the gateway's own request) is always left (``takes_answer``)."""
    pos = start
    answered, count = 0, len(entries)
    try:
        while end - pos >= RESPONSE_HEAD_BYTES:
            size, correlation_id = RESPONSE_HEAD.unpack_from(buf, pos)
            stop = response_end(size, pos, max_frame_bytes)
            if stop < 0:
                _refuse(size, max_frame_bytes, pos)
            if stop > end:
                return pos, PARTIAL
            if answered == count:
                return pos, LEFT
            entry = entries[answered]
            if not takes_answer(entry, correlation_id, entries, answered, count):
                return pos, LEFT
            if intercept is not None and intercept(entry):
                return pos, LEFT
            entry.response_bytes = stop - pos
            count_response(counts, entry, now)
            answered += 1
            if done is not None:
                done.append(entry)
            pos = stop
            if answered == most:
                break
        return pos, DONE
    finally:  # what was answered leaves the table, however the loop ended
        if answered:
            del entries[:answered]
