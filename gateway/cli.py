"""``kafka-gateway``: the command line. Parses flags, loads the config, runs the server."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from .commands import exit_on_closed_stdout, pasteable, shell_command, version_text
from .config import Config, ConfigError, HostPort, load_config
from .config.flags import add_flags, overrides
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
    # Every other option is a key's flag, as gateway/config/ declares it.
    add_flags(p)
    return p


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
    try:
        config = load_config(args.config, overrides(args))
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
