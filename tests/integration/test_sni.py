"""One TLS port for a whole cluster: the gateway routes each connection by the TLS
server name (SNI) and advertises every broker as a name under one pattern on that port.

Tansu 0.6 cannot form a multi-broker cluster, so each "broker" here is a Tansu of its
own with a cluster id of its own, pinned to a node id with ``broker_upstreams``: the
cluster id in Metadata and DescribeCluster tells which upstream a server name reached.
Every Tansu advertises an unreachable host, so clients only get anywhere through names
the gateway rewrote. Certificates are made per test by trustme.

Real clients must resolve the broker names to the gateway. Names under ``.localhost``
do not resolve here (glibc without nss-myhostname), and the tests must not edit the
machine's /etc/hosts, so the client runs in a mount namespace of its own (``unshare
--mount``) where a private hosts file is bind-mounted over /etc/hosts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import trustme
from kio.index import load_response_schema
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i8
from prometheus_client.parser import text_string_to_metric_families

from gateway.interceptors.describe_cluster import strip_software_per_broker
from gateway.wire import strip_unknown_tags
from tests.harness import GatewayProcess, KafkaConnection, free_port
from tests.harness.kafka_wire import ConnectionClosed, decode
from tests.integration.test_features import metric
from tests.integration.test_tls import tls_connection

DOMAIN = "kafka.test"
BOOTSTRAP = f"bootstrap.{DOMAIN}"
PATTERN = f"broker-{{node_id}}.{DOMAIN}"
ROOT = Path(__file__).resolve().parents[2]
# What a client sees of a refused server name: the TLS alert, or the close without it.
REFUSED = "UNRECOGNIZED_NAME|UNEXPECTED_EOF"


@pytest.fixture
def sni_pki(tmp_path: Path) -> tuple[str, str]:
    """(CA file, server key + chain for the bootstrap name and *.kafka.test)."""
    ca = trustme.CA()
    server = ca.issue_cert(BOOTSTRAP, f"*.{DOMAIN}")
    ca_path, server_path = tmp_path / "ca.pem", tmp_path / "server.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    server.private_key_and_cert_chain_pem.write_to_path(str(server_path))
    return str(ca_path), str(server_path)


def sni_gateway(gateway_factory, tmp_path: Path, cert: str, upstream: str, **pins: str):
    """A cluster-mode gateway with SNI routing; ``pins``: node id "n<id>" -> upstream."""
    lines = [
        'mode = "cluster"',
        "[tls]",
        f'cert = "{cert}"',
        "[sni]",
        f'broker_host = "{PATTERN}"',
        f'bootstrap_host = "{BOOTSTRAP}"',
        "[cluster.broker_upstreams]",
        *(f'{name.removeprefix("n")} = "{address}"' for name, address in pins.items()),
    ]
    path = tmp_path / "sni.toml"
    path.write_text("\n".join(lines) + "\n")
    return gateway_factory("--config", str(path), upstream=upstream, metrics=True)


def metadata(conn: KafkaConnection):
    return conn.request_entity(
        MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    )


def describe_cluster(conn: KafkaConnection):
    response = conn.request(
        60,
        1,
        DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(1)),
    )
    body = strip_software_per_broker(1, strip_unknown_tags(60, 1, response.body))
    return decode(load_response_schema(60, 1), body)


def refused(gw: GatewayProcess, reason: str) -> float | None:
    return metric(gw, f'kafka_gateway_sni_refused_total{{reason="{reason}"}}')


def test_each_server_name_reaches_its_own_upstream(
    gateway_factory, broker_factory, sni_pki, tmp_path
):
    ca, cert = sni_pki
    alpha, beta, gamma = (broker_factory(cluster_id=f"sni-{n}") for n in ("alpha", "beta", "gamma"))
    gw = sni_gateway(
        gateway_factory, tmp_path, cert, alpha.bootstrap, n1=beta.bootstrap, n111=gamma.bootstrap
    )
    gw.wait_for_log(r"\"listener\": \"sni\".*broker-\{node_id\}.*gateway\.listening")
    expected = {
        BOOTSTRAP: "sni-alpha",
        f"broker-1.{DOMAIN}": "sni-beta",
        # DNS names compare without case; so does the routing.
        f"BROKER-111.{DOMAIN}": "sni-gamma",
    }
    for name, cluster_id in expected.items():
        with tls_connection(gw, ca, server_hostname=name) as conn:
            answer = metadata(conn)
            assert answer.cluster_id == cluster_id, name
            # Every broker (each Tansu is node 111) is advertised as its name on the
            # one shared port.
            assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
                (111, f"broker-111.{DOMAIN}", gw.port)
            ]
            described = describe_cluster(conn)
            assert described.cluster_id == cluster_id, name
            assert [(b.broker_id, b.host, b.port) for b in described.brokers] == [
                (111, f"broker-111.{DOMAIN}", gw.port)
            ]
    assert "sni.refused" not in gw.log_text()


def test_a_broker_name_not_learned_yet_is_looked_up_in_metadata_first(
    gateway_factory, broker_factory, sni_pki, tmp_path
):
    """A client with metadata from before a gateway restart (or from another worker)
    connects straight to a broker name: the gateway asks the bootstrap upstream's
    Metadata where that broker is. A name Metadata does not know closes after the
    handshake, counted as unknown_broker."""
    ca, cert = sni_pki
    tansu = broker_factory(advertised_host="127.0.0.1", cluster_id="sni-lookup")
    gw = sni_gateway(gateway_factory, tmp_path, cert, tansu.bootstrap)
    with tls_connection(gw, ca, server_hostname=f"broker-111.{DOMAIN}") as conn:
        assert metadata(conn).cluster_id == "sni-lookup"
    assert refused(gw, "unknown_broker") == 0
    conn = tls_connection(gw, ca, server_hostname=f"broker-5.{DOMAIN}")
    with conn, pytest.raises(ConnectionClosed):
        conn.api_versions(0)
    assert refused(gw, "unknown_broker") == 1
    gw.wait_for_log(rf'"server_name": "broker-5\.{re.escape(DOMAIN)}".*"sni\.refused"')


def test_the_bootstrap_name_reaches_a_live_broker_when_the_upstream_is_down(
    gateway_factory, broker_factory, sni_pki, tmp_path
):
    ca, cert = sni_pki
    alpha = broker_factory(cluster_id="sni-alpha")
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    gw = sni_gateway(gateway_factory, tmp_path, cert, down, n1=alpha.bootstrap)
    with tls_connection(gw, ca, server_hostname=BOOTSTRAP) as conn:
        assert metadata(conn).cluster_id == "sni-alpha"
    gw.wait_for_log(rf'"upstream": "{re.escape(down)}".*upstream\.connect_failed')


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (f"nobody.{DOMAIN}", "unknown_server_name"),
        (f"broker-007.{DOMAIN}", "unknown_server_name"),
    ],
)
def test_an_unknown_server_name_is_refused_with_unrecognized_name(
    gateway_factory, broker_factory, sni_pki, tmp_path, name, reason
):
    ca, cert = sni_pki
    tansu = broker_factory()
    gw = sni_gateway(gateway_factory, tmp_path, cert, tansu.bootstrap)
    # Refused in the handshake: OpenSSL makes the unrecognized_name alert, but uvloop
    # drops the socket without flushing it, so the client may see only the close.
    with pytest.raises(ssl.SSLError, match=REFUSED):
        tls_connection(gw, ca, server_hostname=name)
    # No server name at all (a client that connects by IP address) is refused too.
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    conn = KafkaConnection(gw.host, gw.port)
    with conn, pytest.raises(ssl.SSLError, match=REFUSED):
        context.wrap_socket(conn._sock)
    gw.wait_for_log(rf'"server_name": "{re.escape(name)}".*"sni\.refused"')
    assert refused(gw, reason) == 1
    assert refused(gw, "missing_server_name") == 1
    # The gateway keeps serving the names it knows.
    with tls_connection(gw, ca, server_hostname=BOOTSTRAP) as conn:
        assert conn.api_versions(3).error_code == 0


# --------------------------------------------------------------------------------------
# Real clients through the single port
# --------------------------------------------------------------------------------------


def _private_hosts_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run(
        [unshare, "--mount", "sh", "-c", "mount --bind /etc/hosts /etc/hosts"],
        capture_output=True,
        timeout=10,
    )
    return probe.returncode == 0


def run_client(tmp_path: Path, driver: str, names: list[str], *args: str) -> dict:
    """Run tests/integration/sni_client.py with ``names`` resolving to 127.0.0.1."""
    if not _private_hosts_works():
        pytest.skip("needs unshare --mount (root or CAP_SYS_ADMIN) for a private /etc/hosts")
    hosts = tmp_path / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + f"127.0.0.1 {' '.join(names)}\n")
    script = f'mount --bind "{hosts}" /etc/hosts && exec "$@"'
    argv = ["unshare", "--mount", "sh", "-c", script, "sh", sys.executable]
    argv += ["-m", "tests.integration.sni_client", driver, *args]
    done = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("driver", ["confluent", "kafka-python"])
def test_real_client_creates_produces_and_consumes_through_the_one_port(
    gateway_factory, broker_factory, sni_pki, tmp_path, driver, unique_topic
):
    ca, cert = sni_pki
    tansu = broker_factory()
    # Tansu advertises an unreachable host: clients only reach it by the names the
    # gateway advertises, and the gateway dials it where broker_upstreams says.
    gw = sni_gateway(gateway_factory, tmp_path, cert, tansu.bootstrap, n111=tansu.bootstrap)
    names = [BOOTSTRAP, f"broker-111.{DOMAIN}"]
    result = run_client(tmp_path, driver, names, f"{BOOTSTRAP}:{gw.port}", unique_topic, ca)
    assert result["consumed"] == result["produced"]
    assert result["brokers"] == [[111, f"broker-111.{DOMAIN}", gw.port]]
    # Both the bootstrap name and the broker's name carried traffic, on the one port.
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    listeners = {
        sample.labels["listener"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "kafka_gateway_connections_total" and sample.value > 0
    }
    assert listeners == {"bootstrap", "broker-111"}
