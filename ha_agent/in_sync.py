"""The in-sync set: ``/qpid-ha/<cluster>/in-sync``, the backups that hold every confirmed message.

:Status: Beta (issue 10)

A *persistent* znode (it must outlive every session: it is what a total failure or the next
election reads) holding compact JSON::

    {"version": 1, "epoch": 7, "primary_store_id": "0b4e...", "primary_node": "n1",
     "members": [{"broker_id": "6f1c...", "node": "n2", "url": "10.0.0.2:5672",
                  "store_id": "9a2d..."}]}

``epoch`` is the epoch of the primary whose agent keeps the set; ``members`` are backups
(never the primary itself), named by the broker id they report in ``/api/ha`` (new at each
broker start, so a restarted broker is never a member until it is in sync again). Node and
URL are only shown (``qpid-ha --zk ... status --all``). ``store_id`` (each member's, from
its agent's member record) and ``primary_store_id`` (the primary's) name the stores that
hold every confirmed message of the epoch, which is what a total failure chooses from
(:func:`ha_agent.promotion.eligibility`); records written before stores had ids lack them
(read as ""). ``primary_node`` (that primary's node, only shown: which broker a cluster
without a primary needs, :mod:`ha_agent.store_choice`) was added to format 1 compatibly:
release 0.1.0's agents ignore it, and a record without it reads as "" (no format bump:
docs/ha-design.md, "Format versions").

Contract
========

- Who writes: the agent of the primary, on every check (:func:`ha_agent.promotion.isr_update`:
  the set becomes the backups its broker counts as in sync, less those whose removal waits),
  and an agent promoting its broker (at the new epoch, the old members less its broker:
  :func:`ha_agent.promotion.promotion_in_sync`).
- Every write is conditional (:func:`write_in_sync`): on the znode's version as read
  (``set(version=...)``; ``create`` when it was absent) and on the epoch (never below the
  record's). So a removal is committed only if nobody wrote since the writer read, and once
  a promotion wrote a newer epoch the old primary's agent can never write again: it reads a
  newer epoch and fences its broker.
- Only after a write that removed a backup has succeeded (or a read shows it removed) does
  the agent tell its broker (``POST /api/ha/in-sync``) that it may release the confirms held
  for it: safety never rests on timing.

Error Handling
==============

- :func:`read_in_sync` returns None when there is no record, and raises
  :class:`InSyncRecordError` for one it cannot parse (the agent then lets nobody contend),
  :class:`InSyncFormatError` (an InSyncRecordError too) for one of a ZooKeeper format it
  cannot read (:mod:`ha_agent.zk_format`).
- :func:`write_in_sync` raises :class:`InSyncEpochError` (nothing written) when the record
  read has a newer epoch than the one given; kazoo's ``BadVersionError`` when the record
  changed since it was read, ``NodeExistsError`` when it was created since it was read
  absent: read again and decide again (the agent does so at its next check).
- A write retried after a lost answer that fails for its own commit is committed, not a
  conflict: it is read back (:mod:`ha_agent.zk_commit`).
- Other kazoo errors (connection loss, session expiry) propagate: the write may or may not
  have been applied; the next read tells.
- Blocking calls: run them in a thread, not on an event loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from ha_agent.promotion import InSyncMember, InSyncRecord
from ha_agent.zk_commit import Op, commit_multi, create_absent, holds, set_if_version
from ha_agent.zk_format import WRITTEN_FORMAT, ZkFormatError, record_format
from ha_agent.zk_layout import ClusterLayout

__all__ = [
    "IN_SYNC_SCHEMA",
    "InSyncEpochError",
    "InSyncFormatError",
    "InSyncRecordError",
    "VersionedInSync",
    "decode_in_sync",
    "encode_in_sync",
    "read_in_sync",
    "write_in_sync",
]

#: Version (the ZooKeeper format) of the record written by this code.
IN_SYNC_SCHEMA = WRITTEN_FORMAT


class InSyncRecordError(ValueError):
    """The in-sync znode holds something that is not an in-sync record this agent reads."""


class InSyncFormatError(InSyncRecordError):
    """The in-sync record is of a ZooKeeper format this agent cannot read (``found``)."""

    def __init__(self, message: str, found: int) -> None:
        super().__init__(message)
        self.found = found


class InSyncEpochError(Exception):
    """The recorded set belongs to a newer epoch than the writer's: another primary owns it."""

    def __init__(self, recorded: int, epoch: int) -> None:
        super().__init__(
            f"the in-sync set is at epoch {recorded}, newer than {epoch}: another primary owns it"
        )
        self.recorded = recorded
        self.epoch = epoch


@dataclass(frozen=True)
class VersionedInSync:
    """A record as read, with the znode version a conditional write must name and the
    ZooKeeper format it was written in (2: every member spoke format 2 when it was first
    so written, and promotions are decided without the election lock:
    :func:`ha_agent.promotion_txn.needs_lock`)."""

    record: InSyncRecord
    version: int
    format: int = 1


