"""The HTML report of the fail-over analytics and its plots (matplotlib, Agg backend).

:Status: Beta

Inputs: the job's collected tables (lists of row dicts, :func:`analytics.job.run`) and a
:class:`Summary`. Output: ``plots/phases.png`` (stacked phase bars per fail-over),
``plots/outage_cdf.png`` (CDF of the client outage, and of failure-to-active, by scenario
and configuration) and ``report.html`` beside them, a page with no external resources that
a person opens in a browser.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

#: Stacked phases, in order, with their colours.
BAR_PHASES = (
    ("detection", "#d62728"),
    ("election", "#ff7f0e"),
    ("promotion", "#1f77b4"),
    ("recovering", "#2ca02c"),
)
#: At most this many fail-overs in the bar plot (the first ones in time).
MAX_BARS = 60
HTML_ROWS = 200

Row = dict[str, Any]


@dataclass(frozen=True)
class Summary:
    paths: list[str]
    lines: int
    skipped: int
    events_used: int
    seconds: float


def _failover_rows(tables: dict[str, list[Row]]) -> list[Row]:
    return [r for r in tables.get("failovers", []) if r.get("kind") == "failover"]


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_phases(rows: list[Row], path: Path) -> None:
    """Horizontal stacked bars, one per fail-over: detection, election, promotion,
    recovering (ms)."""
    shown = sorted(rows, key=lambda r: r.get("failure_us") or r.get("won_us") or 0)[:MAX_BARS]
    height = max(2.5, 0.28 * len(shown) + 1.5)
    fig, ax = plt.subplots(figsize=(9, height))
    if not shown:
        _empty(ax, "no fail-over in these logs")
    else:
        labels = [f"{r['cluster']} e{r['epoch']}" for r in shown]
        left = [0.0] * len(shown)
        for phase, colour in BAR_PHASES:
            widths = [float(r.get(f"{phase}_ms") or 0.0) for r in shown]
            ax.barh(labels, widths, left=left, color=colour, label=phase)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        ax.invert_yaxis()
        ax.set_xlabel("ms since the old primary's failure")
        ax.legend(loc="lower right")
        title = "phases per fail-over"
        if len(rows) > len(shown):
            title += f" (the first {len(shown)} of {len(rows)})"
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def plot_cdf(rows: list[Row], path: Path) -> None:
    """CDF of the client outage by scenario and configuration (solid), and of the
    fail-over from failure to active (dashed)."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(str(r.get("scenario")), str(r.get("config")))].append(r)
    drawn = 0
    for (scenario, config), members in sorted(groups.items()):
        outage = [float(r["client_outage_ms"]) for r in members if r.get("client_outage_ms")]
        total = [float(r["failover_ms"]) for r in members if r.get("failover_ms") is not None]
        if outage:
            ax.step(*_cdf(outage), where="post", label=f"client outage: {scenario}, {config}")
            drawn += 1
        if total:
            ax.step(*_cdf(total), where="post", linestyle="--",
                    label=f"failure to active: {scenario}, {config}")  # fmt: skip
            drawn += 1
    if not drawn:
        _empty(ax, "no fail-over in these logs")
    else:
        if not any(r.get("client_outage_ms") for r in rows):
            ax.set_title("CDF (no drill events: client outage unknown)")
        else:
            ax.set_title("CDF of client outage and fail-over time")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of fail-overs")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.1f}"
    return html.escape(str(value))


def html_table(rows: list[Row], columns: Sequence[str], limit: int = HTML_ROWS) -> str:
    if not rows:
        return "<p class='none'>none</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>"
        for r in rows[:limit]
    )
    more = (
        f"<p>the first {limit} of {len(rows)} rows; all in the CSV</p>" if len(rows) > limit else ""
    )
    return f"<table>\n<tr>{head}</tr>\n{body}\n</table>{more}"


FAILOVER_COLUMNS = (
    "cluster", "epoch", "scenario", "config", "old_node", "node", "failure_by", "failure_ts",
    "detection_ms", "election_ms", "promotion_ms", "recovering_ms", "failover_ms",
    "agent_promote_ms", "client_outage_ms",
)  # fmt: skip
PERCENTILE_COLUMNS = (
    "scenario", "config", "phase", "failovers", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms",
)  # fmt: skip
ANOMALY_COLUMNS = ("kind", "cluster", "epoch", "node", "other_node", "at_ts", "ms", "detail")
STINT_COLUMNS = ("cluster", "node", "epoch", "start_ts", "end_ts", "end_by")
COUNT_COLUMNS = ("source", "node", "event", "lines")

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; }
th { background: #eee; }
.bad { color: #b00; font-weight: bold; }
.good { color: #070; font-weight: bold; }
img { max-width: 100%; border: 1px solid #ddd; }
"""


def render(out: Path, tables: dict[str, list[Row]], summary: Summary) -> Path:
    """Write the plots and ``report.html`` under ``out``; returns the HTML file's path."""
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    rows = _failover_rows(tables)
    plot_phases(rows, plots / "phases.png")
    plot_cdf(rows, plots / "outage_cdf.png")
    anomalies = tables.get("anomalies", [])
    verdict = (
        f"<p class='bad'>{len(anomalies)} anomalies</p>"
        if anomalies
        else "<p class='good'>no anomalies</p>"
    )
    initial = [r for r in tables.get("failovers", []) if r.get("kind") == "initial"]
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>qpidd HA fail-over analytics</title>
<style>{STYLE}</style></head><body>
<h1>qpidd HA fail-over analytics</h1>
<p>{summary.lines} log lines read ({summary.skipped} not events), {summary.events_used} events
used, {len(rows)} fail-overs and {len(initial)} first elections, in
{summary.seconds:.1f} s, from {html.escape(", ".join(summary.paths))}.</p>
{verdict}
<h2>Percentiles by scenario, configuration and phase (ms)</h2>
{html_table(tables.get("percentiles", []), PERCENTILE_COLUMNS)}
<h2>Phases per fail-over</h2>
<img src="plots/phases.png" alt="stacked phase bars per fail-over">
<h2>Client outage</h2>
<img src="plots/outage_cdf.png" alt="CDF of client outage and fail-over time">
<h2>Anomalies</h2>
{html_table(anomalies, ANOMALY_COLUMNS)}
<h2>Fail-overs</h2>
{html_table(rows, FAILOVER_COLUMNS)}
<h2>Primaries (by the brokers' logs)</h2>
{html_table(tables.get("primary_stints", []), STINT_COLUMNS)}
<h2>Lines by source, node and event</h2>
{html_table(tables.get("event_counts", []), COUNT_COLUMNS, limit=50)}
<p>Phases and anomalies are defined in docs/analytics.md. Tables: tables/*.csv and
parquet/.</p>
</body></html>
"""
    path = out / "report.html"
    path.write_text(page)
    return path
