"""The report's plots (matplotlib, Agg backend): phases per fail-over, CDFs of the outage,
fail-overs over time.

:Status: Beta

Inputs: the fail-over rows (kind ``failover``) of :func:`analytics.job.run`'s tables, as
dicts. Each function writes one PNG. Rules, so a plot is read at a glance: legends outside
the data (right of the axes), the slowest fail-overs first, each labelled by its
configuration, a group of one sample still visible (a marker at every step), and a part of a
fail-over the logs do not split into phases drawn as such (grey, hatched: "not split"),
never as a short bar.

matplotlib is imported by the first plot drawn (:func:`_pyplot`), not with this module: the
job's command line, its checks and the helpers here start without it (0.6 of the 0.8 CPU
seconds of importing :mod:`analytics.job`, paid by every ``python -m analytics`` and by
each test worker's collection).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

Row = dict[str, Any]

#: Stacked phases, in order, with their colours.
BAR_PHASES = (
    ("detection", "#d62728"),
    ("election", "#ff7f0e"),
    ("promotion", "#1f77b4"),
    ("recovering", "#2ca02c"),
)
UNSPLIT_COLOUR = "#bbbbbb"
#: At most this many fail-overs in the bar plot (the slowest).
MAX_BARS = 60
#: Colours of configurations (cycled).
CONFIG_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DPI = 90
#: Width of every plot in inches (at :data:`DPI`: 990 px, inside a 1,280 px window).
WIDTH = 11.0


@cache
def _pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend (no display), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    _pyplot().close(fig)


def config_colours(rows: Sequence[Row]) -> dict[str, str]:
    configs = sorted({str(r.get("config")) for r in rows})
    return {c: CONFIG_COLOURS[i % len(CONFIG_COLOURS)] for i, c in enumerate(configs)}


def _total_ms(r: Row) -> float:
    """How long the fail-over took, by what the logs say: failure to active, else the
    client outage, else the sum of the known phases."""
    for key in ("failover_ms", "client_outage_ms"):
        if r.get(key) is not None:
            return float(r[key])
    return sum(float(r.get(f"{p}_ms") or 0.0) for p, _ in BAR_PHASES)


def slowest(rows: Sequence[Row], limit: int = MAX_BARS) -> list[Row]:
    """The ``limit`` slowest fail-overs, slowest first (by :func:`_total_ms`)."""
    return sorted(rows, key=_total_ms, reverse=True)[:limit]


def bar_label(r: Row) -> str:
    return f"{r.get('config')} | {r.get('cluster') or '-'} e{r.get('epoch')}"


def plot_phases(rows: Sequence[Row], path: Path) -> None:
    """Horizontal stacked bars, the slowest fail-over on top: detection, election,
    promotion, recovering (ms), and the part not split into phases (grey, hatched: no agent
    logs, or lines missing); labels ``config | cluster eEPOCH`` coloured by configuration;
    a diamond at the client outage."""
    shown = slowest(rows)
    height = max(3.0, 0.3 * len(shown) + 1.6)
    fig, ax = _pyplot().subplots(figsize=(WIDTH, height))
    if not shown:
        _empty(ax, "no fail-over in these logs")
        _save(fig, path)
        return
    labels = [bar_label(r) for r in shown]
    y = list(range(len(shown)))
    left = [0.0] * len(shown)
    unsplit = []
    for r in shown:
        known = sum(float(r.get(f"{p}_ms") or 0.0) for p, _ in BAR_PHASES)
        total = r.get("failover_ms")
        split = r.get("detection_ms") is not None or r.get("election_ms") is not None
        if total is not None and not split:
            unsplit.append(max(0.0, float(total) - known))
        elif total is None and not any(r.get(f"{p}_ms") is not None for p, _ in BAR_PHASES):
            unsplit.append(float(r.get("client_outage_ms") or 0.0))
        else:
            unsplit.append(0.0)
    if any(unsplit):
        ax.barh(y, unsplit, left=left, color=UNSPLIT_COLOUR, hatch="//", edgecolor="#888888",
                label="not split into phases (no agent logs, or lines missing)")  # fmt: skip
        left = [a + b for a, b in zip(left, unsplit, strict=True)]
    for phase, colour in BAR_PHASES:
        widths = [float(r.get(f"{phase}_ms") or 0.0) for r in shown]
        ax.barh(y, widths, left=left, color=colour, label=phase)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    outages = [(i, float(r["client_outage_ms"])) for i, r in enumerate(shown)
               if r.get("client_outage_ms") is not None]  # fmt: skip
    if outages:
        ax.scatter([o for _, o in outages], [i for i, _ in outages], marker="D", s=22,
                   color="black", zorder=3, label="client outage")  # fmt: skip
    for i, total in enumerate(left):
        if total <= 0:
            ax.text(0, i, f"  no phases: {shown[i].get('evidence') or 'nothing measured'}",
                    va="center", fontsize="small", color="#555555")  # fmt: skip
    colours = config_colours(rows)
    ax.set_yticks(y, labels)
    for tick, r in zip(ax.get_yticklabels(), shown, strict=True):
        tick.set_color(colours[str(r.get("config"))])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the old primary's failure")
    ax.grid(axis="x", alpha=0.3)
    title = "phases per fail-over, slowest first"
    if len(rows) > len(shown):
        title += f" (the {len(shown)} slowest of {len(rows)})"
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    _save(fig, path)


def cdf_points(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The empirical CDF as steps starting at 0: a single value is a visible rise."""
    xs = sorted(values)
    n = len(xs)
    return [xs[0], *xs], [0.0, *[(i + 1) / n for i in range(n)]]


