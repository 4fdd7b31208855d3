"""``kafka-gateway``: the command line. Parses flags, loads the config, runs the server."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from .commands import exit_on_closed_stdout, pasteable, shell_command, version_text
from .config import SETTINGS, Config, ConfigError, HostPort, load_config
from .observability.logging import RateLimitedLogger, configure_logging, get_logger

if TYPE_CHECKING:  # imported when run: --help stays quick
    from .server.app import Gateway
    from .server.embedded import LocalStack
    from .server.supervisor import Supervisor

EPILOG = """\
examples:
  kafka-gateway
      start a local ZooKeeper and Tansu broker and a gateway in front of them
      (the embedded default); clients connect to the printed address. Their logs
      and data go to a temporary directory removed on exit; set KAFKA_GATEWAY_HOME
      to a directory to keep them there
  kafka-gateway --listen 0.0.0.0:9092 --upstream broker-0:9093 --advertised-host gw-0.example
      sidecar: forward to one broker, tell clients to come back to gw-0.example:9092
  kafka-gateway --mode cluster --listen 0.0.0.0:9092 --upstream kafka:9092 \\
                --advertised-host gw.example
      cluster: bootstrap on 9092, one listener per broker on 9093+node_id
  kafka-gateway --config conf/gateway.toml --metrics-listen 0.0.0.0:9404
  kafka-gateway --upstream broker-0:9093 --workers 4 --metrics-listen 0.0.0.0:9404
      four worker processes behind one port, one /metrics summing them, one
      ZooKeeper registration; a worker that dies is restarted
  kafka-gateway --mode cluster --listen 0.0.0.0:9093 --upstream kafka:9092 \\
                --tls-cert gw.pem --sni-broker-host 'broker-{node_id}.kafka.example' \\
                --sni-bootstrap-host bootstrap.kafka.example --advertised-port 443
      one TLS port for the whole cluster, routed by server name (SNI); clients reach
      it through a load balancer on port 443

Feature gating (KIP-584) is on when --zookeeper is given (the embedded default starts
one): the gateway reads <chroot>/feature, withholds API versions of unfinalized feature
levels, registers itself under <chroot>/gateways/ids/<id>, and refuses to start (exit 1)
when a finalized level exceeds what it and its broker support. With no <chroot>/feature
yet, the fleet first takes the levels its brokers finalized, once (--no-adopt-broker-features:
start with nothing finalized). Operate levels with featurectl:
  featurectl --help

