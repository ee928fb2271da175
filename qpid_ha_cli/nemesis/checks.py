"""The nemesis drill's checks: pure functions over the drill's results and the JSON logs of
the brokers, the agents and the drill itself.

:Status: Beta (the nemesis drill)

No I/O here: events come in as parsed dicts (``docs/log-schema.md``), times as the logs'
ISO strings or UNIX seconds. Tested without processes (``tests/nemesis/test_checks.py``).

Two brokers serving as primary
==============================

A node's broker serves as primary from its ``ha_state_changed`` into ``active`` or
``recovering`` until the first of: an ``ha_state_changed`` out of those states,
``ha_fenced`` (a fenced broker confirms nothing and stops), ``broker_stopped``, the next
``broker_started`` (the process died in between), its agent's ``broker_killed`` or
``broker_process_exited``, or the drill's own ``broker_sigkilled``/``node_sigkilled`` for
that node. Time the drill held the broker SIGSTOPped (``broker_paused`` to
``broker_resumed``, or its whole node: ``node_paused`` to ``node_resumed``) is cut out: a
stopped process serves nobody. So is the time its member lease had lapsed (from its first
``member_lease_lapsed`` to its next ``member_lease_serving``): a primary checks its lease
before every confirm, delivery, get-ok and admission, and logs the lapse at the first check
that finds it with how long ago the grant ran out on its own count (``age_ms``), so it
served nothing from that instant, the line's time less its age, on (issue 26; a cut-off old
primary stays ``active`` until its agent fences it, but does not serve; an old primary no
client reached noticed its lapse 184 ms late and read as 1 ms of two primaries).
:func:`overlap_seconds` adds up the time two such spans of different nodes overlap inside a
window: it must be 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "PRIMARY_STATES",
    "CycleResult",
    "Span",
    "overlap_seconds",
    "parse_ts",
    "primary_spans",
    "summary",
]

PRIMARY_STATES = frozenset({"active", "recovering"})
ENDS = frozenset({"ha_fenced", "broker_stopped", "broker_started"})
AGENT_ENDS = frozenset({"broker_killed", "broker_process_exited"})
DRILL_ENDS = frozenset({"broker_sigkilled", "node_sigkilled"})


def parse_ts(ts: str) -> float:
    """A log time (``2026-11-22T07:42:02.123456Z``) as UNIX seconds."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Span:
    """``node``'s broker served as primary from ``start`` until ``end`` (UNIX seconds)."""

    node: str
    start: float
    end: float


def _cut(spans: list[Span], gaps: Sequence[tuple[float, float]]) -> list[Span]:
    """``spans`` without the time inside ``gaps``."""
    for gap_from, gap_until in gaps:
        cut: list[Span] = []
        for s in spans:
            if gap_until <= s.start or gap_from >= s.end:
                cut.append(s)
                continue
            if s.start < gap_from:
                cut.append(Span(s.node, s.start, gap_from))
            if gap_until < s.end:
                cut.append(Span(s.node, gap_until, s.end))
        spans = cut
    return spans


