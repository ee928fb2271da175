"""The ended record: ``/qpid-ha/<cluster>/ended``, the epochs whose primary's broker process
is known to have exited (issue 26: a broker kill's outage).

:Status: Beta

Why: a promoted broker serves only once every member-lease grant it gave an older epoch has
lapsed (:mod:`broker.ha.member_lease`): the grant promised the primary of that epoch that
this broker would not serve while it might. At the defaults (``ha-member-lease`` 0.8 s,
requests every 0.2 s) that wait was 0.43-0.77 s after a broker kill, the whole of its
outage: the new primary was active 87 ms after the kill and refused clients for 0.6 s
more ("HA primary not serving yet: its grant to an older epoch lapses in ...").

The wait guards against one thing: the primary of that epoch still serving. Once its broker
*process* has exited, it never will: a process that exited runs no code, its sockets are
closed by the kernel, and a broker that starts again starts as a joining backup with a new
broker id (only a new promotion, at a new epoch from the counter, makes it a primary
again). The agent that supervises the broker knows when that happened, by a fact and not a
timeout: its :class:`~ha_agent.supervisor.BrokerSupervisor` *reaped* the process
(``waitpid`` returned). So:

1. The agent keeps, per broker instance (pid and broker id), the epochs the instance
   itself reported it was primary of (its status, its liveness, its promotion's answer:
   :meth:`~ha_agent.local_broker.LocalBroker.saw_primary`), never an epoch it only meant to
   give it.
2. When it fences (the broker died, or it kills it), it waits a moment for the reap
   (:data:`REAP_WAIT`; availability only: not reaped, nothing is recorded) and, reaped,
   adds those epochs here (:func:`record_ended`, logged ``primary_ended_recorded``),
   *before* it deletes its primary record.
3. A promoting agent reads this record (:func:`read_ended`) after its multi-op and names
   the older epochs it holds to its broker (``POST /api/ha/promote`` ``ended_epochs``); the
   broker does not wait out its grants to them (``member_lease_grant_ended``).

Why the promoting agent sees the record in time: the promotion that follows a broker kill
waits for the old primary record to be gone, and its agent wrote this record before it
deleted that one; ZooKeeper applies one session's writes in order and a client never
reads older state than it has seen, so a reader that saw the deletion reads this record
too. A promotion by other paths (a session that expired, a lapsed grant) finds nothing
new here and waits as before: the record only ever shortens a wait whose reason is gone.

The record: ``{"version": 1, "ended": [{"epoch": E, "node": N, "pid": P, "broker_id":
B}, ...]}``, the :data:`KEEP` newest epochs. A record that cannot be read (garbage, a
format this agent does not know) names nothing: nothing is skipped. Agents of 0.1.0 never
read it.

THREAD UNSAFE: the agent's loop thread calls these (they block on ZooKeeper).

Error Handling
==============

- :func:`record_ended` retries a write that lost a race with another agent's
  (:data:`WRITE_TRIES` times); kazoo's connection errors go to the caller, which records
  nothing (its broker then only waits out its grants, as before).
- :func:`read_ended` returns an empty set for no record or one it cannot read; kazoo's
  connection errors go to the caller.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import structlog
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ha_agent.zk_commit import create_absent, set_if_version
from ha_agent.zk_format import WRITTEN_FORMAT, ZkFormatError, record_format
from ha_agent.zk_layout import ClusterLayout

__all__ = [
    "KEEP",
    "REAP_WAIT",
    "EndedPrimary",
    "decode_ended",
    "encode_ended",
    "merge_ended",
    "read_ended",
    "record_ended",
    "record_reaped",
]

_log = structlog.get_logger("ha_agent.ended", component="agent")

#: How many ended epochs the record keeps (newest by epoch).
KEEP = 8
#: How long a fence waits for its broker's process to be reaped before it deletes the
#: primary record (seconds): a SIGKILLed process is reaped within milliseconds; one that
#: is not, by then, is recorded as nothing (its successor waits out its grants).
REAP_WAIT = 0.25
#: How many times :func:`record_ended` tries when another agent wrote the record meanwhile.
WRITE_TRIES = 3


@dataclass(frozen=True)
class EndedPrimary:
    """The primary of ``epoch`` was broker instance ``pid`` (``broker_id``) on ``node``,
    and that process exited (its supervisor reaped it)."""

    epoch: int
    node: str
    pid: int
    broker_id: str = ""


def encode_ended(entries: Iterable[EndedPrimary]) -> bytes:
    body: dict[str, Any] = {
        "version": WRITTEN_FORMAT,
        "ended": [asdict(e) for e in sorted(entries, key=lambda e: e.epoch)],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode_ended(data: bytes | None) -> tuple[EndedPrimary, ...]:
    """The entries of a record's bytes; () for anything that is not a record of a format
    this agent reads (then nothing is taken for ended)."""
    try:
        body = json.loads(data or b"")
        if not isinstance(body, dict):
            return ()
        record_format(body, "the ended record")
        entries = body.get("ended")
        if not isinstance(entries, list):
            return ()
        out = []
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            epoch, node, pid = entry.get("epoch"), entry.get("node"), entry.get("pid")
            broker_id = entry.get("broker_id", "")
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                continue
            if isinstance(pid, bool) or not isinstance(pid, int) or not isinstance(node, str):
                continue
            out.append(
                EndedPrimary(epoch, node, pid, broker_id if isinstance(broker_id, str) else "")
            )
        return tuple(out)
    except (ValueError, UnicodeDecodeError, ZkFormatError):
        return ()


def merge_ended(
    old: Iterable[EndedPrimary], new: Iterable[EndedPrimary], keep: int = KEEP
) -> tuple[EndedPrimary, ...]:
    """``old`` with ``new`` added (one entry per epoch: the newer word wins), the ``keep``
    highest epochs, in epoch order."""
    by_epoch = {e.epoch: e for e in old}
    by_epoch.update({e.epoch: e for e in new})
    return tuple(by_epoch[epoch] for epoch in sorted(by_epoch)[-keep:])


def record_ended(client: Any, cluster: str, new: Iterable[EndedPrimary]) -> tuple[int, ...]:
    """Add ``new`` to the cluster's ended record; the epochs it holds now."""
    path = ClusterLayout(cluster).ended
    new = tuple(new)
    for attempt in range(WRITE_TRIES):
        try:
            data, stat = client.retry(client.get, path)
        except NoNodeError:
            data, stat = None, None
        merged = merge_ended(decode_ended(data), new)
        try:
            if stat is None:
                create_absent(client, path, encode_ended(merged))
            else:
                set_if_version(client, path, encode_ended(merged), int(stat.version))
        except (BadVersionError, NodeExistsError):
            if attempt == WRITE_TRIES - 1:
                raise
            continue  # another agent wrote it meanwhile: merge with theirs
        return tuple(e.epoch for e in merged)
    return ()  # pragma: no cover - the loop returns or raises