Every flag can also be set in the TOML file given with --config (see conf/gateway.toml);
flags win over the file. Exit codes: 0 stopped cleanly, 2 invalid flags or config
(a port in use included: checked before anything starts), 1 failed at run time.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kafka-gateway",
        description="A Kafka protocol gateway: forwards the Kafka wire protocol to real "
        "brokers and rewrites broker addresses so clients always come back through it.",
        epilog=pasteable(EPILOG),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=version_text("kafka-gateway"))
    p.add_argument("--config", metavar="FILE", help="TOML config file (flags override it)")
    p.add_argument("--listen", metavar="HOST:PORT", help="where clients connect [127.0.0.1:9092]")
    p.add_argument(
        "--upstream",
        metavar="HOST:PORT",
        help="the broker (sidecar) or a bootstrap broker (cluster); omit to start "
        "a local ZooKeeper and broker",
    )
    p.add_argument(
        "--advertised-host",
        metavar="HOST",
        help="host name clients are told to use for this gateway [listen host]",
    )
    p.add_argument("--mode", choices=["sidecar", "cluster"], help="routing mode [sidecar]")
    p.add_argument(
        "--zookeeper",
        metavar="CONNECT",
        help="ZooKeeper connect string for finalized features (host:port[,...])",
    )
    p.add_argument(
        "--zookeeper-chroot",
        metavar="PATH",
        help="ZooKeeper path holding feature and gateways/ids [/kafka-gateway]",
    )
    p.add_argument(
        "--adopt-broker-features",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with nothing finalized in ZooKeeper yet, take the levels the brokers "
        "finalized, once [on]",
    )
    p.add_argument(
        "--gateway-id",
        metavar="ID",
        help="this gateway's registration id in ZooKeeper [advertised host:port]",
    )
    p.add_argument(
        "--features-catalogue",
        metavar="FILE",
        help="feature catalogue TOML: which API versions each feature level enables "
        "[built-in, Kafka 4.x defaults; see conf/features.toml]",
    )
    p.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus), /healthz, /readyz and /connections here",
    )
    p.add_argument(
        "--max-frame-bytes",
        type=int,
        metavar="N",
        help="close connections that send larger frames [104857600, like Kafka]",
    )
    p.add_argument(
        "--log-format",
        choices=["auto", "json", "console"],
        help="log rendering [auto: console on a TTY, else JSON]",
    )
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes, each serving every listener (SO_REUSEPORT); 1 runs a "
        "single process [the CPUs this process may use: its affinity, capped by a "
        "cgroup CPU quota]",
    )
    tls = p.add_argument_group("TLS ([tls] and [upstream_tls] in the config file)")
    tls.add_argument("--tls-cert", metavar="PEM", help="serve clients TLS with this certificate")
    tls.add_argument("--tls-key", metavar="PEM", help="its private key [in --tls-cert]")
    tls.add_argument("--tls-ca", metavar="PEM", help="CA that signs client certificates")
    tls.add_argument(
        "--tls-client-auth",
        choices=["none", "requested", "required"],
        help="client certificates: none, requested (verified when sent) or required [none]",
    )
    tls.add_argument(
        "--upstream-tls",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="connect to the broker with TLS [off]",
    )
    tls.add_argument("--upstream-tls-ca", metavar="PEM", help="CA of the broker [system CAs]")
    tls.add_argument("--upstream-tls-cert", metavar="PEM", help="client certificate (mTLS)")
    tls.add_argument("--upstream-tls-key", metavar="PEM", help="its private key")
    tls.add_argument(
        "--upstream-tls-server-hostname",
        metavar="NAME",
        help="SNI and the name the broker certificate must hold [upstream host]",
    )
    tls.add_argument(
        "--upstream-tls-check-hostname",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compare the broker certificate's name (the chain is always verified) [on]",
    )
    edge = p.add_argument_group(
        "advertised addresses, SNI and API keys ([sni] and [cluster] in the config file)"
    )
    edge.add_argument(
        "--advertised-port",
        metavar="PORT",
        type=int,
        help="port clients are told for --listen (a load balancer or NodePort) [its port]",
    )
    edge.add_argument(
        "--advertise-broker",
        metavar="NODE=HOST:PORT",
        action="append",
        help="cluster: tell clients this address for a broker (repeat per broker)",
    )
    edge.add_argument(
        "--broker-upstream",
        metavar="NODE=HOST:PORT",
        action="append",
        help="cluster: dial a broker here, not at its advertised address (repeatable)",
    )
    edge.add_argument(
        "--sni-broker-host",
        metavar="PATTERN",
        help="cluster + TLS: every broker on --listen, named PATTERN with {node_id} "
        "(e.g. broker-{node_id}.kafka.example), routed by the TLS server name",
    )
    edge.add_argument(
        "--sni-bootstrap-host",
        metavar="NAME",
        help="the server name that reaches the bootstrap upstream [--advertised-host]",
    )
    edge.add_argument(
        "--unknown-api-keys",
        choices=["close", "forward"],
        help="requests with an API key the gateway does not know: close the connection, "
        "as Kafka does, or forward them untouched (vendor keys) [close]",
    )
    p.add_argument(
        "--upgrade-socket",
        metavar="PATH",
        help="upgrade in place: a running gateway listens on this Unix socket; one "
        "started with the same path takes over its listening sockets, and the old one "
        "drains and exits 0 (docs/upgrade-in-place.md) [off]",
    )
    p.add_argument(
        "--embedded-broker",
        choices=["tansu", "kafka"],
        help="without --upstream: the local broker to start, Tansu (light) or Apache Kafka "
        "4.x in KRaft mode (fetched with Maven on first use) [tansu]",
    )
    _add_limit_flags(p)
    return p


def flag_dest(flag: str) -> str:
    """The attribute argparse stores ``flag`` under."""
    return flag.removeprefix("--").replace("-", "_")


