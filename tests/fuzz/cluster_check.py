"""The HA fuzzer's invariants, checked on a real cluster through its management API and logs.

At a quiescent point (no client connected):

- every broker process is up;
- each backup's replicated state equals the primary's (:func:`replicated_state`: queues
  with their arguments and, for level ``all``, their message counts; exchanges; bindings;
  what ``qpid.replicate`` and the built-in rules say is replicated), within a deadline (the
  backups apply what the primary sent);
- the in-sync set is reported truthfully: the primary's ``/api/ha`` lists every backup
  ready, in sync and not pending removal, each backup's own says ``ready`` with no link
  error, and (the point) their states are equal;

and throughout (:class:`LogScan`): no broker wrote a traceback on stderr, nor logged
``loop_exception``, ``internal_error``, ``ha_replication_error``, ``ha_link_down`` or
``ha_backup_removal_pending`` (a client's input must never break replication, nor take a
backup out of the in-sync set).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from common.polling import PollTimeout, poll_until
from tests.broker_process import BrokerProcess
from tests.ha.cluster import AUTH, Cluster

#: Events that are a finding wherever they appear: a broker bug met, a replication error,
#: and a backup's link going down or a backup leaving the in-sync set (no client may cause
#: either; a cluster fuzzed runs with a link heartbeat that a loaded machine keeps).
BAD_EVENTS = frozenset(
    {
        "loop_exception",
        "internal_error",
        "ha_replication_error",
        "ha_link_down",
        "ha_backup_removal_pending",
    }
)
#: The link heartbeat of a fuzzed cluster (tests/ha/cluster.py's 2 s missed beats at a load
#: average of 38 on 2 CPUs: availability under load, not what the fuzzer looks for).
LINK_HEARTBEAT = "--link-heartbeat-interval=10"
#: Text on stderr that is a finding.
BAD_TEXT = ("Traceback", "Exception in callback", "exception was never retrieved")


def get(port: int, path: str, timeout: float = 10.0) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", AUTH)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def _level(arguments: dict[str, Any], default: str = "all") -> str:
    level = arguments.get("qpid.replicate", default)
    return level if isinstance(level, str) else default


def _builtin(name: str) -> bool:
    return (
        name == "" or name.startswith("amq.") or name.startswith("qmf.") or name.startswith("qpid.")
    )


def replicated_state(port: int) -> dict[str, Any]:
    """What of a broker's objects a backup must hold (on a backup: what it holds)."""
    queues = {
        (q["vhost"], q["name"]): (
            q["durable"],
            q["auto_delete"],
            q["arguments"],
            q["messages"] if _level(q["arguments"]) == "all" else None,
        )
        for q in get(port, "/api/queues")
        if _level(q["arguments"]) != "none" and not q["name"].startswith("qpid.")
    }
    exchanges = {
        (e["vhost"], e["name"]): (
            e["type"],
            e["durable"],
            e["auto_delete"],
            e["internal"],
            e["arguments"],
        )
        for e in get(port, "/api/exchanges")
        if not e["builtin"] and not _builtin(e["name"]) and _level(e["arguments"]) != "none"
    }
    bindings = sorted(
        json.dumps(
            [
                b["vhost"],
                b["source"],
                b["destination"],
                b["destination_type"],
                b["routing_key"],
                b["arguments"],
            ]
        )
        for b in get(port, "/api/bindings")
        if (b["vhost"], b["source"]) in exchanges
        and (
            (b["vhost"], b["destination"]) in queues
            if b["destination_type"] == "queue"
            else (b["vhost"], b["destination"]) in exchanges or _builtin(b["destination"])
        )
    )
    return {"queues": queues, "exchanges": exchanges, "bindings": bindings}


