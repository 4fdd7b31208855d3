"""One proxied connection: the client-facing and the upstream-facing asyncio protocols.

All protocol decisions are made by the sans-I/O readers in ``gateway.protocol`` and the
interceptors; this module only moves their output between the two sockets, applies
back-pressure (a side stops reading while the other side's write buffer is above its
high-water mark) and closes both sides together.

Life of a connection: the client connects → the gateway dials the upstream and asks it
ApiVersions on its own behalf → once the answer is in, the client's bytes (held until
then) are read: ApiVersions is answered locally from the negotiated ranges, requests
outside those ranges get UNSUPPORTED_VERSION (or a close for keys and versions the
gateway cannot parse, as Kafka does), everything else streams through.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, cast

from ..config import HostPort
from ..features.catalogue import required_level
from ..features.validation import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, UpdateResult
from ..interceptors import upstream as internal
from ..interceptors.addresses import (
    REWRITTEN_RESPONSES,
    head_finder,
    rewrite_head,
    rewrite_response,
    rewrite_tail,
)
from ..interceptors.api_versions import add_broker_software, answer_api_versions
from ..interceptors.describe_cluster import add_software_per_broker
from ..interceptors.unsupported import unsupported_version_response
from ..interceptors.update_features import parse_update_features, update_features_response
from ..observability.logging import RateLimitedLogger, get_logger
from ..principal import ANONYMOUS, cached_rules, principal_of
from ..protocol import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    METADATA,
    UPDATE_FEATURES,
    DroppedResponse,
    HeadFinder,
    InFlight,
    InFlightRequest,
    Item,
    ProtocolViolation,
    RequestFrame,
    RequestReader,
    ResponseFrame,
    ResponseHead,
    ResponseReader,
    ResponseTail,
    TailFinder,
    UnreadableResponse,
    api_spec,
    frame,
    response_body_offset,
)
from ..protocol._apis import api_name, has_schema
from ..versions import ApiVersionsError, VersionRange, parse_api_versions_response
from .tls import peer_subject

if TYPE_CHECKING:
    from ..clients import ClientInfo
    from .app import Gateway

log = get_logger("gateway.proxy")
# Lines about bad input, which a client (or a broker) can trigger once per frame.
limited = RateLimitedLogger("gateway.proxy")

# Whether an upstream answers acks=0 produces (Tansu does, Kafka does not), as the last
# connection to it found out: a new connection starts from that instead of guessing
# (see InFlight). One entry per upstream address.
_acks0_answered: dict[HostPort, bool] = {}

# Large enough that a bulk fetch streams without stop-and-go, small enough that a slow
# client cannot make the gateway hold much of a broker's output.
WRITE_BUFFER_HIGH = 4 * 1024 * 1024
WRITE_BUFFER_LOW = 1024 * 1024
# Client bytes held while the upstream handshake runs; above this the client is paused.
PENDING_HIGH = 1024 * 1024


def misreads_tagged_fields(name: str, version: str) -> bool:
    """Clients whose parsers break on extra tagged fields in ApiVersions responses."""
    if name != "librdkafka":
        return False
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return False
    return (major, minor) < (2, 1)


# Items of a reader's output that are forwarded as they are. A tuple, not ``bytes |
# memoryview``: the union would be built anew at every isinstance on the hot path.
_BUFFERS = (bytes, memoryview)

# Correlation ids of the gateway's own upstream requests: negative, which no client uses.
_internal_ids = itertools.count(-(2**31))

# Called with the payload (no length prefix) of the response to an internal request.
InternalHandler = Callable[[memoryview], None]


# Fetch responses from this size on stream through; only their tagged section (where
# KIP-951's NodeEndpoints are) is held back, so a bulk consumer does not wait for the
# gateway to gather each response before the first byte reaches it. Smaller ones are
# gathered whole, which leaves a rewrite free to change their length.
STREAM_FETCH_FROM_BYTES = 64 * 1024


def _intercept_response(entry: InFlightRequest, _first=REWRITTEN_RESPONSES.get) -> bool:
    # Runs once per response: a dict lookup, no further calls (see needs_rewrite).
    return entry.context is not None or entry.api_version >= _first(entry.api_key, 1 << 15)


def _stream_response(entry: InFlightRequest, size: int) -> TailFinder | HeadFinder | None:
    # Runs once per intercepted response. The gateway's own requests (context set) are
    # gathered whole for their handler.
    if entry.context is not None:
        return None
    if entry.api_key == FETCH and size >= STREAM_FETCH_FROM_BYTES:
        return TailFinder(FETCH, entry.api_version)
    return head_finder(entry.api_key, entry.api_version)


class ClientConnection(asyncio.Protocol):
    """The client side. Owns the pair: it dials the upstream and tears both down."""

    def __init__(self, gateway: Gateway, listener: str, upstream: HostPort) -> None:
        self.gateway = gateway
        self.listener = listener
        self.upstream_address = upstream
        self.inflight = InFlight()
        self.inflight.acks0_answered = _acks0_answered.get(upstream)
        self.requests = RequestReader(
            self.inflight, self._intercept_request, gateway.config.max_frame_bytes
        )
        self.responses = ResponseReader(
            self.inflight, _intercept_response, gateway.config.max_frame_bytes, _stream_response
        )
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.info: ClientInfo | None = None
        self.peer = "?"
        self.tls_subject: str | None = None
        # Other upstreams to try, in order, when upstream_address cannot be reached.
        self._fallbacks: list[HostPort] = []
        # SNI named a broker no Metadata has named yet: look it up before dialling.
        self._unknown_node: int | None = None
        # "User:..." from the verified client certificate (ssl.principal.mapping.rules);
        # None without one. SASL principals are the broker's: the gateway never sees them.
        self.principal: str | None = None
        # Negotiated ranges; None until the upstream answered ApiVersions.
        self.ranges: dict[int, VersionRange] | None = None
        self.upstream_ranges: dict[int, VersionRange] = {}
        self._passthrough: dict[int, VersionRange] = {}
        # Client bytes that arrived before negotiation finished.
        self._held: list[bytes] = []
        self._held_size = 0
        self._closed = False
        self._client_paused = False
        self.draining = False
        # Byte counts already folded into the Prometheus counters.
        self._folded_in = 0
        self._folded_out = 0
        if gateway.request_log is not None:
            self.inflight.observer = self._log_request
        # Connection limits (gateway/server/limits.py).
        self.peer_ip = "?"
        self.opened_at = 0.0
        self.charged = 0  # bytes counted against queued_max_request_bytes
        self._memory_paused = False
        self._first_done = False

    # -- client socket -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        client = cast(asyncio.Transport, transport)
        self.client = client
        client.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        peer = client.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_ip = peer[0] if peer else "?"
        if self.gateway.limits.admit(self.peer_ip) is not None:
            self._closed = True  # over a cap: closed at accept, as Kafka's acceptor does
            client.abort()
            return
        self.opened_at = self.gateway.limits.clock()
        ssl_object = client.get_extra_info("ssl_object")
        # The verified client certificate (TLS with client auth); for log lines.
        self.tls_subject = peer_subject(ssl_object)
        if ssl_object is not None:
            rules = cached_rules(self.gateway.config.tls_principal_mapping_rules)
            self.principal = principal_of(rules, ssl_object.getpeercert())
        if self.gateway.sni is not None:
            # One port for every broker: the handshake's server name chose the broker.
            route = self.gateway.sni.routed(ssl_object)
            if route is None:  # the handshake refuses unroutable names; never here
                client.abort()
                return
            self.listener, self.upstream_address = route.listener, route.upstream
            self._fallbacks = list(route.fallbacks)
            self._unknown_node = route.unknown_node
        self.info = self.gateway.connection_opened(self)
        asyncio.get_running_loop().create_task(self._connect_upstream())

    def data_received(self, data: bytes) -> None:
        if self.ranges is None:
            self._held.append(data)
            self._held_size += len(data)
            if self._held_size > PENDING_HIGH:
                self.pause_client()
        else:
            info = self.info
            if info is not None:
                info.bytes_in += len(data)
            self._to_upstream(self.requests.feed(data))
        if self.gateway.limits.budget:
            self._recharge()

    def _to_upstream(self, items: list[Item]) -> None:
        upstream = self.upstream
        assert upstream is not None  # ranges are only known once upstream is connected
        for item in items:
            if isinstance(item, _BUFFERS):
                upstream.write(item)
            elif isinstance(item, RequestFrame):
                try:
                    self._on_request(item)
                except Exception as exc:  # a bug must cost this connection, not the loop
                    self._handler_failed(item, exc)
                    return
            elif isinstance(item, ProtocolViolation):
                self._violation("client", item)
                return
        if self.info is not None:
            self.info.requests = self.requests.frames

    def eof_received(self) -> bool:
        return False  # Kafka does not half-close: close both directions.

    def connection_lost(self, exc: Exception | None) -> None:
        if self.requests.mid_frame and not self._closed:
            self.gateway.metrics.client_aborts.inc()
            limited.info(
                "connection.client_aborted_mid_request", peer=self.peer, listener=self.listener
            )
        if self.inflight.acks0_answered is not None:
            _acks0_answered[self.upstream_address] = self.inflight.acks0_answered
        self.close()
        self.gateway.connection_closed(self)

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.resume_reading()

    # -- requests the gateway handles itself ------------------------------------------
    def _intercept_request(self, api_key: int, api_version: int) -> bool:
        # Runs once per request: one dict lookup against the ranges that may pass through
        # untouched (advertised ranges minus the APIs the gateway answers itself).
        allowed = self._passthrough.get(api_key)
        if allowed is None:
            return not self._forwards_unknown(api_key, api_version)
        return api_version < allowed[0] or api_version > allowed[1]

    def _forwards_unknown(self, api_key: int, api_version: int) -> bool:
        """unknown_api_keys = "forward": an API key the gateway does not know (a vendor's)
        passes through opaque. Only its key, version and correlation id were read, which
        is all any header version shares; the response, matched by correlation id in
        request order, goes back untouched (no interceptor knows the key)."""
        gw = self.gateway
        if gw.config.unknown_api_keys != "forward" or api_spec(api_key) is not None:
            return False
        gw.metrics.unknown_api_keys.labels("forward").inc()
        limited.info(
            "request.unknown_api_key_forwarded",
            limit_key=api_key,
            api_key=api_key,
            version=api_version,
            **self._who(),
        )
        return True

    def _on_request(self, request: RequestFrame) -> None:
        header = request.header
        body = memoryview(request.frame)[4 + header.body_offset :]
        if self.info is not None and header.client_id is not None:
            self.info.client_id = header.client_id
        assert self.ranges is not None
        if header.api_key == API_VERSIONS:
            self._answer_api_versions(request, body)
            return
        allowed = self.ranges.get(header.api_key)
        if allowed is not None and allowed[0] <= header.api_version <= allowed[1]:
            if header.api_key == UPDATE_FEATURES:
                self._update_features(request, body)
            else:
                # DescribeCluster: the upstream lacks it (or it is hidden).
                self._synthesize_describe_cluster(request, bytes(body))
            return
        spec = api_spec(header.api_key)
        reason = "unknown_api_key" if spec is None else "unsupported_version"
        gated = self._gated_by(header.api_key, header.api_version)
        if gated is not None:
            reason = "gated_by_feature"
        self.gateway.metrics.rejected.labels(reason).inc()
        if spec is None:
            # unknown_api_keys = "close"; a client that uses a vendor key does so on
            # every connection, so the line below is rate-limited per key.
            self.gateway.metrics.unknown_api_keys.labels("close").inc()
        payload = None
        if spec is not None and has_schema(header.api_key, header.api_version):
            payload = unsupported_version_response(header, body)
        limited.warning(
            "request.rejected",
            limit_key=header.api_key if spec is None else None,
            reason=reason,
            api_key=header.api_key,
            api=spec.name if spec else None,
            version=header.api_version,
            advertised=allowed,
            correlation_id=header.correlation_id,
            action="error_response" if payload else "close",
            **({"needs_feature": f"{gated[0]}>={gated[1]}"} if gated else {}),
            **self._who(),
        )
        if payload is None:
            # Kafka closes on a request it cannot parse; so does the gateway.
            self.close()
            return
        self._answer_locally(request.request, payload)

    def _handler_failed(self, request: RequestFrame, exc: Exception) -> None:
        """An interceptor raised on a client's request: log (rate-limited, with the
        traceback), count, and close this connection as Kafka closes on a request it
        cannot handle."""
        self.gateway.metrics.rejected.labels("handler_error").inc()
        limited.error(
            "request.handler_failed",
            api_key=request.header.api_key,
            version=request.header.api_version,
            error=repr(exc),
            **self._who(),
        )
        self.close()

    def _gated_by(self, api_key: int, version: int) -> tuple[str, int] | None:
        """(feature, level) when only an unfinalized feature level withholds this version."""
        features = self.gateway.features
        cap = features.caps.get(api_key)
        if cap is None or version <= cap:
            return None
        own = self.gateway.own_range(api_key)
        theirs = self.upstream_ranges.get(api_key)
        if own is None or theirs is None:
            return None
        if not max(own[0], theirs[0]) <= version <= min(own[1], theirs[1]):
            return None
        return required_level(features.catalogue, api_key, version)

    def _answer_api_versions(self, request: RequestFrame, body: memoryview) -> None:
        header = request.header
        assert self.ranges is not None
        gw = self.gateway
        software = gw.broker_software(self.upstream_address)
        features = gw.features
        feature_fields = {
            "supported_features": features.supported or {},
            "finalized_features": features.finalized.levels,
            "finalized_epoch": features.finalized.epoch,
        }
        answer = answer_api_versions(
            header,
            body,
            self.ranges,
            broker_software=software,
            software_tags=gw.software_tags,
            **feature_fields,
        )
        if answer.client_software is not None and misreads_tagged_fields(*answer.client_software):
            # librdkafka before 2.1 skips one byte too few per tagged field: two KIP-885
            # tags throw its ApiVersions parser off (seen with Debian 12's kcat, 2.0.2).
            answer = answer_api_versions(
                header, body, self.ranges, broker_software=None, **feature_fields
            )
        if answer.client_software is not None and self.info is not None:
            # Counts so far belong to the old labels; then move the connection over.
            self.fold_stats()
            old = self.info.software
            gw.registry.set_software(self.info.connection_id, *answer.client_software)
            gw.metrics.client_identified(self.listener, old, self.info.software)
            log.info(
                "connection.identified",
                listener=self.listener,
                **self._who(),
                **({"tls_subject": self.tls_subject} if self.tls_subject else {}),
            )
        elif answer.error_code == 42:
            gw.metrics.rejected.labels("invalid_client_software").inc()
            limited.info(
                "request.invalid_client_software", version=header.api_version, **self._who()
            )
        elif answer.error_code == 35:
            gw.metrics.rejected.labels("unsupported_version").inc()
        self._answer_locally(request.request, answer.payload)

    def _update_features(self, request: RequestFrame, body: memoryview) -> None:
        header = request.header
        entry = request.request
        gw = self.gateway
        try:
            parsed = parse_update_features(header.api_version, body)
        except ValueError as exc:
            limited.warning("request.update_features_malformed", error=str(exc), **self._who())
            payload = update_features_response(
                header, [], error_code=INVALID_REQUEST, error_message=str(exc)
            )
            self._answer_locally(entry, payload)
            return
        refusal = self._update_features_refusal()
        if refusal is not None:
            gw.metrics.rejected.labels("unauthorized").inc()
            message = f"UpdateFeatures through kafka-gateway is refused: {refusal}; use featurectl"
            limited.warning(
                "request.update_features_refused",
                updates=[f"{u.feature}={u.level}" for u in parsed.updates],
                principal=self.principal or ANONYMOUS,
                why=refusal,
                **self._who(),
            )
            results = [
                UpdateResult(u.feature, CLUSTER_AUTHORIZATION_FAILED, message)
                for u in parsed.updates
            ]
            payload = update_features_response(
                header, results, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=message
            )
            self._answer_locally(entry, payload)
            return

        async def run() -> None:
            results, error_code, message = await gw.features.apply_updates(
                parsed.updates,
                validate_only=parsed.validate_only,
                all_or_nothing=header.api_version >= 2,
                who={
                    **self._who(),
                    "principal": self.principal or ANONYMOUS,
                    "address": self.peer,
                    "via": "UpdateFeatures",
                },
            )
            if not self._closed:
                payload = update_features_response(
                    header, results, error_code=error_code, error_message=message
                )
                self._answer_locally(entry, payload)

        asyncio.get_running_loop().create_task(run())

    def _update_features_refusal(self) -> str | None:
        """Why this connection may not change finalized features, or None if it may.

        Like a Kafka ACL (ALTER on CLUSTER for a principal from a host): with both
        features.update_allowed_principals and update_allowed_from set, both must match.
        """
        cfg = self.gateway.config
        principals = cfg.features_update_allowed_principals
        if not principals and not cfg.features_update_allowed_from:
            return "no principal or address is allowed (features.update_allowed_*)"
        if principals and self.principal not in principals:
            return (
                f"principal {self.principal or ANONYMOUS} is not in "
                "features.update_allowed_principals"
            )
        if cfg.features_update_allowed_from and not self.gateway.update_features_allowed(self.peer):
            return "client address is not in features.update_allowed_from"
        return None

    def fold_stats(self) -> None:
        """Move this connection's counts into the labelled Prometheus series."""
        info = self.info
        if info is None:
            return
        stats = self.inflight.stats.take()
        bytes_in = info.bytes_in - self._folded_in
        bytes_out = info.bytes_out - self._folded_out
        self._folded_in, self._folded_out = info.bytes_in, info.bytes_out
        self.gateway.metrics.traffic.fold(
            (self.listener, *info.software), stats, bytes_in, bytes_out
        )

    def _log_request(self, entry: InFlightRequest) -> None:
        request_log = self.gateway.request_log
        if request_log is None or entry.context is not None or not request_log.sampled():
            return
        request_log.emit(
            "request.completed",
            api=api_name(entry.api_key),
            api_version=entry.api_version,
            correlation_id=entry.correlation_id,
            latency_ms=round((perf_counter() - entry.started) * 1000, 3),
            request_bytes=entry.request_bytes,
            response_bytes=entry.response_bytes,
            outcome="gateway" if entry.local is not None else "upstream",
            listener=self.listener,
            **self._who(),
        )

    def _synthesize_describe_cluster(self, request: RequestFrame, body: bytes) -> None:
        header = request.header
        entry = request.request
        metadata_max = self.upstream_ranges.get(METADATA, (0, -1))[1]
        version = min(metadata_max, 12)
        if version < 1:
            self._violation(
                "upstream",
                ProtocolViolation(
                    "malformed_frame",
                    "upstream offers no Metadata version to build DescribeCluster",
                ),
            )
            return
        try:
            asked = internal.parse_describe_cluster_request(header.api_version, body)
        except ValueError as exc:
            # Kafka closes a connection whose request it cannot parse (found by fuzzing:
            # the error used to escape from the broker's answer to our Metadata request).
            self._violation("client", ProtocolViolation("malformed_request", str(exc)))
            return

        def on_metadata(payload: memoryview) -> None:
            spec = api_spec(METADATA)
            assert spec is not None
            try:
                offset = response_body_offset(payload, spec.response_header_version(version))
                answer = internal.describe_cluster_from_metadata(
                    header, asked, version, payload[offset:], self.gateway.router
                )
            except Exception as exc:  # a broker's Metadata answer we cannot read
                self._rewrite_failed(entry, repr(exc))
                self.close()
                return
            self._release(
                self.inflight.answer_locally(
                    entry, frame(self._with_software(header.api_version, answer))
                )
            )

        correlation_id = next(_internal_ids)
        self._send_internal(
            METADATA,
            version,
            correlation_id,
            internal.metadata_request(correlation_id, version),
            on_metadata,
        )

    def _answer_locally(self, entry: InFlightRequest, payload: bytes) -> None:
        self._release(self.inflight.answer_locally(entry, frame(payload)))

    def _release(self, frames: list[bytes]) -> None:
        if self.client is not None and frames:
            self.client.writelines(frames)

    def _who(self) -> dict[str, object]:
        return self.info.log_fields() if self.info is not None else {"peer": self.peer}

    # -- upstream socket -----------------------------------------------------------
    async def _connect_upstream(self) -> None:
        sni = self.gateway.sni
        if self._unknown_node is not None and sni is not None:
            found = await sni.look_up(self._unknown_node, self.peer)
            self._unknown_node = None
            if found is None or self._closed:
                self.close()
                return
            self.upstream_address = found
        loop = asyncio.get_running_loop()
        address = self.upstream_address
        gw = self.gateway
        server_hostname = gw.upstream_server_hostname(address)
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: UpstreamConnection(self),
                    address.host,
                    address.port,
                    ssl=gw.upstream_tls,
                    server_hostname=server_hostname,
                ),
                gw.config.upstream_connect_timeout_s,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError (a failed handshake) included
            gw.metrics.upstream_connect_errors.labels(str(address)).inc()
            log.warning(
                "upstream.connect_failed",
                upstream=str(address),
                peer=self.peer,
                error=str(exc) or type(exc).__name__,
                **({"tls_server_hostname": server_hostname} if gw.upstream_tls else {}),
            )
            if self._fallbacks and not self._closed:
                self.upstream_address = self._fallbacks.pop(0)
                await self._connect_upstream()
                return
            self.close()
            return
        upstream = cast(asyncio.Transport, transport)
        if self._closed:
            upstream.close()
            return
        upstream.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.upstream = upstream
        self._ask_upstream_versions(internal.api_versions_request)

    def _ask_upstream_versions(self, build: Callable[[int], tuple[int, bytes]]) -> None:
        correlation_id = next(_internal_ids)
        version, request = build(correlation_id)

        def on_versions(payload: memoryview) -> None:
            try:
                ranges = parse_api_versions_response(payload[4:], version)
            except ApiVersionsError as exc:
                if version > 0:
                    self._ask_upstream_versions(internal.api_versions_v0_request)
                    return
                log.error(
                    "upstream.api_versions_failed",
                    error_code=exc.error_code,
                    upstream=str(self.upstream_address),
                )
                self.close()
                return
            except ValueError as exc:
                log.error(
                    "upstream.api_versions_unreadable",
                    error=str(exc),
                    upstream=str(self.upstream_address),
                )
                self.close()
                return
            self._negotiated(ranges)

        self._send_internal(API_VERSIONS, version, correlation_id, request, on_versions)

    def _send_internal(
        self,
        api_key: int,
        version: int,
        correlation_id: int,
        request: bytes,
        handler: InternalHandler,
    ) -> None:
        entry = self.inflight.add(api_key, version, correlation_id)
        entry.context = handler
        assert self.upstream is not None
        self.upstream.write(request)

    def _negotiated(self, upstream_ranges: dict[int, VersionRange]) -> None:
        self.upstream_ranges = upstream_ranges
        self.renegotiate()
        held, self._held = self._held, []
        self._held_size = 0
        for data in held:
            self.data_received(data)
            if self._closed:
                return
        self.resume_client()

    def renegotiate(self) -> None:
        """(Re)compute what this connection may use, e.g. after finalized levels changed.

        Clients only re-read ApiVersions on a new connection; until then a version the
        new levels withhold is answered with UNSUPPORTED_VERSION, as Kafka does.
        """
        if self.upstream is None or (not self.upstream_ranges and self.ranges is None):
            return
        gw = self.gateway
        self.ranges = gw.advertised_ranges(self.upstream_address, self.upstream_ranges)
        passthrough = dict(self.ranges)
        passthrough.pop(API_VERSIONS, None)
        if gw.synthesizes_describe_cluster(self.upstream_ranges):
            passthrough.pop(DESCRIBE_CLUSTER, None)
        if gw.features.enabled:
            passthrough.pop(UPDATE_FEATURES, None)
        self._passthrough = passthrough

    def upstream_data(self, data: bytes) -> None:
        client = self.client
        if client is None:
            return
        info = self.info
        if info is not None:
            info.bytes_out += len(data)
        for item in self.responses.feed(data):
            if isinstance(item, _BUFFERS):
                client.write(item)
            elif isinstance(item, ResponseFrame):
                handler = item.request.context
                if handler is not None:
                    cast(InternalHandler, handler)(memoryview(item.frame)[4:])
                else:
                    client.write(self._rewrite(item))
            elif isinstance(item, ResponseHead):
                client.write(self._rewrite_head(item))
            elif isinstance(item, ResponseTail):
                client.write(self._rewrite_tail(item))
            elif isinstance(item, UnreadableResponse):
                self._rewrite_failed(item.request, item.detail)
            elif isinstance(item, DroppedResponse):
                self.gateway.metrics.dropped_responses.inc()
                if item.acks0:
                    continue  # a broker answering acks=0 (Tansu): expected, not logged
                limited.info(
                    "response.dropped_uncorrelated",
                    correlation_id=item.correlation_id,
                    size=item.size,
                    upstream=str(self.upstream_address),
                    **self._who(),
                )
            elif isinstance(item, ProtocolViolation):
                self._violation("upstream", item)
                return
        if self.requests.held and not self._closed:
            # Client bytes sent out of turn in a SaslHandshake v0 exchange were held
            # until the broker answered; the broker has moved on, take them up again.
            self._to_upstream(self.requests.resume())
        if self.draining and not self.inflight:
            self.close()
        if self.gateway.limits.budget:
            self._recharge()

    # -- connection limits (see gateway/server/limits.py) ---------------------------------
    def _recharge(self) -> None:
        now = self.buffered()
        if now != self.charged:
            self.gateway.limits.charge(self, self.charged, now)
            self.charged = now

    def buffered(self) -> int:
        """Partial frames and bytes not yet written, both ways."""
        held = self._held_size + self.requests.buffered + self.responses.buffered
        for transport in (self.client, self.upstream):
            if transport is not None:
                held += transport.get_write_buffer_size()
        return held

    def activity(self) -> tuple[int, ...]:
        info = self.info
        ins, outs = (info.bytes_in, info.bytes_out) if info is not None else (0, 0)
        return (ins + self._held_size, outs, len(self.inflight))

    def has_request(self) -> bool:
        if not self._first_done:
            frames = self.requests.frames
            self._first_done = frames > 1 or (frames == 1 and not self.requests.mid_frame)
        return self._first_done

    def memory_pause(self, paused: bool) -> None:
        self._memory_paused = paused
        if paused:
            self.pause_client()
        else:
            self.resume_client()

    def limit_close(self, reason: str) -> None:
        self.close()

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            # Rate-limited: garbage a client sends through makes the broker close.
            limited.info(
                "upstream.closed",
                upstream=str(self.upstream_address),
                peer=self.peer,
                in_flight=len(self.inflight),
                # A response cut off mid-frame (the client got none of a held head).
                mid_response=self.responses.mid_frame,
                error=str(exc) if exc else None,
            )
        self.close()

    # -- shared ----------------------------------------------------------------------
    def _rewrite(self, response: ResponseFrame) -> bytes | bytearray:
        entry = response.request
        spec = api_spec(entry.api_key)
        assert spec is not None  # only known keys are intercepted
        payload = memoryview(response.frame)[4:]
        try:
            offset = response_body_offset(payload, spec.response_header_version(entry.api_version))
            original = payload[offset:]
            body = rewrite_response(entry.api_key, entry.api_version, original, self.gateway.router)
            if entry.api_key == DESCRIBE_CLUSTER:
                body = self._describe_cluster_software(entry.api_version, bytes(body))
            elif body is original:
                return response.frame  # unchanged: no copy of a possibly large fetch
        except Exception as exc:  # a broker bug must not cost the client its response
            self._rewrite_failed(entry, repr(exc))
            return response.frame
        return frame(bytes(payload[:offset]) + body)

    def _rewrite_head(self, item: ResponseHead) -> bytes:
        entry = item.request
        try:
            return rewrite_head(entry.api_key, entry.api_version, item.head, self.gateway.router)
        except Exception as exc:  # as in _rewrite: the client still gets its response
            self._rewrite_failed(entry, repr(exc))
            return item.head

    def _rewrite_tail(self, item: ResponseTail) -> bytes:
        entry = item.request
        try:
            result = rewrite_tail(
                entry.api_key, entry.api_version, item.tail, self.gateway.router, keep_length=True
            )
        except Exception as exc:  # as in _rewrite: the client still gets its response
            self._rewrite_failed(entry, repr(exc))
            return item.tail
        if result.dropped_endpoints:
            # Not logged: one leader change can touch every fetch of every client.
            self.gateway.metrics.node_endpoints_dropped.labels(api_name(entry.api_key)).inc()
        return result.tail

    def _rewrite_failed(self, entry: InFlightRequest, error: str) -> None:
        name = api_name(entry.api_key)
        self.gateway.metrics.rewrite_errors.labels(name).inc()
        limited.error(
            "response.rewrite_failed",
            api=name,
            version=entry.api_version,
            error=error,
            peer=self.peer,
        )

    def _with_software(self, version: int, payload: bytes) -> bytes:
        """KIP-885 tags for a DescribeCluster response payload the gateway built."""
        spec = api_spec(DESCRIBE_CLUSTER)
        assert spec is not None
        offset = response_body_offset(payload, spec.response_header_version(version))
        return payload[:offset] + self._describe_cluster_software(version, payload[offset:])

    def _describe_cluster_software(self, version: int, body: bytes) -> bytes:
        """BrokerSoftwareName/Version per broker entry and for the answering broker."""
        gw = self.gateway
        body = add_software_per_broker(version, body, gw.broker_software_of, gw.software_tags)
        return add_broker_software(
            DESCRIBE_CLUSTER,
            version,
            body,
            gw.broker_software(self.upstream_address),
            gw.software_tags,
        )

    def _violation(self, side: str, violation: ProtocolViolation) -> None:
        self.gateway.metrics.rejected.labels(violation.reason).inc()
        limited.warning(
            "connection.protocol_violation",
            side=side,
            reason=violation.reason,
            detail=violation.detail,
            listener=self.listener,
            **self._who(),
        )
        self.close()

    def pause_client(self) -> None:
        if self.client is not None and not self._client_paused:
            self._client_paused = True
            self.client.pause_reading()

    def resume_client(self) -> None:
        if (
            self.client is not None
            and self._client_paused
            and not self.draining
            and not self._memory_paused
        ):
            self._client_paused = False
            self.client.resume_reading()

    def drain(self) -> None:
        """Stop taking requests; close once every in-flight request was answered."""
        self.draining = True
        self.pause_client()
        if not self.inflight:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # transport.close() still flushes what is buffered, so answered requests reach
        # the client before the socket goes.
        if self.client is not None:
            self.client.close()
        if self.upstream is not None:
            self.upstream.close()

    def abort(self) -> None:
        self._closed = True
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.abort()


class UpstreamConnection(asyncio.Protocol):
    """The broker side; hands everything to its ``ClientConnection``."""

    def __init__(self, pair: ClientConnection) -> None:
        self.pair = pair
        # Bound straight to the pair: the transport calls it for every read.
        self.data_received = pair.upstream_data  # type: ignore[method-assign]

    def data_received(self, data: bytes) -> None:
        self.pair.upstream_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.pair.upstream_lost(exc)

    def pause_writing(self) -> None:
        self.pair.pause_client()

    def resume_writing(self) -> None:
        self.pair.resume_client()
