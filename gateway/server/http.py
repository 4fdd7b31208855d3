"""The operator HTTP endpoint on the event loop: /metrics, /healthz, /readyz, /connections.

Served from the loop (not prometheus_client's thread) so a scrape reads the gateway's
state without locks. Requests are tiny and rare; each gets one response and a close.

* ``/metrics``: Prometheus text exposition.
* ``/healthz``: 200 while the gateway can serve the finalized feature levels, else 503
  (liveness: restart or page someone).
* ``/readyz``: 200 while listeners accept connections (not before start, not while
  draining, not while incompatible), else 503 (readiness: route clients elsewhere).
* ``/connections``: the KIP-511 connection registry as JSON.
* ``/clients``: the bounded record of client identities (software or client id, top
  peer addresses, first/last seen, connections opened, versions used and refused) as
  JSON (``gateway.client_records``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ..observability.logging import get_logger

log = get_logger("gateway.http")

Answer = tuple[int, str, bytes]
# A route answers at once, or later (a supervisor asks its workers first).
Route = Callable[[], Answer | Awaitable[Answer]]

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def metrics_route(registry: CollectorRegistry) -> Route:
    return lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry))


def json_route(produce: Callable[[], object]) -> Route:
    return lambda: (200, "application/json", json.dumps(produce(), indent=1).encode() + b"\n")


def check_route(check: Callable[[], tuple[bool, str]]) -> Route:
    def route() -> tuple[int, str, bytes]:
        ok, why = check()
        return (200 if ok else 503), "text/plain; charset=utf-8", (why + "\n").encode()

    return route


async def serve_http(
    host: str, port: int, routes: dict[str, Route], sock: socket.socket | None = None
) -> asyncio.Server:
    """Serve ``routes`` on host:port, or on ``sock``: a listening socket handed over by
    the gateway this one replaces (gateway.server.handover)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, _, rest = head.decode("latin-1").partition(" ")
            path = rest.partition(" ")[0].partition("?")[0]
            route = routes.get(path)
            if method not in ("GET", "HEAD"):
                status, ctype, body = 405, "text/plain", b"GET only\n"
            elif route is None:
                status, ctype, body = (
                    404,
                    "text/plain",
                    b"try /metrics /healthz /readyz /connections /clients\n",
                )
            else:
                answer = route()
                if inspect.isawaitable(answer):
                    answer = await answer
                status, ctype, body = answer
            writer.write(
                f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            pass
        except Exception as exc:  # a broken route must not take the endpoint down
            log.error("http.route_failed", error=repr(exc))
        finally:
            writer.close()

    if sock is not None:
        server = await asyncio.start_server(handle, sock=sock)
    else:
        server = await asyncio.start_server(handle, host, port, reuse_address=True)
    bound = server.sockets[0].getsockname()
    log.info("http.listening", address=f"{bound[0]}:{bound[1]}", paths=sorted(routes))
    return server