def _diff(primary: dict[str, Any], backup: dict[str, Any]) -> str:
    lines = []
    for part in ("queues", "exchanges"):
        for key in sorted(set(primary[part]) | set(backup[part]), key=repr):
            one, other = primary[part].get(key), backup[part].get(key)
            if one != other:
                lines.append(f"{part} {key!r}: primary {one!r}, backup {other!r}")
    only_p = set(primary["bindings"]) - set(backup["bindings"])
    only_b = set(backup["bindings"]) - set(primary["bindings"])
    lines += [f"binding on the primary only: {b}" for b in sorted(only_p)]
    lines += [f"binding on the backup only: {b}" for b in sorted(only_b)]
    return "; ".join(lines)[:3000]


def in_sync_problem(cluster: Cluster, primary: int, backups: list[int]) -> str | None:
    """Why the primary's and backups' ``/api/ha`` do not show every backup in sync."""
    ha = cluster.ha(primary)
    if ha.get("state") != "active":
        return f"primary state {ha.get('state')}"
    rows = ha.get("backups", [])
    good = [b for b in rows if b.get("ready") and b.get("in_sync") and not b.get("pending_removal")]
    if len(good) < len(backups):
        return f"primary's backups: {rows}"
    for i in backups:
        own = cluster.ha(i)
        if own.get("state") != "ready" or own.get("link_error") or own.get("replication_error"):
            return f"backup {i}: state {own.get('state')}, link_error {own.get('link_error')}"
    return None


def quiescent_check(
    cluster: Cluster, primary: int, backups: list[int], timeout: float
) -> list[str]:
    """Findings at a quiescent point (empty when every invariant holds)."""
    down = [i for i, b in enumerate(cluster.brokers) if not b.alive()]
    if down:
        return [f"broker(s) {down} not running"]
    last: list[str] = []

    def holds() -> bool:
        nonlocal last
        try:
            problem = in_sync_problem(cluster, primary, backups)
            if problem is not None:
                last = [f"in-sync set: {problem}"]
                return False
            want = replicated_state(cluster.brokers[primary].mgmt_port)
            last = []
            for i in backups:
                have = replicated_state(cluster.brokers[i].mgmt_port)
                if have != want:
                    last.append(f"backup {i} differs from the primary: {_diff(want, have)}")
            if not last:  # equal, and still reported in sync (not removed meanwhile)
                problem = in_sync_problem(cluster, primary, backups)
                last = [] if problem is None else [f"in-sync set: {problem}"]
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = [f"management API: {type(exc).__name__}: {exc}"]
        return not last

    try:
        poll_until(holds, timeout, interval=0.1)
    except PollTimeout:
        return last or ["quiescent check timed out"]
    return []


def replicated_messages(port: int) -> int:
    """Messages on the broker's level-``all`` queues (what a quiescent check compared)."""
    return sum(row[3] or 0 for row in replicated_state(port)["queues"].values())


class LogScan:
    """Reads each broker's stderr and JSON log from where the last scan stopped."""

    def __init__(self, brokers: list[BrokerProcess]) -> None:
        self.brokers = brokers
        self.offsets: dict[str, int] = {}
        self.tracebacks = 0
        self.bad_events = 0

    def _new(self, path: Any) -> str:
        key = str(path)
        try:
            with open(path, "rb") as file:
                file.seek(self.offsets.get(key, 0))
                data = file.read()
        except FileNotFoundError:
            return ""
        cut = data.rfind(b"\n") + 1  # whole lines only
        self.offsets[key] = self.offsets.get(key, 0) + cut
        return data[:cut].decode("utf-8", "replace")

    def scan(self, on_event: Callable[[dict[str, Any]], None] | None = None) -> list[str]:
        findings: list[str] = []
        for i, broker in enumerate(self.brokers):
            stderr = self._new(broker.workdir / "stderr")
            for text in BAD_TEXT:
                count = stderr.count(text)
                if count:
                    self.tracebacks += count if text == "Traceback" else 0
                    findings.append(f"broker {i} stderr: {count} x {text!r}: {stderr[-1500:]}")
            for line in self._new(broker.log_file).splitlines():
                if not any(name in line for name in BAD_EVENTS):
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if event.get("event") in BAD_EVENTS:
                    self.bad_events += 1
                    findings.append(f"broker {i} logged {line[:1500]}")
                    if on_event is not None:
                        on_event(event)
        return findings