def encode_in_sync(record: InSyncRecord, format_: int = IN_SYNC_SCHEMA) -> bytes:
    """The znode's content: compact JSON, keys sorted, members sorted by broker id, in
    ZooKeeper format ``format_`` (1 or 2: the same fields)."""
    members = [
        {"broker_id": m.broker_id, "node": m.node, "url": m.url, "store_id": m.store_id}
        for m in sorted(record.members, key=lambda m: m.broker_id)
    ]
    body = {
        "version": format_,
        "epoch": record.epoch,
        "members": members,
        "primary_store_id": record.primary_store_id,
    }
    if record.primary_node:  # added compatibly: agents that do not know it ignore it
        body["primary_node"] = record.primary_node
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_in_sync(data: bytes | None) -> InSyncRecord:
    """Parse a znode's content; InSyncRecordError naming what is wrong."""
    return _decode(data)[0]


def _decode(data: bytes | None) -> tuple[InSyncRecord, int]:
    """The record and its ZooKeeper format."""
    try:
        body = json.loads(data or b"")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InSyncRecordError(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InSyncRecordError(f"not a JSON object: {type(body).__name__}")
    try:
        found = record_format(body, "the in-sync record")
    except ZkFormatError as exc:
        raise InSyncFormatError(str(exc), exc.found) from None
    except ValueError as exc:
        raise InSyncRecordError(str(exc)) from None
    epoch, members = body.get("epoch"), body.get("members")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise InSyncRecordError(f"epoch must be a non-negative integer: {epoch!r}")
    if not isinstance(members, list):
        raise InSyncRecordError(f"members must be a list: {members!r}")
    parsed = []
    for entry in members:
        if not isinstance(entry, dict):
            raise InSyncRecordError(f"a member must be an object: {entry!r}")
        fields = [entry.get(k, "") for k in ("broker_id", "node", "url", "store_id")]
        if not all(isinstance(f, str) for f in fields) or not fields[0]:
            raise InSyncRecordError(f"a member needs a broker_id and string fields: {entry!r}")
        parsed.append(InSyncMember(*fields))
    primary_store = body.get("primary_store_id", "")
    if not isinstance(primary_store, str):
        raise InSyncRecordError(f"primary_store_id must be a string: {primary_store!r}")
    primary_node = body.get("primary_node", "")
    if not isinstance(primary_node, str):
        raise InSyncRecordError(f"primary_node must be a string: {primary_node!r}")
    return InSyncRecord(epoch, tuple(parsed), primary_store, primary_node), found


def read_in_sync(client: Any, cluster: str) -> VersionedInSync | None:
    """The committed set of ``cluster`` with its znode version (None when none is recorded)."""
    path = ClusterLayout(cluster).in_sync
    try:
        data, stat = client.retry(client.get, path)
    except NoNodeError:
        return None
    try:
        record, found = _decode(data)
    except InSyncFormatError as exc:
        raise InSyncFormatError(f"{path}: {exc}", exc.found) from None
    except InSyncRecordError as exc:
        raise InSyncRecordError(f"{path}: {exc}") from None
    return VersionedInSync(record, int(stat.version), found)


def write_in_sync(
    client: Any,
    cluster: str,
    record: InSyncRecord,
    read: VersionedInSync | None,
    format_: int = IN_SYNC_SCHEMA,
    epoch_version: int | None = None,
) -> VersionedInSync:
    """Commit ``record`` if the znode is still as ``read`` (None: absent) and its epoch is
    not newer than ``record.epoch``; returns what is now committed (with its version).

    ``epoch_version``: the epoch counter's znode version the writer read; the write is then
    one multi-op with a check of it (issue 26: a change of the set commits only while no
    promotion took an epoch since the writer read), ``MultiConflict`` otherwise.

    A ``set`` (or ``create``) that the client's retry sent again after a lost answer and
    that failed for its own commit is read back and taken as committed
    (:mod:`ha_agent.zk_commit`): only a write that lost to another raises.
    """
    layout = ClusterLayout(cluster)
    path = layout.in_sync
    data = encode_in_sync(record, format_)
    if read is not None and read.record.epoch > record.epoch:
        raise InSyncEpochError(read.record.epoch, record.epoch)
    if epoch_version is not None:
        write = (
            Op("create", path, data)
            if read is None
            else Op("set", path, data, version=read.version)
        )
        results = commit_multi(
            client,
            [Op("check", layout.epoch, version=epoch_version), write],
            lambda: holds(client, path, data) is not None,
        )
        if not results:  # its answer lost, found committed: its version as read back
            version = holds(client, path, data)
        else:
            version = 0 if read is None else int(results[1].version)
        return VersionedInSync(record, -1 if version is None else version, format_)
    if read is None:
        return VersionedInSync(record, create_absent(client, path, data), format_)
    return VersionedInSync(record, set_if_version(client, path, data, read.version), format_)
