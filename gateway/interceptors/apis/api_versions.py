"""ApiVersions: always answered by the gateway, every version (KIP-511 asks a broker to
answer versions it lacks itself), from the ranges negotiated for the connection, with
the feature levels and the KIP-885 software tags; learns the client's software.

The bytes are ``gateway.interceptors.api_versions``'s.
"""

from __future__ import annotations

from ...observability.logging import RateLimitedLogger, get_logger
from ...protocol import API_VERSIONS, RequestFrame
from ..api_versions import answer_api_versions
from ..bridging import advertised
from ..context import Exchange
from ..filter import Answer, Filter

# The connection's logger names: these lines were the connection's and keep their name.
log = get_logger("gateway.proxy")
# Lines about bad input, which a client can trigger once per frame.
limited = RateLimitedLogger("gateway.proxy")


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


def answer_request(ctx: Exchange, request: RequestFrame, body: memoryview) -> Answer:
    header = request.header
    assert ctx.ranges is not None
    gw = ctx.gateway
    report = ctx.feature_report
    feature_fields = {
        "supported_features": report.supported,
        "finalized_features": report.finalized,
        "finalized_epoch": report.epoch,
    }
    # An old client the version bridge serves is told the versions it carries.
    ranges = advertised(ctx, ctx.ranges, header.api_version, header.client_id, body)
    answer = answer_api_versions(
        header,
        body,
        ranges,
        broker_software=gw.broker_software(ctx.upstream_address),
        software_tags=gw.software_tags,
        **feature_fields,
    )
    if answer.client_software is not None and misreads_tagged_fields(*answer.client_software):
        # librdkafka before 2.1 skips one byte too few per tagged field: two KIP-885
        # tags throw its ApiVersions parser off (seen with Debian 12's kcat, 2.0.2).
        answer = answer_api_versions(header, body, ranges, broker_software=None, **feature_fields)
    if answer.client_software is not None and ctx.info is not None:
        # The connection moves over with its counts so far (not folded first): they
        # are this client's requests, this ApiVersions among them, not "unknown"'s.
        old = ctx.info.labels
        gw.registry.set_software(ctx.info.connection_id, *answer.client_software)
        ctx.info.labels = gw.metrics.software_labels(*answer.client_software)
        gw.metrics.client_identified(ctx.listener, old, ctx.info.labels)
        log.info(
            "connection.identified",
            listener=ctx.listener,
            **ctx.who(),
            **({"tls_subject": ctx.tls_subject} if ctx.tls_subject else {}),
        )
    elif answer.error_code == 42:
        gw.metrics.refused(
            "invalid_client_software", ctx.listener, ctx.info, header.api_key, header.api_version
        )
        limited.info("request.invalid_client_software", version=header.api_version, **ctx.who())
    elif answer.error_code == 35:
        gw.metrics.refused(
            "unsupported_version", ctx.listener, ctx.info, header.api_key, header.api_version
        )
    return Answer(answer.payload)


FILTER = Filter(API_VERSIONS, on_request=answer_request, any_version=True)
