"""The report's "what to change": plain sentences from the measured distributions.

:Status: Beta

Input: the ``tuning`` table (one row per configuration, :func:`analytics.tuning.tuning`).
:func:`advice` says, per configuration, which phase dominates the fail-over at the median
and what the data says about the setting behind it (the agents' ZooKeeper session timeout
for detection and election, ``ha-backup-timeout`` for recovering), how many fail-overs were
spurious, and, across configurations, how detection moved with the session timeout. Pure
functions over dicts; no Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from common import failover_phases

Row = dict[str, Any]

#: The phases a fail-over adds up from: :data:`common.failover_phases.PHASES` but the last
#: (``failover``, their sum).
PHASES = tuple(p.name for p in failover_phases.PHASES[:-1])
#: What sets each phase, in the operator's words.
SETTING = {
    "detection": "the agents' ZooKeeper --session-timeout (and the broker check interval)",
    "election": "ZooKeeper's expiry of the old leader's session (--session-timeout)",
    "promotion": "no setting: the epoch, the promote call and the broker's promotion",
    "recovering": "ha-backup-timeout (the new primary waits for its expected backups)",
}


#: Detection at the median at or above this share of the session timeout: the session's
#: expiry is what detects the failures.
SESSION_BOUND = 0.5


def _ms(value: Any) -> str:
    return "?" if value is None else f"{float(value):.0f} ms"


def dominant(row: Row) -> tuple[str, float, float] | None:
    """(phase, its median, its share of the sum of the medians), or None when the logs
    do not split the fail-overs: no detection, or the phases' medians cover less than
    half of the fail-over's (no agent logs)."""
    medians = {p: row.get(f"p50_{p}_ms") for p in PHASES}
    known = {p: float(v) for p, v in medians.items() if v is not None}
    total = sum(known.values())
    failover = row.get("p50_failover_ms")
    if "detection" not in known or total <= 0:
        return None
    if failover is not None and total < 0.5 * float(failover):
        return None
    phase = max(known, key=lambda p: known[p])
    return phase, known[phase], known[phase] / total


def for_config(row: Row, scales: bool | None = None) -> list[str]:
    """Sentences for one configuration's row of the ``tuning`` table; ``scales``: whether
    detection grew with the session timeout across configurations (None: one timeout)."""
    config, n = row.get("config"), int(row.get("failovers") or 0)
    out: list[str] = []
    top = dominant(row)
    if top is None:
        out.append(
            f"{config}: {n} fail-over(s), none split into phases (no agent logs or lines "
            f"missing): nothing to say about the settings."
        )
    else:
        phase, median, share = top
        sentence = (
            f"{config}: {phase} dominates the fail-over ({_ms(median)} of "
            f"{_ms(row.get('p50_failover_ms'))} at the median, {share:.0%} of the phases); "
            f"it is set by {SETTING[phase]}."
        )
        timeout = row.get("session_timeout_s")
        ratio = row.get("detection_p50_per_timeout")
        if phase in ("detection", "election") and timeout and ratio is not None:
            sentence += f" Detection's median is {ratio:.2f} x the {timeout:g} s session timeout"
            if scales is True:
                sentence += (
                    ", and it grew with the session timeout across the configurations measured "
                    "here: a lower timeout shortens it"
                )
            elif scales is False:
                sentence += (
                    ", and it did not grow with the session timeout across the configurations "
                    "measured here: a lower timeout would change little"
                )
            elif ratio < SESSION_BOUND:
                sentence += (
                    ": well under it, so these failures were seen by the agents' broker check "
                    "(a process exit, a broker not answering), not by a session expiring; a "
                    "lower timeout would change little for them"
                )
            else:
                sentence += (
                    ": the session's expiry detects these failures, so lowering the timeout "
                    "shortens detection about in proportion"
                )
            spurious = int(row.get("spurious") or 0)
            sentence += (
                f"; {spurious} of {n} fail-overs here were spurious (a healthy primary fenced): "
                f"a lower timeout makes more."
                if spurious
                else f"; none of the {n} fail-overs here was spurious."
            )
        elif phase == "recovering":
            fired = int(row.get("backup_timeout_fired") or 0)
            sentence += (
                f" ha-backup-timeout fired (or a backup was dropped) in {fired} of {n}: "
                + (
                    "lowering it shortens these waits, at the price of primaries that stop "
                    "waiting for backups that were about to come back."
                    if fired
                    else "the backups came back each time; a lower ha-backup-timeout would not "
                    "have changed these fail-overs."
                )
            )
        out.append(sentence)
    outage, failover = row.get("p50_client_outage_ms"), row.get("p50_failover_ms")
    if outage is not None and failover is not None and float(outage) > 1.5 * float(failover):
        out.append(
            f"{config}: clients saw {_ms(outage)} at the median against {_ms(failover)} of "
            f"fail-over: their reconnection (retry interval, heartbeat) adds the rest."
        )
    incomplete = int(row.get("incomplete") or 0)
    if incomplete:
        out.append(
            f"{config}: {incomplete} of {n} fail-overs have incomplete evidence (see the "
            f"evidence column); their missing phases are not in the percentiles."
        )
    return out


