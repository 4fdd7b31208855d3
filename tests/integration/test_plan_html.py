"""report.html opened in a real headless browser (Debian's ``chromium``).

The report is written from hand-made planner results (no Spark needed: ``report`` works
on plain Python), then chromium loads it twice:

* in a small page of the test's own that frames it and writes, per chart, whether the
  image decoded (``naturalWidth``) and where it sits (``--dump-dom`` prints the result);
* alone, as a screenshot, whose pixels inside each chart's box must not be blank.

A copy of the report with the image bytes broken must fail the first check, so the
check is known to catch a chart that does not render. The probe also reports the
sections that answer "who": "Broken now", the clients that want a feature, and the
API-version-by-client table (heading, rows, and where the table lies, which the
screenshot must show drawn).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from featurectl.plan import clients as who
from featurectl.plan import identities as records
from featurectl.plan.model import PlanData, PlanInputs
from featurectl.plan.report import write_report
from gateway.commands import shell_command
from gateway.features.catalogue import load_catalogue
from tests.conftest import require_tool

# How the plan's commands name featurectl, run from here (gateway.commands).
FEATURECTL = shell_command("featurectl")

# Wide and tall enough that the whole report lays out without scrolling.
WINDOW = (1200, 5000)
BROWSER_TIMEOUT_S = 90
T0 = 1_736_121_600  # 2025-01-06T00:00:00Z
CHARTS = {"clients_over_time", "api_versions", "gated_requests_over_time"}

# Frames the report and reports every chart image: decoded size and box in the page.
PROBE_PAGE = """<!DOCTYPE html><html><head><style>
body {{ margin: 0 }} iframe {{ border: 0; width: {w}px; height: {h}px; display: block }}
</style></head><body><pre id="result">pending</pre>
<iframe id="report" src="{src}"></iframe><script>
document.getElementById("report").addEventListener("load", (event) => {{
  const doc = event.target.contentDocument;
  const charts = [...doc.querySelectorAll("figure img")].map((img) => {{
    const box = img.getBoundingClientRect();
    return {{alt: img.alt, complete: img.complete, width: img.naturalWidth,
             height: img.naturalHeight,
             box: [box.left, box.top, box.right, box.bottom]}};
  }});
  const sections = [...doc.querySelectorAll("h2")].map((h) => {{
    let next = h.nextElementSibling;
    while (next && next.tagName !== "TABLE" && next.tagName !== "H2") {{
      next = next.nextElementSibling;
    }}
    const table = next && next.tagName === "TABLE" ? next : null;
    const box = table ? table.getBoundingClientRect() : null;
    return {{id: h.id, title: h.textContent,
             rows: table ? [...table.tBodies[0].rows].map((r) =>
               [...r.cells].map((c) => c.textContent)) : [],
             box: box ? [box.left, box.top, box.right, box.bottom] : null}};
  }});
  document.getElementById("result").textContent = JSON.stringify({{charts, sections}});
}});
</script></body></html>
"""


def chromium() -> str:
    return require_tool("chromium")


def browser(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=BROWSER_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def plan_data() -> PlanData:
    """A small fleet's results: one blocked upgrade, one client on a gated version."""
    clients = ("librdkafka", "2.6.1"), ("apache-kafka-java", "4.0.0")
    heartbeat = {
        "feature": "group.version",
        "level": 1,
        "api": "ConsumerGroupHeartbeat",
        "api_key": 68,
        "api_version": 0,
        "client_software_name": "librdkafka",
        "client_software_version": "2.6.1",
        "requests": 1200.0,
        "connections_now": 3.0,
        "connections_peak": 5.0,
        "first_seen": T0 * 1000,
        "last_seen": (T0 + 3600) * 1000,
        "gateways": ["gw-1"],
    }
    usage = [
        {k: v for k, v in heartbeat.items() if k not in ("feature", "level")},
        {
            **{k: v for k, v in heartbeat.items() if k not in ("feature", "level")},
            "api": "Produce",
            "api_key": 0,
            "api_version": 11,
            "requests": 90000.0,
        },
    ]
    refusals = [
        {
            "reason": "unsupported_version",
            "api_key": 0,
            "api": "Produce",
            "api_version": 2,
            "client_software_name": "kafka-python",
            "client_software_version": "2.0.2",
            "requests": 300.0,
            "first_seen": T0 * 1000,
            "last_seen": (T0 + 600) * 1000,
            "gateways": ["gw-1"],
        },
        {
            "reason": "gated_by_feature",
            "api_key": 88,
            "api": "StreamsGroupHeartbeat",
            "api_version": 0,
            "client_software_name": "apache-kafka-streams",
            "client_software_version": "4.1.0",
            "requests": 40.0,
            "first_seen": T0 * 1000,
            "last_seen": (T0 + 600) * 1000,
            "gateways": ["gw-2"],
        },
    ]
    identities = [
        {
            "gateway_id": "gw-1",
            "software_name": "kafka-python",
            "software_version": "2.0.2",
            "client_id": "legacy-producer",
            "peers": ["10.0.0.7"],
            "connections_opened": 300,
            "first_seen": T0 * 1000,
            "last_seen": (T0 + 600) * 1000,
        }
    ]
    index = records.identity_index(identities)
    features = [{"feature": "streams.version", "cluster_max_level": 1}]
    state = {"zookeeper": "zk-0:2181", "chroot": "/kafka-gateway"}
    broken, wanting = who.classify_refusals(
        refusals, load_catalogue(None), {}, features, usage, index, state
    )
    return PlanData(
        refusals=refusals,
        broken_now=broken,
        wanting=wanting,
        versions_by_client=who.versions_by_client(usage, {(68, 0)}, index, refusals),
        identities=len(identities),
        dataset={
            "path": "metrics/",
            "samples": 1000,
            "planner_samples": 800,
            "gateways": 2,
            "scrapes": 40,
            "start_ms": T0 * 1000,
            "end_ms": (T0 + 3600) * 1000,
            "gateway_spans": [
                {"gateway_id": g, "first_ms": T0 * 1000, "last_ms": 0, "scrapes": 20}
                for g in ("gw-1", "gw-2")
            ],
        },
        state={
            "source": "snapshot",
            "time_ms": (T0 + 3600) * 1000,
            "zookeeper": "zk-0:2181",
            "chroot": "/kafka-gateway",
            "epoch": 3,
            "finalized": {"group.version": 1},
            "gateway_ids": ["gw-1", "gw-2"],
            "registrations": [],
        },
        features=[
            {
                "feature": "group.version",
                "finalized_level": 1,
                "catalogue_max_level": 1,
                "cluster_max_level": 1,
                "live_gateways": 2,
                "support": [],
            }
        ],
        verdicts=[
            {
                "feature": "group.version",
                "level": 0,
                "current_level": 1,
                "kind": "disable",
                "safe": False,
                "blocking_gateways": [],
                "blocking_clients": [
                    {"client_software_name": "librdkafka", "client_software_version": "2.6.1"}
                ],
                "blocking_requests": 1200.0,
            }
        ],
        blockers=[],
        clients=[heartbeat],
        usage=usage,
        connections_series=[
            {
                "bucket": T0 + 60 * i,
                "client_software_name": name,
                "client_software_version": version,
                "connections": float(5 + (i % 7) * (n + 1)),
            }
            for i in range(60)
            for n, (name, version) in enumerate(clients)
        ],
        gated_series=[
            {
                "bucket": T0 + 60 * i,
                "feature": "group.version",
                "level": 1,
                "client_software_name": "librdkafka",
                "client_software_version": "2.6.1",
                "rate": 0.5 + (i % 5),
            }
            for i in range(60)
        ],
        timings={"parse": 1.0, "total": 2.0},
    )