#: A group with fewer samples is drawn as points (its samples), not as a CDF.
MIN_CDF_SAMPLES = 5
#: Marker of each kind of failure (cycled), so kinds read apart in one colour.
KIND_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _group(r: Row) -> str:
    """A fail-over's group: its kind of failure (never its cycle)."""
    return str(r.get("failure_kind") or r.get("scenario") or "unlabelled")


def plot_cdf(rows: Sequence[Row], path: Path) -> None:
    """The client outage by kind of failure and configuration: a CDF (a step, a marker at
    every sample, ``n`` in the legend) for groups of at least :data:`MIN_CDF_SAMPLES`;
    the samples of a smaller group as points on their own row below, never a CDF.
    Failure to active where no drill measured the clients. Withheld fail-overs are left
    out. One colour per configuration, one marker per kind of failure."""
    fig, ax = _pyplot().subplots(figsize=(WIDTH, 4.8))
    shown = [r for r in rows if not r.get("withheld")]
    with_outage = any(r.get("client_outage_ms") is not None for r in shown)
    key = "client_outage_ms" if with_outage else "failover_ms"
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in shown:
        if r.get(key) is not None:
            groups[(_group(r), str(r.get("config")))].append(float(r[key]))
    colours = config_colours(rows)
    kinds = sorted({k for k, _ in groups})
    markers = {k: KIND_MARKERS[i % len(KIND_MARKERS)] for i, k in enumerate(kinds)}
    small = [g for g in sorted(groups) if len(groups[g]) < MIN_CDF_SAMPLES]
    for kind, config in sorted(groups):
        values = groups[(kind, config)]
        label = f"{kind}, {config} (n={len(values)})"
        if len(values) >= MIN_CDF_SAMPLES:
            ax.step(*cdf_points(values), where="post", marker=markers[kind], markersize=4,
                    color=colours[config], label=label)  # fmt: skip
        else:
            row = -0.08 - 0.06 * small.index((kind, config))
            ax.scatter(values, [row] * len(values), marker=markers[kind], s=36,
                       color=colours[config], label=f"{label}: points, too few")  # fmt: skip
    if not groups:
        _empty(ax, "no fail-over in these logs")
    else:
        what = "client outage" if with_outage else "failure to active (no drill events)"
        ax.set_title(f"CDF of the {what} by kind of failure and configuration")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of fail-overs")
        ax.set_ylim(-0.1 - 0.06 * len(small), 1.04)
        ax.axhline(0, color="#999999", linewidth=0.6)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    _save(fig, path)


def _when(r: Row) -> float | None:
    """The failure's time as a matplotlib date number."""
    at = r.get("failure_us") or r.get("won_us") or r.get("recovering_us")
    if at is None:
        return None
    import matplotlib.dates as mdates

    when = datetime.fromtimestamp(int(at) / 1e6, UTC)
    return float(mdates.date2num(when))  # type: ignore[no-untyped-call]


def plot_timeline(rows: Sequence[Row], path: Path) -> None:
    """Fail-overs over time: failure to active (circles) and client outage (crosses) at
    the failure's time, coloured by configuration; spurious fail-overs ringed in red."""
    fig, ax = _pyplot().subplots(figsize=(WIDTH, 4.2))
    timed = [(w, r) for r in rows if (w := _when(r)) is not None]
    if not timed:
        _empty(ax, "no fail-over in these logs")
        _save(fig, path)
        return
    colours = config_colours(rows)
    for config, colour in colours.items():
        mine = [(w, r) for w, r in timed if str(r.get("config")) == config]
        total = [(w, float(r["failover_ms"])) for w, r in mine if r.get("failover_ms") is not None]
        outage = [(w, float(r["client_outage_ms"])) for w, r in mine
                  if r.get("client_outage_ms") is not None]  # fmt: skip
        if total:
            ax.scatter([w for w, _ in total], [v for _, v in total], color=colour, s=18,
                       label=f"failure to active: {config}")  # fmt: skip
        if outage:
            ax.scatter([w for w, _ in outage], [v for _, v in outage], color=colour, s=24,
                       marker="x", label=f"client outage: {config}")  # fmt: skip
    spurious = [(w, _total_ms(r)) for w, r in timed if r.get("spurious")]
    if spurious:
        ax.scatter([w for w, _ in spurious], [v for _, v in spurious], s=110, facecolors="none",
                   edgecolors="red", label="spurious (healthy primary fenced)")  # fmt: skip
    ax.xaxis_date(tz=UTC)
    ax.set_ylabel("ms")
    ax.set_xlabel("time of the failure (UTC)")
    ax.set_title("fail-overs over time")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    _save(fig, path)