def read_ended(client: Any, cluster: str) -> frozenset[int]:
    """The epochs the cluster's ended record names (empty: none, or unreadable)."""
    try:
        data, _ = client.retry(client.get, ClusterLayout(cluster).ended)
    except NoNodeError:
        return frozenset()
    return frozenset(e.epoch for e in decode_ended(data))


def record_reaped(
    client: Any,
    cluster: str,
    node: str,
    instance: tuple[int | None, str, frozenset[int]],
    reaped: Callable[[int, float], bool] | None,
    reason: str,
) -> tuple[int, ...]:
    """A fence's step before its primary record goes: if broker ``instance`` (pid, broker
    id, the epochs it said it was primary of) was reaped by ``reaped`` (its supervisor's
    :meth:`~ha_agent.supervisor.BrokerSupervisor.reaped`; None: no supervisor, nothing
    known) within :data:`REAP_WAIT`, record those epochs as ended (logged
    ``primary_ended_recorded``); else nothing (``primary_ended_unknown`` says why, when the
    instance had served). The epochs recorded."""
    pid, broker_id, epochs = instance
    if pid is None or not epochs:
        return ()
    why = ""
    if reaped is None:
        why = "no supervisor: the agent cannot see the broker's process end"
    elif not reaped(pid, REAP_WAIT):
        why = f"the broker's process was not reaped within {REAP_WAIT:g} s"
    if why:
        _log.info("primary_ended_unknown", pid=pid, epochs=sorted(epochs), reason=why)
        return ()
    entries = [EndedPrimary(epoch, node, pid, broker_id) for epoch in sorted(epochs)]
    try:
        record_ended(client, cluster, entries)
    except (KazooException, KazooTimeoutError) as exc:
        _log.info("primary_ended_unknown", pid=pid, epochs=sorted(epochs), reason=repr(exc))
        return ()
    _log.info(
        "primary_ended_recorded", pid=pid, broker_id=broker_id, epochs=sorted(epochs), reason=reason
    )
    return tuple(sorted(epochs))
