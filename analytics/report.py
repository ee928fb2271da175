"""The HTML report of the fail-over analytics.

:Status: Beta

Inputs: the job's collected tables (lists of row dicts, :func:`analytics.job.run`) and a
:class:`Summary`. Output: the plots (:mod:`analytics.plots`: ``plots/phases.png``,
``plots/outage_cdf.png``, ``plots/timeline.png``) and ``report.html`` beside them, a page
with no external resources that a person opens in a browser, made to fit a 1,280 px
window (plots 990 px wide, wide tables scroll inside their own box). Its order: what the
job could not use, "what to change" (:mod:`analytics.advice`), the tuning table per
configuration, the percentiles, the plots, the anomalies, the fail-overs, the primaries,
the line counts.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analytics import advice, percentiles, plots

HTML_ROWS = 200
#: Rows of the line-count table: every HA, agent and drill event, then the busiest others.
OTHER_COUNT_ROWS = 15

Row = dict[str, Any]


@dataclass(frozen=True)
class Summary:
    paths: list[str]
    lines: int
    skipped: int
    events_used: int
    seconds: float
    truncated: int = 0
    problems: list[str] = field(default_factory=list)
    suspect_nodes: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    #: what the job changed or withheld so as not to answer wrong in silence (runs split,
    #: clocks corrected, fail-overs withheld), one line each
    warnings: list[str] = field(default_factory=list)


def _failover_rows(tables: dict[str, list[Row]]) -> list[Row]:
    return [r for r in tables.get("failovers", []) if r.get("kind") == "failover"]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 or value == 0 else f"{value:.3g}"
    return html.escape(str(value))


def _header(column: str) -> str:
    """A column name that may wrap after each underscore, so a table of many short numbers
    fits the page with its full column names."""
    return "_<wbr>".join(html.escape(part) for part in column.split("_"))


def html_table(rows: list[Row], columns: Sequence[str], limit: int = HTML_ROWS) -> str:
    """A table in a box that scrolls sideways when it is wider than the page."""
    if not rows:
        return "<p class='none'>none</p>"
    head = "".join(f"<th>{_header(c)}</th>" for c in columns)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>"
        for r in rows[:limit]
    )
    more = (
        f"<p>the first {limit} of {len(rows)} rows; all in the CSV</p>" if len(rows) > limit else ""
    )
    return f"<div class='wide'><table>\n<tr>{head}</tr>\n{body}\n</table></div>{more}"


def html_table_by_column(rows: list[Row], columns: Sequence[str]) -> str:
    """One row per measure and one column per configuration (``columns[0]`` names them):
    the tuning table has many measures and few configurations, so it is read down a
    configuration's column and across to compare, and it fits the page."""
    if not rows:
        return "<p class='none'>none</p>"
    key, measures = columns[0], columns[1:]
    head = f"<th>{_header(key)}</th>" + "".join(f"<th>{_cell(r.get(key))}</th>" for r in rows)
    body = "\n".join(
        f"<tr><th>{_header(m)}</th>"
        + "".join(f"<td>{_cell(r.get(m))}</td>" for r in rows)
        + "</tr>"
        for m in measures
    )
    return f"<div class='wide'><table class='by-column'>\n<tr>{head}</tr>\n{body}\n</table></div>"