def _node_table(flag: str, values: list[str] | None) -> dict[str, str] | None:
    """Repeated NODE=HOST:PORT flags as the config file's table (validated there)."""
    if values is None:
        return None
    table = {}
    for value in values:
        node, sep, address = value.partition("=")
        if not sep:
            raise ConfigError(flag, f"expected NODE=HOST:PORT, got {value!r}")
        table[node] = address
    return table


# Connection limits: Kafka's names; defaults and checks in gateway/config/limits.py.
_LIMIT_FLAGS = {
    "connections_max_idle_ms": "close connections idle this long [600000, like Kafka]",
    "max_connections": "close new connections over this total [unlimited, like Kafka]",
    "max_connections_per_ip": "close new connections over this count per client IP [unlimited]",
    "max_connection_creation_rate": "hold new connections over this many per second until "
    "the rate allows; close those that would wait past the first-request deadline [unlimited]",
    "connection_first_request_timeout_ms": "close connections that send no complete "
    "request within this long [10000]",
    "queued_max_request_bytes": "stop reading connections holding partial requests or "
    "undelivered responses while the gateway buffers more than this [268435456; -1: no limit]",
    "max_client_software_labels": "distinct KIP-511 client software name/version pairs "
    'labelled in metrics; more are labelled "other" [1000]',
}


