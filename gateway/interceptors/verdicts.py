"""What a filter's hook decided, carried out on the connection (``Exchange``).

A hook (``gateway.interceptors.filter``) returns a verdict and touches nothing; this
module is the one place a verdict becomes the connection's actions: a request forwarded
(as it came, changed, or unanswered), answered in its turn, the connection closed, the
gateway's own request sent upstream first, or a coroutine awaited for the verdict.
"""

from __future__ import annotations

from ..observability.logging import RateLimitedLogger
from ..protocol import RequestFrame, api_name
from .context import Exchange
from .filter import Answer, AskUpstream, Close, Forward, Later, RequestVerdict

# Named as the connection's lines were.
limited = RateLimitedLogger("gateway.proxy")

# A request's API key, version and correlation id: bytes 4-12 of its frame, after the
# length prefix. A frame forwarded in its place keeps them: the answer is matched by them.
_HEAD = slice(4, 12)


def carry_out(ctx: Exchange, request: RequestFrame, verdict: RequestVerdict) -> None:
    """Do what a request hook decided for ``request``."""
    entry = request.request
    match verdict:
        case Forward(data=None, answered=True):
            ctx.forward(request)
        case Forward(data=data, answered=False):
            ctx.send_unanswered(entry, request.frame if data is None else data)
        case Forward(data=bytes() as data):
            if data[_HEAD] != request.frame[_HEAD]:
                raise ValueError("a forwarded frame must keep its request's key, version and id")
            ctx.forward(RequestFrame(request.header, data, entry))
        case Answer(payload=payload):
            ctx.answer(entry, payload)
        case Close(reason=None):
            ctx.close()
        case Close(reason=str() as reason, detail=detail, side=side):
            ctx.violation(side, reason, detail)
        case AskUpstream():
            _ask(ctx, request, verdict)
        case Later():
            ctx.spawn(_later(ctx, request, verdict))
        case _:
            raise TypeError(f"a request hook returned {verdict!r}, not a verdict")


def _ask(ctx: Exchange, request: RequestFrame, ask: AskUpstream) -> None:
    def answered(payload: memoryview) -> None:
        try:
            verdict = ask.then(payload)
        except Exception as exc:  # an upstream answer the hook cannot read
            ctx.rewrite_failed(request.request, repr(exc))
            ctx.close()
            return
        carry_out(ctx, request, verdict)

    ctx.ask_upstream(ask.api_key, ask.build, answered)


async def _later(ctx: Exchange, request: RequestFrame, later: Later) -> None:
    try:
        verdict = await later.work
    except Exception as exc:  # a bug must cost this connection, not the loop
        limited.error(
            "request.hook_failed",
            api=api_name(request.header.api_key),
            error=repr(exc),
            **ctx.who(),
        )
        ctx.close()
        return
    if not ctx.closed:
        carry_out(ctx, request, verdict)