FAILOVER_COLUMNS = (
    "cluster", "epoch", "config", "failure_kind", "spurious", "spurious_avoidable", "old_node",
    "node", "failure_ts", "failure_by", "failure_source", "detection_ms", "election_ms",
    "promotion_ms", "recovering_ms", "failover_ms", "client_outage_ms", "backup_timeout_fired",
    "evidence", "withheld",
)  # fmt: skip
TUNING_COLUMNS = (
    "config", "failovers", "spurious", "spurious_longer_timeout", "spurious_no_timeout",
    "incomplete", "withheld", "session_timeout_s", "broker_timeout_s", "check_interval_s",
    "link_heartbeat_s", "ha_backup_timeout_s", "p50_detection_ms", "p90_detection_ms",
    "detection_p50_per_timeout", "detection_p50_per_heartbeat", "p50_election_ms",
    "p50_promotion_ms", "p50_recovering_ms", "p50_failover_ms", "p90_failover_ms",
    "p50_client_outage_ms", "p90_client_outage_ms", "backup_timeout_fired",
)  # fmt: skip
BY_KIND_COLUMNS = (
    "config", "failure_kind", "failovers", "spurious", "withheld", "p50_detection_ms",
    "p50_election_ms", "p50_promotion_ms", "p50_recovering_ms", "p50_failover_ms",
    "p50_client_outage_ms",
)  # fmt: skip
PERCENTILE_COLUMNS = (
    "scenario", "config", "phase", "failovers", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms",
    "samples_ms",
)  # fmt: skip
KIND_COLUMNS = (
    "config", "failure_kind", "phase", "failovers", "p50_ms", "p90_ms", "p99_ms", "max_ms",
    "samples_ms",
)  # fmt: skip
ANOMALY_COLUMNS = ("kind", "cluster", "epoch", "node", "other_node", "at_ts", "ms", "detail")
STINT_COLUMNS = ("cluster", "node", "epoch", "start_ts", "end_ts", "end_by")
COUNT_COLUMNS = ("source", "node", "event", "lines")

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 100%; }
h1, h2 { font-weight: 600; }
.wide { overflow-x: auto; max-width: 100%; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.45em; text-align: right; white-space: nowrap; }
th { background: #eee; white-space: normal; vertical-align: bottom; }
.by-column th:first-child { text-align: left; }
.bad { color: #b00; font-weight: bold; }
.good { color: #070; font-weight: bold; }
.paths, .files { overflow-wrap: anywhere; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
li { margin: 0.3em 0; }
"""


def count_rows(rows: list[Row], others: int = OTHER_COUNT_ROWS) -> list[Row]:
    """The line-count rows a person reads: every HA (``ha_*``), agent and drill event
    first (by source, node, event), then the ``others`` busiest other rows (connection
    and protocol events, skipped and truncated lines)."""

    def ours(r: Row) -> bool:
        return r.get("source") in ("agent", "drill") or str(r.get("event") or "").startswith("ha_")

    first = sorted(
        (r for r in rows if ours(r)),
        key=lambda r: (str(r.get("source")), str(r.get("node")), str(r.get("event"))),
    )
    rest = sorted((r for r in rows if not ours(r)), key=lambda r: -int(r.get("lines") or 0))
    return first + rest[:others]


def _input_section(summary: Summary) -> str:
    items = []
    if summary.problems:
        nodes = ", ".join(summary.suspect_nodes) or "unknown nodes"
        items.append(
            "<li class='bad'>lines the job could not use (their fail-overs, of "
            f"{html.escape(nodes)}, are marked incomplete): "
            + "; ".join(html.escape(p) for p in summary.problems)
            + "</li>"
        )
    if summary.unread:
        items.append(
            f"<li>{len(summary.unread)} file(s) not read (not matching the glob): "
            + html.escape(", ".join(summary.unread[:20]))
            + (" ..." if len(summary.unread) > 20 else "")
            + "</li>"
        )
    items += [f"<li class='bad'>{html.escape(w)}</li>" for w in summary.warnings]
    if not items:
        return "<p class='good'>every line read was usable</p>"
    return "<ul class='files'>" + "".join(items) + "</ul>"


def render(out: Path, tables: dict[str, list[Row]], summary: Summary) -> Path:
    """Write the plots and ``report.html`` under ``out``; returns the HTML file's path."""
    pngs = out / "plots"
    pngs.mkdir(parents=True, exist_ok=True)
    rows = _failover_rows(tables)
    plots.plot_phases(rows, pngs / "phases.png")
    plots.plot_cdf(rows, pngs / "outage_cdf.png")
    plots.plot_timeline(rows, pngs / "timeline.png")
    anomalies = tables.get("anomalies", [])
    verdict = (
        f"<p class='bad'>{len(anomalies)} anomalies</p>"
        if anomalies
        else "<p class='good'>no anomalies</p>"
    )
    initial = [r for r in tables.get("failovers", []) if r.get("kind") == "initial"]
    spurious = sum(1 for r in rows if r.get("spurious"))
    incomplete = sum(1 for r in rows if r.get("evidence") != "complete")
    sentences = advice.advice(tables.get("tuning", []), tables.get("tuning_by_kind", []))
    what = (
        "<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in sentences) + "</ul>"
        if sentences
        else "<p class='none'>no fail-over to learn from</p>"
    )
    by_time = sorted(rows, key=lambda r: (str(r.get("cluster")), int(r.get("epoch") or 0)))
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>qpidd HA fail-over analytics</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{STYLE}</style></head><body>
<h1>qpidd HA fail-over analytics</h1>
<p class="paths">{summary.lines} log lines read ({summary.skipped} not events,
{summary.truncated} truncated), {summary.events_used} events used, {len(rows)} fail-overs
({spurious} spurious, {incomplete} with incomplete evidence) and {len(initial)} first
elections, in {summary.seconds:.1f} s, from {html.escape(", ".join(summary.paths))}.</p>
{verdict}
{_input_section(summary)}
<h2>What to change</h2>
{what}
<h2>Per configuration</h2>
{html_table_by_column(tables.get("tuning", []), TUNING_COLUMNS)}
<h2>Per configuration and kind of failure (medians, ms)</h2>
{html_table(tables.get("tuning_by_kind", []), BY_KIND_COLUMNS)}
<h2>Percentiles by configuration and kind of failure (ms)</h2>
<p>A group of fewer than {percentiles.MIN_SAMPLES} fail-overs has no percentiles: its
samples are listed (samples_ms). Withheld fail-overs are in none.</p>
{html_table(tables.get("percentiles_by_kind", []), KIND_COLUMNS)}
<h2>Percentiles by scenario, configuration and phase (ms)</h2>
{html_table(tables.get("percentiles", []), PERCENTILE_COLUMNS)}
<h2>Phases per fail-over, slowest first</h2>
<img src="plots/phases.png" alt="stacked phase bars per fail-over, slowest first">
<h2>Client outage</h2>
<img src="plots/outage_cdf.png" alt="CDF of client outage and fail-over time">
<h2>Fail-overs over time</h2>
<img src="plots/timeline.png" alt="fail-over and client outage over time">
<h2>Anomalies</h2>
{html_table(anomalies, ANOMALY_COLUMNS)}
<h2>Fail-overs</h2>
{html_table(by_time, FAILOVER_COLUMNS)}
<h2>Primaries (by the brokers' logs)</h2>
{html_table(tables.get("primary_stints", []), STINT_COLUMNS)}
<h2>Lines by source, node and event</h2>
<p>Every HA, agent and drill event, then the {OTHER_COUNT_ROWS} busiest others (all in
tables/event_counts.csv).</p>
{html_table(count_rows(tables.get("event_counts", [])), COUNT_COLUMNS, limit=HTML_ROWS)}
<p>Phases, evidence and anomalies are defined in docs/analytics.md. Tables: tables/*.csv
(tables/files.csv: lines, events, truncated and malformed lines by file) and parquet/.</p>
</body></html>
"""
    path = out / "report.html"
    path.write_text(page)
    return path