def primary_spans(
    node: str,
    broker_events: Iterable[Mapping[str, Any]],
    agent_events: Iterable[Mapping[str, Any]],
    drill_events: Iterable[Mapping[str, Any]],
    until: float,
) -> list[Span]:
    """When ``node``'s broker served as primary (see the module's docstring); a span still
    open at the end of the logs ends at ``until``."""
    ends = sorted(
        [parse_ts(str(e["ts"])) for e in agent_events if e.get("event") in AGENT_ENDS]
        + [
            parse_ts(str(e["ts"]))
            for e in drill_events
            if e.get("event") in DRILL_ENDS and e.get("target") == node
        ]
    )
    paused: list[tuple[float, float]] = []
    for e in drill_events:
        if e.get("target") != node:
            continue
        if e.get("event") in ("broker_paused", "node_paused"):
            paused.append((parse_ts(str(e["ts"])), until))
        elif e.get("event") in ("broker_resumed", "node_resumed") and paused:
            paused[-1] = (paused[-1][0], parse_ts(str(e["ts"])))
    lapsed: list[tuple[float, float]] = []
    lapsed_from: float | None = None
    for e in broker_events:
        if e.get("ts") is None:
            continue
        if e.get("event") == "member_lease_lapsed":
            # from when the grant ran out on the primary's own count (the line's age), not
            # from the check that found it: it refused at every check from that instant
            at = parse_ts(str(e["ts"])) - float(e.get("age_ms") or 0.0) / 1000.0
            lapsed_from = at if lapsed_from is None else min(lapsed_from, at)
        elif e.get("event") == "member_lease_serving" and lapsed_from is not None:
            lapsed.append((lapsed_from, parse_ts(str(e["ts"]))))
            lapsed_from = None
    if lapsed_from is not None:
        lapsed.append((lapsed_from, until))
    spans: list[Span] = []
    start: float | None = None

    def close(at: float) -> None:
        assert start is not None
        later = [t for t in ends if t > start]
        spans.append(Span(node, start, min([at, *later])))

    for e in broker_events:
        event, ts = e.get("event"), e.get("ts")
        if ts is None:
            continue
        is_primary = event == "ha_state_changed" and e.get("new") in PRIMARY_STATES
        if start is None and is_primary:
            start = parse_ts(str(ts))
        elif (
            start is not None and not is_primary and (event in ENDS or event == "ha_state_changed")
        ):
            close(parse_ts(str(ts)))
            start = None
    if start is not None:
        close(until)
    return _cut(spans, paused + lapsed)


def overlap_seconds(spans: Sequence[Span], window: tuple[float, float]) -> float:
    """Seconds inside ``window`` during which brokers of two different nodes both served as
    primary (each moment counted once)."""
    points: list[tuple[float, int, str]] = []
    for s in spans:
        start, end = max(s.start, window[0]), min(s.end, window[1])
        if start < end:
            points += [(start, 1, s.node), (end, -1, s.node)]
    points.sort(key=lambda p: (p[0], p[1]))
    serving: dict[str, int] = {}
    total, previous = 0.0, None
    for at, step, node in points:
        if previous is not None and sum(1 for n in serving.values() if n > 0) >= 2:
            total += at - previous
        serving[node] = serving.get(node, 0) + step
        previous = at
    return round(total, 6)


@dataclass
class CycleResult:
    """One nemesis cycle: the drill's check, the primaries, the outage, what happened."""

    cycle: int
    nemesis: str
    sent: int = 0
    confirmed: int = 0
    received: int = 0
    lost: int = 0
    duplicated: int = 0
    unconfirmed: int = 0
    outage_ms: float = 0.0  # the longest time between two confirms
    two_primaries_s: float = 0.0  # from the brokers' and agents' logs
    two_primaries_seen: int = 0  # live samples with two brokers saying "primary"
    old_primary: str = ""
    new_primary: str = ""
    error: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.lost == 0
            and self.two_primaries_s == 0
            and self.two_primaries_seen == 0
        )

    def fields(self) -> dict[str, Any]:
        return {
            "cycle": self.cycle,
            "nemesis": self.nemesis,
            "ok": self.ok,
            "sent": self.sent,
            "confirmed": self.confirmed,
            "received": self.received,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "unconfirmed": self.unconfirmed,
            "outage_ms": self.outage_ms,
            "two_primaries_s": self.two_primaries_s,
            "two_primaries_seen": self.two_primaries_seen,
            "old_primary": self.old_primary,
            "new_primary": self.new_primary,
            "error": self.error,
            "notes": self.notes,
        }


def summary(results: Sequence[CycleResult]) -> dict[str, Any]:
    """Totals over cycles: lost, duplicated, two-primary time, outages, failures."""
    outages = sorted(r.outage_ms for r in results)
    return {
        "cycles": len(results),
        "failed": sum(1 for r in results if not r.ok),
        "confirmed": sum(r.confirmed for r in results),
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "two_primaries_s": round(sum(r.two_primaries_s for r in results), 6),
        "two_primaries_seen": sum(r.two_primaries_seen for r in results),
        "outage_ms_max": outages[-1] if outages else 0.0,
        "outage_ms_median": outages[len(outages) // 2] if outages else 0.0,
        "errors": [r.error for r in results if r.error],
    }