def _timed(rows: Sequence[Row]) -> list[tuple[float, Row]]:
    return sorted(
        ((float(r["session_timeout_s"]), r) for r in rows
         if r.get("session_timeout_s") and r.get("p50_detection_ms") is not None),
        key=lambda pair: pair[0],
    )  # fmt: skip


def detection_scales(rows: Sequence[Row]) -> bool | None:
    """Whether detection's median grew with each longer session timeout (None: fewer than
    two timeouts measured)."""
    by_timeout: dict[float, float] = {}
    for timeout, r in _timed(rows):
        by_timeout[timeout] = max(by_timeout.get(timeout, 0.0), float(r["p50_detection_ms"]))
    if len(by_timeout) < 2:
        return None
    medians = [by_timeout[t] for t in sorted(by_timeout)]
    return all(a < b for a, b in pairwise(medians))


def across(rows: Sequence[Row]) -> list[str]:
    """How detection moved with the session timeout across configurations."""
    timed = _timed(rows)
    if len({t for t, _ in timed}) < 2:
        return []
    parts = ", ".join(
        f"{t:g} s: {_ms(r['p50_detection_ms'])} ({int(r.get('spurious') or 0)} of "
        f"{int(r.get('failovers') or 0)} spurious)"
        for t, r in timed
    )
    return [f"Detection at the median by session timeout: {parts}."]


#: The option that sets detection, by kind of failure, with the column of its value:
#: a process that exits is seen by the agent's next broker check; a broker that stops
#: answering (its process alive) is fenced after ``--broker-timeout``; a node that is
#: lost, frozen or cut off (its agent with it) is seen when its ZooKeeper session expires,
#: as is a primary fenced for ZooKeeper's loss (the next leader waits for the old
#: session).
DETECTOR: dict[str, tuple[str, str]] = {
    "kill": ("the agents' --check-interval (a process exit is seen at the next check)",
             "check_interval_s"),
    "process_exit": ("the agents' --check-interval (a process exit is seen at the next "
                     "check)", "check_interval_s"),
    "pause": ("the agents' --broker-timeout (a broker that stops answering is fenced after "
              "it)", "broker_timeout_s"),
    "unresponsive": ("the agents' --broker-timeout (a broker that stops answering is "
                     "fenced after it)", "broker_timeout_s"),
    "kill-node": ("the agents' --session-timeout (the lost node's session must expire)",
                  "session_timeout_s"),
    "pause-node": ("the agents' --session-timeout (the frozen node's session must expire)",
                   "session_timeout_s"),
    "partition": ("the agents' --session-timeout (the cut-off node's session must expire)",
                  "session_timeout_s"),
    "stale-backup": ("the agents' --session-timeout (the lost node's session must expire)",
                     "session_timeout_s"),
    "silent_node": ("the agents' --session-timeout (the silent node's session must expire)",
                    "session_timeout_s"),
    "zk-loss": ("the agents' --session-timeout (after ZooKeeper's return the next leader "
                "waits for the fenced primary's session)", "session_timeout_s"),
    "zookeeper_fence": ("the agents' --session-timeout (the fenced primary's session must "
                        "expire)", "session_timeout_s"),
}  # fmt: skip
#: What sets the other phases, by kind-independent rule.
OTHER_SETTING = {
    "election": "ZooKeeper's expiry of the old leader's session (--session-timeout)",
    "promotion": "no setting: the epoch, the promote call and the broker's promotion",
    "recovering": "the backups' return to the new primary: link-maintenance-interval (how "
    "often a backup dials) and, when a backup does not come back, ha-backup-timeout",
}
#: Clients' outage beyond the fail-over by more than this (ms, and half the fail-over):
#: the clients' own reconnection is worth tuning.
CLIENT_EXTRA_MS = 500.0


