"""The nemesis drill's report: its per-cycle table and verdict line (pure: text out).

:Status: Beta (the nemesis drill)
"""

from __future__ import annotations

from collections.abc import Sequence

from qpid_ha_cli.nemesis.checks import CycleResult, summary

__all__ = ["COLUMNS", "table", "verdict"]

COLUMNS = (
    "cycle",
    "nemesis",
    "confirmed",
    "lost",
    "dup",
    "unconf",
    "2 primaries s",
    "2 primaries seen",
    "outage ms",
    "primary",
    "result",
)


def _row(r: CycleResult) -> list[str]:
    moved = f"{r.old_primary}->{r.new_primary}" if r.new_primary else r.old_primary
    result = "ok" if r.ok else ("ERROR: " + r.error if r.error else "FAILED")
    return [
        str(r.cycle),
        r.nemesis,
        str(r.confirmed),
        str(r.lost),
        str(r.duplicated),
        str(r.unconfirmed),
        f"{r.two_primaries_s:.3f}",
        str(r.two_primaries_seen),
        f"{r.outage_ms:.0f}",
        moved,
        result,
    ]


def table(results: Sequence[CycleResult]) -> str:
    """The cycles as a Markdown table."""
    rows = [list(COLUMNS), *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)


def verdict(results: Sequence[CycleResult]) -> str:
    """One line: OK or FAILED, with the totals."""
    s = summary(results)
    word = "OK" if s["failed"] == 0 and s["cycles"] > 0 else "FAILED"
    return (
        f"nemesis drill {word}: {s['cycles']} cycles, confirmed {s['confirmed']}, "
        f"lost {s['lost']}, duplicated {s['duplicated']}, two primaries "
        f"{s['two_primaries_s']:.3f} s ({s['two_primaries_seen']} samples), outage max "
        f"{s['outage_ms_max']:.0f} ms, median {s['outage_ms_median']:.0f} ms"
    )