def probe_report(profile: Path, report: Path) -> dict[str, Any]:
    probe = report.with_name(f"probe-{report.stem}.html")
    probe.write_text(PROBE_PAGE.format(w=WINDOW[0], h=WINDOW[1], src=report.name))
    dom = browser(profile, "--allow-file-access-from-files", "--dump-dom", probe.as_uri()).stdout
    match = re.search(r'<pre id="result">(.*?)</pre>', dom, re.S)
    assert match and match.group(1) != "pending", dom[-2000:]
    return json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def chart_report(profile: Path, report: Path) -> list[dict[str, Any]]:
    return probe_report(profile, report)["charts"]


def test_html_report_is_one_file_whose_charts_render_in_chromium(tmp_path: Path) -> None:
    chromium()
    out = tmp_path / "plan"
    inputs = PlanInputs(
        metrics="metrics/", catalogue=load_catalogue(None), targets={"group.version": 0}, out=out
    )
    written = write_report(inputs, plan_data())
    html = written["html"].read_text()
    # Self-contained: nothing fetched, the charts inside the file.
    assert not re.search(r"""(src|href)=["'](?!data:)""", html)
    assert html.count('src="data:image/png;base64,') == len(CHARTS)
    assert "librdkafka 2.6.1" in html and f"{FEATURECTL} disable --zookeeper zk-0:2181" in html

    # Alone in a directory (as an operator gets it by mail): the probe must see it whole.
    mailed = tmp_path / "mail"
    mailed.mkdir()
    report = mailed / "report.html"
    shutil.copy(written["html"], report)
    profile = tmp_path / "chromium-profile"
    probed = probe_report(profile, report)
    charts = probed["charts"]
    assert {c["alt"] for c in charts} == CHARTS
    sections = {s["id"]: s for s in probed["sections"]}
    assert sections["broken-now"]["title"] == "Broken now"
    (broken,) = sections["broken-now"]["rows"]
    assert broken[:7] == [
        "kafka-python 2.0.2",
        "legacy-producer",
        "10.0.0.7",
        "-",  # principals: this client authenticated as nobody
        "Produce",
        "2",
        "unsupported_version",
    ]
    assert "upgrade the library or unpin" in broken[-1]
    (wants,) = sections["wanting"]["rows"]
    assert wants[0] == "apache-kafka-streams 4.1.0" and wants[8] == "streams.version=1"
    by_client = sections["api-versions-by-client"]
    assert by_client["title"] == "API versions by client"
    assert {r[0] for r in by_client["rows"]} == {"librdkafka 2.6.1"}
    assert "ConsumerGroupHeartbeat 0*" in by_client["rows"][0][4]
    for chart in charts:
        assert chart["complete"] and chart["width"] > 300 and chart["height"] > 200, chart

    from PIL import Image, ImageStat

    shot = tmp_path / "report.png"
    browser(profile, f"--screenshot={shot}", report.as_uri())
    image = Image.open(shot).convert("RGB")
    for chart in charts:
        left, top, right, bottom = (round(v) for v in chart["box"])
        assert bottom <= image.height, f"{chart['alt']} lies below the screenshot"
        region = image.crop((left, top, right, bottom))
        # A drawn chart has axes, lines and labels: many colours and real contrast.
        colours = len(region.getcolors(maxcolors=1 << 16) or range(1 << 16))
        spread = max(ImageStat.Stat(region).stddev)
        assert colours > 50 and spread > 20, (chart["alt"], colours, spread)
    # The new tables are drawn where the DOM says they are: text on white, not blank.
    for name in ("broken-now", "wanting", "api-versions-by-client"):
        left, top, right, bottom = (round(v) for v in sections[name]["box"])
        assert bottom <= image.height, f"{name} lies below the screenshot"
        region = image.crop((left, top, right, bottom))
        assert max(ImageStat.Stat(region).stddev) > 20, name

    # The same probe on a report whose images are broken: the check must catch it.
    broken = mailed / "broken.html"
    broken.write_text(html.replace("base64,iVBOR", "base64,AAAA"))
    for chart in chart_report(profile, broken):
        assert chart["width"] == 0
