"""``featurectl collect`` writes each gateway's /clients into DIR/clients/, and
``read_clients`` returns them as plain rows (a real HTTP server serving a gateway's
/metrics and /clients as the gateway writes them)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from featurectl import cli
from featurectl.plan.clients_dataset import (
    ROW_FIELDS,
    ClientSink,
    arrow_schema,
    read_client_rows,
    rows_from,
)
from featurectl.plan.readers import read_clients
from featurectl.scrape import clients_url
from gateway.client_records import ClientRecords


def gateway_records(now: float) -> list[dict[str, Any]]:
    records = ClientRecords(clock=lambda: now)
    old = records.record(
        ("unknown", "unknown", "legacy-app-7"), ("client-id:legacy-app", "unknown")
    )
    for _ in range(3):
        old.opened("10.1.2.3")
    old.opened("10.9.9.9")
    old.connections_active = 0
    for principal in ("User:legacy", "User:legacy", "User:ops"):
        old.add_principal(principal)
    old.add_used({(3, 1): 4, (0, 2): 3})
    old.add_refused(0, 2, "unsupported_version", 3)
    rd = records.record(("librdkafka", "2.6.1", "rdkafka"), ("librdkafka", "2.6.1"))
    rd.opened("10.1.2.4")
    rd.add_used({(0, 11): 10})
    return records.snapshot()


class Gateway:
    """/metrics (with kafka_gateway_info naming the gateway) and /clients."""

    def __init__(self, gateway_id: str, clients: list[dict[str, Any]] | None) -> None:
        registry = CollectorRegistry()
        Gauge("kafka_gateway_info", "info", ["gateway_id"], registry=registry).labels(
            gateway_id
        ).set(1)
        self.metrics = generate_latest(registry)
        self.clients = clients

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    body, ctype = gateway.metrics, "text/plain"
                elif self.path == "/clients" and gateway.clients is not None:
                    body, ctype = json.dumps(gateway.clients).encode(), "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}/metrics"


@pytest.fixture
def serve() -> Iterator:
    servers: list[ThreadingHTTPServer] = []

    def start(gateway: Gateway) -> str:
        server, url = gateway.serve()
        servers.append(server)
        return url

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_clients_url_sits_beside_metrics() -> None:
    assert clients_url("http://gw-0:9404/metrics") == "http://gw-0:9404/clients"
    assert clients_url("http://gw-0:9404/prefix/metrics") == "http://gw-0:9404/prefix/clients"
    assert clients_url("http://gw-0:9404/") == "http://gw-0:9404/clients"


def test_collect_writes_the_clients_and_read_clients_returns_plain_rows(
    serve, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    now = 1_764_000_000.0
    with_clients = serve(Gateway("gw-a", gateway_records(now)))
    without = serve(Gateway("gw-old", None))  # a gateway from before /clients: 404
    out = tmp_path / "dataset"
    argv = ["collect", "--gateway", with_clients, "--gateway", without, "--rounds", "2"]
    assert cli.main([*argv, "--interval", "0.05", "--out", str(out)]) == 0
    files = list((out / "clients").glob("date=*/*.parquet"))
    # Rounds are buffered and written at exit: one file, the newest answer per gateway.
    assert len(files) == 1
    rows = read_clients(str(out))
    assert [tuple(row) for row in rows] == [ROW_FIELDS, ROW_FIELDS]
    old, rd = rows
    assert old == {
        "gateway_id": "gw-a",
        "scraped_at": old["scraped_at"],
        "software_name": "unknown",
        "software_version": "unknown",
        "client_id": "legacy-app-7",
        "identity": "client-id:legacy-app",
        "identity_version": "unknown",
        "fingerprint": old["fingerprint"],
        "peers": ["10.1.2.3", "10.9.9.9"],
        "peer_connections": [3, 1],
        "principals": ["User:legacy", "User:ops"],
        "principal_connections": [2, 1],
        "connections_opened": 4,
        "connections_active": 0,
        "first_seen": now,
        "last_seen": now,
        "versions_used": [
            {"api_key": 0, "api": "Produce", "api_version": 2, "count": 3},
            {"api_key": 3, "api": "Metadata", "api_version": 1, "count": 4},
        ],
        "versions_refused": [
            {
                "api_key": 0,
                "api": "Produce",
                "api_version": 2,
                "reason": "unsupported_version",
                "count": 3,
            }
        ],
        "bridged_requests": 0,
    }
    assert isinstance(old["scraped_at"], float) and old["scraped_at"] > now
    assert len(old["fingerprint"]) == 12
    assert (rd["software_name"], rd["client_id"], rd["identity"]) == (
        "librdkafka",
        "rdkafka",
        "librdkafka",
    )


def test_the_newest_row_of_an_identity_wins_with_its_earliest_first_seen(tmp_path: Path) -> None:
    sink = ClientSink(tmp_path)
    first = gateway_records(1_764_000_000.0)
    sink.add("gw-a", 1_764_000_001_000, first)
    sink.flush()
    later = gateway_records(1_764_000_100.0)  # a restarted gateway: counts from zero
    later[0]["connections_opened"] = 1
    sink.add("gw-a", 1_764_000_101_000, later)
    sink.add("gw-a", 1_764_000_102_000, later)  # only a gateway's newest answer is kept
    assert len(sink.flush()) == 1
    assert sink.flush() == []  # nothing new
    rows = read_client_rows(tmp_path)
    old = next(r for r in rows if r["client_id"] == "legacy-app-7")
    assert old["connections_opened"] == 1 and old["scraped_at"] == 1_764_000_102.0
    assert old["first_seen"] == 1_764_000_000.0 and old["last_seen"] == 1_764_000_100.0
    assert read_client_rows(tmp_path / "nothing") == []


def test_rows_written_before_principals_were_recorded_read_with_none(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = rows_from(gateway_records(1_764_000_000.0), "gw-a", 1_764_000_001_000)
    schema = arrow_schema()
    older = pa.schema([f for f in schema if not f.name.startswith("principal")])
    directory = tmp_path / "clients" / "date=2025-11-24"
    directory.mkdir(parents=True)
    for row in rows:
        del row["principals"], row["principal_connections"]
    pq.write_table(pa.Table.from_pylist(rows, schema=older), directory / "part-old.parquet")
    read = read_client_rows(tmp_path)
    assert [(r["client_id"], r["principals"], r["principal_connections"]) for r in read] == [
        ("legacy-app-7", [], []),
        ("rdkafka", [], []),
    ]