def _add_limit_flags(p: argparse.ArgumentParser) -> None:
    limits = p.add_argument_group("connection limits (top level of the config file)")
    for key, text in _LIMIT_FLAGS.items():
        limits.add_argument("--" + key.replace("_", "-"), type=int, metavar="N", help=text)
    limits.add_argument(
        "--max-connections-per-ip-overrides",
        metavar="HOST:N,...",
        help="per-IP caps for some addresses, e.g. 127.0.0.1:100 [none]",
    )


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
        finally:
            # --help and --version print and exit; flushed here so that ``| head`` ends
            # them without a BrokenPipeError traceback. Only this part prints to stdout:
            # a BrokenPipeError while serving is a real failure and is not caught.
            sys.stdout.flush()
    except BrokenPipeError as error:
        return exit_on_closed_stdout(error)
    # Every key declared with a flag; argparse's None is "not given" (the file's or the
    # default value stands).
    overrides = {
        key: getattr(args, flag_dest(declared.setting.flag))
        for key, declared in SETTINGS.items()
        if declared.setting.flag is not None
    }
    try:
        overrides["advertised_brokers"] = _node_table("--advertise-broker", args.advertise_broker)
        overrides["broker_upstreams"] = _node_table("--broker-upstream", args.broker_upstream)
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"kafka-gateway: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_format, config.log_level)
    RateLimitedLogger.configure(config.log_bad_input_burst, config.log_bad_input_interval_s)
    try:
        return run(config)
    except KeyboardInterrupt:
        return 0


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run(config: Config) -> int:
    import uvloop

    from .server.app import Gateway
    from .server.embedded import EmbeddedError, LocalStack, default_workdir, interrupts
    from .server.fdlimit import raise_open_files_limit
    from .server.features import FeatureStartupError
    from .server.handover import HandoverFailed, Successor
    from .server.ports import PortInUse, configured_ports, first_taken, hold

    log = get_logger("gateway")
    # Upgrade in place: a gateway serving on the upgrade socket hands its listening sockets
    # over (gateway/server/handover.py); this one then binds none of the configured ports.
    try:
        successor = Successor.connect(config.upgrade_socket) if config.upgrade_socket else None
    except HandoverFailed as exc:
        print(f"kafka-gateway: {exc}", file=sys.stderr)
        return 1
    # Bound (not listening) until the gateway binds them itself: a taken port fails now,
    # before a ZooKeeper and a broker are started for nothing, and a second gateway
    # started meanwhile sees these as taken.
    ports = configured_ports(config) if successor is None else []
    try:
        held = hold(ports)
    except PortInUse as exc:
        print(f"kafka-gateway: {exc}", file=sys.stderr)
        return 2
    before, after = raise_open_files_limit()
    # Two descriptors per client connection (its own and its upstream's), per process.
    log.info(
        "gateway.open_files_limit",
        limit=after,
        raised_from=before if after != before else None,
        clients_per_process_at_most=after // 2,
    )
    # Until the loop's own handlers take over: SIGTERM during the embedded start stops
    # what was started (the finally below), as Ctrl-C does, instead of orphaning it.
    previous = {sig: signal.signal(sig, interrupts.handler) for sig in STOP_SIGNALS}
    stack: LocalStack | None = None
    try:
        if config.upstream is None:
            workdir, temporary = default_workdir(config.embedded_home)
            stack = LocalStack(
                workdir,
                temporary,
                broker_kind=config.embedded_broker,
                cache_dir=config.cache_dir,
            )
            try:
                stack.start()
            except EmbeddedError as exc:
                log.error("embedded.failed", error=str(exc).partition("\n")[0])
                print(f"kafka-gateway: {exc}", file=sys.stderr)
                if temporary:
                    print(
                        f"kafka-gateway: {workdir} is removed; to keep the logs and data, "
                        "set KAFKA_GATEWAY_HOME=DIR (or embedded_home in the config file)",
                        file=sys.stderr,
                    )
                return 1
            config = replace(
                config,
                upstream=HostPort("127.0.0.1", stack.broker_port),
                zookeeper=config.zookeeper or stack.zookeeper,
            )
        if config.workers > 1 or config.upgrade_socket is not None:
            from .server.supervisor import Supervisor

            # The supervisor runs the control plane (and the upgrade socket, even with one
            # worker); its workers are Gateways.
            server: Gateway | Supervisor = Supervisor(config, successor)
            config = server.config  # with the port it picked, if listen's was 0
        else:
            server = Gateway(config)
        for sock in held:
            sock.close()
        held = []
        banner = _banner(config, stack) if stack is not None else None
        uvloop.run(_serve(server, banner))
    except FeatureStartupError as exc:
        log.error("gateway.refused_to_start", error=str(exc))
        print(f"kafka-gateway: refusing to start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # A port taken after the check (between it and the bind): named as the check
        # names it. The listeners and workers of the failed start are closed by now,
        # and the check's own sockets must be too.
        for sock in held:
            sock.close()
        taken = first_taken(ports)
        if taken is not None:
            print(f"kafka-gateway: {taken.advice()}", file=sys.stderr)
            return 2
        log.error("gateway.failed", error=str(exc))
        return 1
    finally:
        for sock in held:
            sock.close()
        if stack is not None:
            # A second Ctrl-C or SIGTERM must not cut the stop short: it would leave
            # the children it did not reach running (stop() kills them after 10 s).
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


async def _serve(server: Gateway | Supervisor, banner: str | None) -> None:
    """Serve until stopped; print ``banner`` once every listener is bound and serving
    (not before: a user would connect to a port that refuses, or see "is up" and then
    an error)."""

    async def announce() -> None:
        await server.serving.wait()
        print(banner, file=sys.stderr, flush=True)

    announcing = asyncio.get_running_loop().create_task(announce()) if banner else None
    try:
        await server.serve_forever()
    finally:
        if announcing is not None:
            announcing.cancel()


def _banner(config: Config, stack: LocalStack) -> str:
    from .features.store import ZOOKEEPER_ENV

    workdir = f"{stack.workdir} (removed on exit)" if stack.temporary else str(stack.workdir)
    return (
        f"\nkafka-gateway is up. Point clients at {config.advertised}:{config.listen.port}"
        f"  (bootstrap.servers={config.advertised}:{config.listen.port})\n"
        f"  broker ({stack.broker_name}): {stack.broker}"
        f"   ZooKeeper: {stack.zookeeper}\n"
        f"  feature levels: {shell_command('featurectl')} describe"
        f" --zookeeper {stack.zookeeper}\n"
        # featurectl reads it when --zookeeper is left out (README walkthrough).
        f"  featurectl in another shell: export {ZOOKEEPER_ENV}={stack.zookeeper}\n"
        + (f"  metrics: http://{config.metrics_listen}/metrics\n" if config.metrics_listen else "")
        + f"  logs and data: {workdir}\n  Ctrl-C stops everything.\n"
    )


if __name__ == "__main__":
    sys.exit(main())
