#!/usr/bin/env python3
"""Where a ``bench/scale_vs_rabbitmq.py --failover --keep`` fail-over's time goes, per run,
from its brokers' logs (not a test).

Reads the kept directory (``fo<N>-<queues>/b0..b2/qpidd.log``; b0 the killed primary, b1
the promoted backup, b2 the member left) and prints, per run, milliseconds from the new
primary's ``ha_link_down`` (the kill, within a few ms): the promotion request's arrival
(``ha_promote_requested`` less its ``took_ms``), its promotion (``recovering``), its answer
logged (``ha_promote_requested``), the member's new link up, the new primary's snapshot
sent (``ha_snapshot_sent``, debug), the member's link steps (``ha_snapshot_applied``'s
``link_ms``: its lease and configuration streams consumed, the snapshot received), its
snapshot decoding begun and its first busy queue's stream subscribed (its ``decoding_ms``
and ``first_busy_ms``, from the link up), its snapshot applied, the new primary's first
client admitted and first confirm, and the member-lease lapses on the new primary in its
first 30 s with the longest time not serving (``member_lease_serving``'s
``held_ms``). One clock: the brokers run on one host.

    .venv/bin/python bench/failover_scale_phases.py /tmp/scale-vs-rabbitmq-XXXX
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from failover_phases import events
from failover_phases import first as event  # the first such event after, or {}


def first(items: list[dict[str, Any]], after: float, name: str, **match: Any) -> float | None:
    found = event(items, after, name, **match)
    return float(found["t"]) if found else None


def plus(at: float | None, ms: Any) -> float | None:
    return None if at is None or ms is None else at + float(ms) / 1000.0


def run_phases(run: Path) -> dict[str, Any]:
    new = events(run / "b1" / "qpidd.log")
    member = events(run / "b2" / "qpidd.log")
    t0 = first(new, 0, "ha_link_down")
    if t0 is None:
        return {"run": run.name}

    def ms(t: float | None) -> int | None:
        return None if t is None else round((t - t0) * 1000)

    lapses = [e for e in new if t0 <= e["t"] <= t0 + 30 and e["event"] == "member_lease_lapsed"]
    held = [
        float(e.get("held_ms", 0))
        for e in new
        if t0 <= e["t"] <= t0 + 30 and e["event"] == "member_lease_serving"
    ]
    answered = event(new, t0, "ha_promote_requested")
    linked = first(member, t0, "ha_link_up")
    applied = event(member, t0, "ha_snapshot_applied")
    return {
        "run": run.name,
        "requested": ms(plus(answered.get("t"), -float(answered.get("took_ms") or 0))),
        "recovering": ms(first(new, t0, "ha_state_changed", new="recovering")),
        "answered": ms(answered.get("t")),
        "member_linked": ms(linked),
        "decoding": ms(plus(linked, applied.get("decoding_ms"))),
        "first_busy": ms(plus(linked, applied.get("first_busy_ms"))),
        "snapshot_sent": ms(first(new, t0, "ha_snapshot_sent")),
        **{step: ms(plus(linked, at)) for step, at in dict(applied.get("link_ms") or {}).items()},
        "snapshot_applied": ms(applied.get("t")),
        "first_client": ms(first(new, t0, "ha_first_client_connection")),
        "first_confirm": ms(first(new, t0, "ha_first_client_confirm")),
        "lapses": len(lapses),
        "held_ms": round(max(held, default=0.0)),
        "member_ready": ms(first(member, t0, "ha_state_changed", new="ready")),
    }


def main() -> int:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print(f"usage: {Path(sys.argv[0]).name} DIR (a --keep run's directory)", file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    for run in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("fo")):
        print(json.dumps(run_phases(run)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