def for_kind(row: Row) -> list[str]:
    """Sentences for one (configuration, kind of failure) row of ``tuning_by_kind``: the
    dominant phase at the median and the option that sets it, checked against the
    measured median; the spurious fail-overs split by what would have avoided them; the
    clients' reconnection when it adds much."""
    config, kind, n = row.get("config"), row.get("failure_kind"), int(row.get("failovers") or 0)
    head = f"{config}, {kind} ({n} fail-over{'s' if n != 1 else ''})"
    out: list[str] = []
    top = dominant(row)
    if top is None:
        withheld = int(row.get("withheld") or 0)
        out.append(
            f"{head}: not split into phases ({withheld} withheld, or no agent logs): "
            f"nothing to say about the settings."
        )
    else:
        phase, median, share = top
        sentence = (
            f"{head}: {phase} dominates ({_ms(median)} of {_ms(row.get('p50_failover_ms'))} "
            f"at the median, {share:.0%} of the phases)"
        )
        if phase == "detection" and str(kind) in DETECTOR:
            setting, column = DETECTOR[str(kind)]
            value = row.get(column)
            sentence += f"; it is set by {setting}"
            if value:
                ratio = median / (float(value) * 1000.0)
                sentence += f": {ratio:.2f} x its {float(value):g} s"
                if 0.5 <= ratio <= 1.5:
                    sentence += ", so lowering it shortens these fail-overs about in proportion"
                elif ratio < 0.5:
                    sentence += ", well under it: something else detected these failures first"
                else:
                    sentence += ", well over it: detection waits for more than this option"
            else:
                sentence += " (its value is not in these logs)"
            sentence += "."
        elif phase == "detection":
            sentence += f"; it is set by {SETTING['detection']}."
        else:
            sentence += f"; it is set by {OTHER_SETTING[phase]}."
        out.append(sentence)
    spurious = int(row.get("spurious") or 0)
    if spurious:
        longer = int(row.get("spurious_longer_timeout") or 0)
        never = int(row.get("spurious_no_timeout") or 0)
        out.append(
            f"{head}: {spurious} spurious (a healthy primary fenced): {longer} a longer "
            f"--session-timeout would have avoided (ZooKeeper was back within the longest "
            f"one), {never} no timeout would have, {spurious - longer - never} unknown."
        )
    outage, failover = row.get("p50_client_outage_ms"), row.get("p50_failover_ms")
    if outage is not None and failover is not None:
        extra = float(outage) - float(failover)
        if extra > max(CLIENT_EXTRA_MS, 0.5 * float(failover)):
            out.append(
                f"{head}: clients saw {_ms(outage)} at the median, {_ms(extra)} more than the "
                f"fail-over: their reconnection (the clients' heartbeat and connection retry "
                f"interval) sets the rest."
            )
    return out


def advice(rows: Sequence[Row], by_kind: Sequence[Row] = ()) -> list[str]:
    """Every sentence of the "what to change" section: by configuration and kind of
    failure when the ``tuning_by_kind`` rows are given (a configuration's fail-overs of
    different kinds are set by different options), else by configuration."""
    scales = detection_scales(rows)
    out: list[str] = []
    for r in rows:
        if not int(r.get("failovers") or 0):
            continue
        kinds = [k for k in by_kind if k.get("config") == r.get("config")]
        if not kinds:
            out += for_config(r, scales)
            continue
        out += [s for k in kinds if int(k.get("failovers") or 0) for s in for_kind(k)]
        withheld = int(r.get("withheld") or 0)
        if withheld:
            out.append(
                f"{r.get('config')}: {withheld} of {r.get('failovers')} fail-overs withheld from "
                f"the percentiles (missing or contradictory evidence: see the withheld column)."
            )
    return out + across(rows)
