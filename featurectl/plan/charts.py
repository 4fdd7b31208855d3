"""The plan's PNG charts (matplotlib, imported when drawing): client connections and
gated requests over time, and requests per API version."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featurectl.plan.decide import client_label

if TYPE_CHECKING:
    from featurectl.plan.model import PlanData

# Lines per chart before the rest is summed as "other": more is unreadable.
CHART_SERIES = 8


def _top_series(
    points: Sequence[tuple[int, str, float]], limit: int = CHART_SERIES
) -> dict[str, dict[int, float]]:
    """label → {time: value}, keeping the ``limit`` largest labels and summing the rest."""
    peak: dict[str, float] = defaultdict(float)
    for _, label, value in points:
        peak[label] = max(peak[label], value)
    keep = set(sorted(peak, key=lambda k: -peak[k])[:limit])
    series: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for bucket, label, value in points:
        series[label if label in keep else "other"][bucket] += value
    return series


def time_format(span_s: float) -> tuple[str, str]:
    """(tick format, axis label) for a window ``span_s`` long: every tick must read
    differently, so seconds on a short window and dates on a long one (UTC)."""
    if span_s <= 15 * 60:
        return "%H:%M:%S", "time (UTC, {day})"
    if span_s <= 36 * 3600:
        return "%H:%M", "time (UTC, {day})"
    if span_s <= 14 * 86400:
        return "%m-%d %H:%M", "time (UTC, {year})"
    return "%Y-%m-%d", "date (UTC)"


def _time_axis(ax: Any, times: Sequence[datetime]) -> None:
    """Ticks and their format by the window's span (``time_format``)."""
    import matplotlib.dates as mdates

    if not times:
        return
    first, last = min(times), max(times)
    pattern, label = time_format((last - first).total_seconds())
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=4, maxticks=10))
    ax.xaxis.set_major_formatter(mdates.DateFormatter(pattern, tz=UTC))
    day = first.strftime("%Y-%m-%d")
    if last.date() != first.date():
        day += " to " + last.strftime("%Y-%m-%d")
    ax.set_xlabel(label.format(day=day, year=first.strftime("%Y")))


def _time_chart(
    series: Mapping[str, Mapping[int, float]], title: str, ylabel: str, path: Path
) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    times: list[datetime] = []
    for label in sorted(series):
        points = sorted(series[label].items())
        times += [datetime.fromtimestamp(t, UTC) for t, _ in points]
        ax.plot(
            [datetime.fromtimestamp(t, UTC) for t, _ in points],
            [v for _, v in points],
            label=label,
            linewidth=1.5,
        )
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    _time_axis(ax, times)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _api_version_chart(
    usage: Sequence[Mapping[str, Any]], gated: set[tuple[int, int]], path: Path
) -> bool:
    """Heat map: requests per API (rows) and version (columns); gated cells outlined."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    totals: dict[tuple[str, int], float] = defaultdict(float)
    keys: dict[str, int] = {}
    for u in usage:
        # Refusals a gateway could not attribute were once labelled key -1, version -1:
        # no cell of the grid (index -1 would draw them in the last column).
        if u["api"] is None or u["api_version"] is None or u["api_version"] < 0:
            continue
        if u["api_key"] is None or u["api_key"] < 0:
            continue
        totals[(u["api"], u["api_version"])] += u["requests"] or 0.0
        keys[u["api"]] = u["api_key"]
    if not totals:
        return False
    per_api: dict[str, float] = defaultdict(float)
    for (api, _), n in totals.items():
        per_api[api] += n
    gated_apis = {api for api, key in keys.items() if any(k == key for k, _ in gated)}
    apis = sorted(per_api, key=lambda a: (a not in gated_apis, -per_api[a]))[:20]
    max_version = max(v for (api, v) in totals if api in apis)
    grid = np.zeros((len(apis), max_version + 1))
    for (api, version), n in totals.items():
        if api in apis:
            grid[apis.index(api), version] = n
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * (max_version + 1) + 3), 0.4 * len(apis) + 1.8))
    image = ax.imshow(np.log10(grid + 1), aspect="auto", cmap="viridis")
    for row, api in enumerate(apis):
        for version in range(max_version + 1):
            if (keys[api], version) in gated and grid[row, version] > 0:
                ax.add_patch(
                    Rectangle((version - 0.5, row - 0.5), 1, 1, fill=False, ec="red", lw=2)
                )
    ax.set_yticks(range(len(apis)), apis, fontsize=8)
    ax.set_xticks(range(max_version + 1), [str(v) for v in range(max_version + 1)], fontsize=8)
    ax.set_xlabel("API version")
    ax.set_title("Requests per API version in the window (log10); red: needs a feature level")
    fig.colorbar(image, ax=ax, label="log10(requests + 1)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _release_chart(release: Mapping[str, Any], path: Path) -> bool:
    """Bars: requests in the window per client, split into what Kafka X refuses (red)
    and the rest (green), the clients that break first."""
    import matplotlib.pyplot as plt

    rows = release["clients"][:20]
    if not rows:
        return False
    labels = [client_label(c) for c in rows]
    refused = [sum(r["requests"] for r in c["refused"]) for c in rows]
    rest = [max(0.0, c["requests"] - n) for c, n in zip(rows, refused, strict=True)]
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(rows) + 1.8))
    ax.barh(labels, refused, color="#b00020", label=f"refused by {release['release']}")
    ax.barh(labels, rest, left=refused, color="#1b7f3b", label="accepted")
    ax.invert_yaxis()
    ax.set_xlabel("requests in the window")
    ax.set_title(f"Kafka {release['release']} readiness: requests per client")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def render_charts(data: PlanData, directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers and CI
    directory.mkdir(parents=True, exist_ok=True)
    written = []

    connections = [
        (r["bucket"], client_label(r), r["connections"]) for r in data.connections_series
    ]
    if connections:
        path = directory / "clients_over_time.png"
        _time_chart(
            _top_series(connections),
            "Client connections by client software version (sum over gateways)",
            "connections",
            path,
        )
        written.append(path)

    gated = {(c["api_key"], c["api_version"]) for c in data.clients}
    path = directory / "api_versions.png"
    if _api_version_chart(data.usage, gated, path):
        written.append(path)

    for release in data.releases:
        path = directory / f"release_{release['release']}.png"
        if _release_chart(release, path):
            written.append(path)

    rates = [
        (r["bucket"], f"{r['feature']}={r['level']} · {client_label(r)}", r["rate"])
        for r in data.gated_series
    ]
    if rates:
        path = directory / "gated_requests_over_time.png"
        _time_chart(
            _top_series(rates),
            "Requests needing a feature level, by client software",
            "requests/s",
            path,
        )
        written.append(path)
    return written


__all__ = ["CHART_SERIES", "render_charts", "time_format"]
