"""The in-flight table: one connection's outstanding requests, in the order sent.

Both readers share it, and the scanner they call first: ``RequestReader`` (or the
scanner) adds an entry per request, ``ResponseReader`` (or the scanner) matches each
upstream response to one (by order; see ``InFlight``) and local answers wait in it
until every earlier response went out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from time import perf_counter

from ._entry import InFlightRequest
from ._hot import answers
from ._rules import count_response
from ._sasl import SaslExchange
from ._scanner import Counts
from ._stats import ApiStats

# acks=0 produces remembered, per connection, while it is not yet known whether the
# broker answers them (Tansu does, Kafka does not). Past this many the rest are not
# recorded: their answers, if any, are then dropped as uncorrelated, which is what
# happens to them anyway.
ACKS0_KEPT = 1024


class InFlight:
    """Outstanding requests of one connection, in the order they were sent.

    Responses are matched by order, as Kafka's clients rely on: a broker answers the
    requests of one connection in the order it got them, so an upstream response answers
    the *earliest* outstanding upstream request with its correlation id. Clients may
    reuse correlation ids freely (Kafka never looks at them); the gateway's own upstream
    requests use negative ids, which are unique, so where they sit in the table does not
    matter.

    acks=0 produces get no response from Kafka, but some brokers (Tansu) answer them.
    They are kept as entries that expect no response: a response whose id matches one
    that comes before the next awaited request with that id is its answer and is
    dropped; when a later request's response arrives first, the broker does not answer
    acks=0 (``acks0_answered`` becomes False) and they are forgotten. The only case order
    cannot settle is an acks=0 produce followed by an awaited request with the *same*
    id before the broker has shown which kind it is; there Kafka's behaviour (no answer
    to acks=0) is assumed.
    """

    __slots__ = (
        "_local_pending",
        "_optional",
        "acks0_answered",
        "counts",
        "entries",
        "observer",
        "sasl",
    )

    def __init__(self) -> None:
        # Every outstanding request, in order: the scanner's and the readers' alike. A
        # list, not a deque: the compiled scanner appends to it and takes its first entry
        # through the C API, without a method call (the requests in flight on one
        # connection are few, so moving the rest up costs nothing that shows), and an
        # empty one is 56 bytes (a deque keeps a block of 64 slots: 760 bytes). Never
        # rebound: the connection's compiled reads hold it. The scanner and the rules'
        # loops (``_rules``) add and take entries in it as the readers do.
        self.entries: list[InFlightRequest] = []
        self._local_pending = 0  # entries holding a local answer (``answer_locally``)
        self._optional = 0  # acks=0 entries in ``entries``
        # Whether the upstream answers acks=0 produces; None until it has shown it.
        self.acks0_answered: bool | None = None
        # The connection's requests and answers, counted by the scanner and the readers
        # alike (``_rules``), until ``fold`` hands them over.
        self.counts = Counts()
        # A SaslHandshake v0 exchange switches both directions to raw tokens; the two
        # readers share this connection-wide state through the table they share.
        self.sasl = SaslExchange()
        # Called with each answered request (e.g. the request log); None costs nothing.
        self.observer: Callable[[InFlightRequest], None] | None = None

    def __len__(self) -> int:
        """Requests still awaiting a response (acks=0 produces do not count)."""
        return len(self.entries) - self._optional

    def add(
        self, api_key: int, api_version: int, correlation_id: int, to_upstream: bool = True
    ) -> InFlightRequest:
        entry = InFlightRequest(api_key, api_version, correlation_id, to_upstream)
        self.entries.append(entry)
        return entry

    def add_acks0(self, api_key: int, api_version: int, correlation_id: int, size: int) -> None:
        """An acks=0 produce (``size`` bytes) went upstream: count it, and remember it
        while its answer may come."""
        self.counts.request(api_key, api_version)
        if self.acks0_answered is False or self._optional >= ACKS0_KEPT:
            return
        entry = InFlightRequest(api_key, api_version, correlation_id, True, False)
        entry.request_bytes = size
        self.entries.append(entry)
        self._optional += 1

    def get(self, correlation_id: int) -> InFlightRequest | None:
        """The earliest awaited request with this correlation id."""
        for entry in self.entries:
            if entry.correlation_id == correlation_id and entry.expects_response:
                return entry
        return None

    def match_upstream(self, correlation_id: int) -> InFlightRequest | None:
        """The request an upstream response answers, or None if nothing awaits it.

        An entry with ``expects_response`` False is an acks=0 produce the broker
        answered: the caller drops the response and calls ``acks0_answer_dropped``.
        The request keeps its place until ``finish``: while its response is still
        arriving, local responses of later requests wait behind it, and it still counts
        as in flight.
        """
        skipped = 0
        for entry in self.entries:
            if answers(entry, correlation_id):
                break
            if entry.expects_response or not entry.to_upstream or entry.local is not None:
                continue
            # An acks=0 produce ahead of the answer.
            if entry.correlation_id == correlation_id:
                known = self.acks0_answered
                if not (known is False or (known is None and self._awaited_after(entry))):
                    return entry
                # Not its answer; where order cannot tell, assume Kafka's behaviour.
            skipped += 1
        else:
            return None
        if skipped:
            # A later request was answered first: this broker does not answer acks=0.
            self.acks0_answered = False
            self._forget_acks0(entry)
        return entry

    def _awaited_after(self, acks0: InFlightRequest) -> bool:
        """Whether the first awaited upstream request after ``acks0`` has its id.

        Only then can a response with that id answer either: were another awaited
        request first, the response could not be for the later one.
        """
        seen = False
        for entry in self.entries:
            if entry is acks0:
                seen = True
            elif seen and entry.expects_response and entry.to_upstream and entry.local is None:
                return entry.correlation_id == acks0.correlation_id
        return False

    def _forget_acks0(self, before: InFlightRequest) -> None:
        """Drop the acks=0 entries ahead of ``before`` (their answers will not come)."""
        entries = self.entries
        ahead = entries.index(before)
        kept = [entry for entry in entries[:ahead] if entry.expects_response]
        self._optional -= ahead - len(kept)
        entries[:ahead] = kept

    def acks0_answer_dropped(self, entry: InFlightRequest) -> None:
        """``entry`` (acks=0) was answered by the broker; its answer went nowhere."""
        self.acks0_answered = True
        self.entries.remove(entry)
        self._optional -= 1

    def finish(self, entry: InFlightRequest) -> list[bytes]:
        """``entry``'s upstream response has wholly gone out; return the local
        responses that may follow it now."""
        entries = self.entries
        if entries and entries[0] is entry:
            del entries[0]
        else:
            with contextlib.suppress(ValueError, AttributeError):  # finished already
                entries.remove(entry)
        count_response(self.counts, entry, perf_counter())
        if self.observer is not None:
            self.observer(entry)
        return self.release_ready() if self._local_pending else []

    def withdraw(self, entry: InFlightRequest) -> list[bytes]:
        """``entry`` (held for a local answer) will get none: a request the gateway sent
        on as one that is not answered (a bridged acks=0 produce). Return the local
        responses that may go out now."""
        with contextlib.suppress(ValueError):
            self.entries.remove(entry)
        return self.release_ready() if self._local_pending else []

    def answer_locally(self, entry: InFlightRequest, frame: bytes) -> list[bytes]:
        """Attach a gateway-made response; return the frames that may go out now."""
        entry.local = frame
        entry.response_bytes = len(frame)
        self._local_pending += 1
        return self.release_ready()

    def release_ready(self) -> list[bytes]:
        """Pop local responses that no longer wait behind an upstream response.

        acks=0 entries do not hold them back: no response will be sent for those.
        """
        ready: list[bytes] = []
        entries = self.entries
        i = 0
        while self._local_pending and i < len(entries):
            first = entries[i]
            if first.local is None:
                if first.expects_response:
                    break
                i += 1
                continue
            del entries[i]
            self._local_pending -= 1
            ready.append(first.local)
            count_response(self.counts, first, perf_counter())
            if self.observer is not None:
                self.observer(first)
        return ready

    def fold(self) -> ApiStats:
        """Hand over every count since the last fold."""
        stats = ApiStats()
        self.counts.fold(stats)
        return stats

    @property
    def has_local_pending(self) -> bool:
        return self._local_pending > 0
