"""The primary record: ``/qpid-ha/<cluster>/primary``, who serves clients and with which epoch.

:Status: Beta

An *ephemeral* znode written by the agent that won the election, once its broker is
promoted: ``{"version": 1, "node": "n1", "epoch": 7, "broker_url": "...", "vip": "..."}``.
It goes away with that agent's session (crash, partition past the session timeout), and
the agent deletes it when it fences its broker. Agents read it to know the primary (a
joining broker never contends while one is recorded; a primary broker whose agent sees
another node recorded is fenced); ``qpid-ha --zk`` shows it.

Error Handling
==============

- :func:`read_primary` returns None when there is no record, and also for a record that
  cannot be parsed (logged as ``primary_record_invalid``). A record of a ZooKeeper format
  this agent cannot read is not "no primary": it raises
  :class:`~ha_agent.zk_format.ZkFormatError` (the agent then does not contend).
- :func:`write_primary` replaces a record left by this session, and raises kazoo's
  ``NodeExistsError`` when another live session holds one (two leaders would be a bug of
  the election: the caller resigns).
- kazoo connection errors propagate (callers run these in their ZooKeeper thread).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import structlog
from kazoo.exceptions import NodeExistsError, NoNodeError

from ha_agent.promotion import PrimaryRecord
from ha_agent.takeover import OldPrimary
from ha_agent.zk_commit import set_if_version
from ha_agent.zk_format import WRITTEN_FORMAT, ZkFormatError, record_format
from ha_agent.zk_layout import ClusterLayout

__all__ = [
    "delete_primary",
    "encode_primary",
    "read_primary",
    "read_primary_versioned",
    "session_id",
    "write_primary",
]

RECORD_VERSION = WRITTEN_FORMAT

_log = structlog.get_logger("ha_agent.primary_record", component="agent")


def encode_primary(record: PrimaryRecord, vip: str | None) -> bytes:
    """The record's bytes (canonical JSON: a promotion's read-back compares them)."""
    body: dict[str, Any] = {"version": RECORD_VERSION, **asdict(record), "vip": vip}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode_primary(data: bytes | None) -> tuple[PrimaryRecord, str | None] | None:
    """The record and its virtual IP from a znode's bytes; None when it is not a record,
    :class:`~ha_agent.zk_format.ZkFormatError` when it is one of a format this agent cannot
    read."""
    try:
        body = json.loads(data or b"")
        if not isinstance(body, dict):
            return None
        record_format(body, "the primary record")  # ZkFormatError: a fault, not garbage
        node, epoch, url = body["node"], body["epoch"], body.get("broker_url", "")
        vip = body.get("vip")
        if not isinstance(node, str) or not isinstance(url, str):
            return None
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            return None
        return PrimaryRecord(node, epoch, url), vip if isinstance(vip, str) else None
    except (KeyError, ValueError, UnicodeDecodeError):  # json.JSONDecodeError is a ValueError
        return None


def read_primary_full(client: Any, cluster: str) -> tuple[PrimaryRecord, str | None] | None:
    path = ClusterLayout(cluster).primary
    try:
        data, _ = client.retry(client.get, path)
    except NoNodeError:
        return None
    try:
        decoded = decode_primary(data)
    except ZkFormatError as exc:
        raise exc.at(path) from None
    if decoded is None:
        _log.warning("primary_record_invalid", cluster=cluster, path=path)
    return decoded


def read_primary(client: Any, cluster: str) -> PrimaryRecord | None:
    """The recorded primary of ``cluster`` (None when there is none)."""
    decoded = read_primary_full(client, cluster)
    return None if decoded is None else decoded[0]


def read_primary_versioned(client: Any, cluster: str) -> OldPrimary | None:
    """The primary record with its znode version and owning session (None: none), for a
    takeover (:mod:`ha_agent.takeover`); a record that cannot be parsed has ``record``
    None, one of a format this agent cannot read raises ZkFormatError."""
    path = ClusterLayout(cluster).primary
    try:
        data, stat = client.retry(client.get, path)
    except NoNodeError:
        return None
    try:
        decoded = decode_primary(data)
    except ZkFormatError as exc:
        raise exc.at(path) from None
    record = None if decoded is None else decoded[0]
    return OldPrimary(record, int(stat.version), int(stat.ephemeralOwner))


def session_id(client: Any) -> int | None:
    """This client's ZooKeeper session id (None before it has one)."""
    client_id = client.client_id
    return None if client_id is None else int(client_id[0])


def write_primary(client: Any, cluster: str, record: PrimaryRecord, vip: str | None = None) -> None:
    """Record ``record`` as the primary, ephemeral to this client's session."""
    path = ClusterLayout(cluster).primary
    data = encode_primary(record, vip)
    try:
        client.retry(client.create, path, data, ephemeral=True, makepath=True)
        return
    except NodeExistsError:
        pass
    _, stat = client.retry(client.get, path)
    if stat.ephemeralOwner != session_id(client):
        raise NodeExistsError(f"{path} is held by session {stat.ephemeralOwner:#x}")
    set_if_version(client, path, data, int(stat.version))  # its own, retried: committed


def delete_primary(client: Any, cluster: str) -> bool:
    """Delete the record if this session owns it; True when it did."""
    path = ClusterLayout(cluster).primary
    try:
        _, stat = client.retry(client.get, path)
        if stat.ephemeralOwner != session_id(client):
            return False
        client.retry(client.delete, path, version=stat.version)
    except NoNodeError:
        return False
    return True


def drop_stale_primary(
    client: Any, cluster: str, node: str, record: PrimaryRecord | None, leads: bool
) -> bool:
    """A primary record naming ``node`` while its agent neither leads nor promoted (not
    ``leads``) is stale (a promotion voided, a term that ended): delete it if this session
    wrote it, or every other agent waits for a primary that no agent leads. True when it
    was deleted (logged ``primary_record_stale``); ZooKeeper errors go to the caller."""
    if record is None or record.node != node or leads:
        return False
    if not delete_primary(client, cluster):
        return False
    _log.warning(
        "primary_record_stale",
        primary_epoch=record.epoch,
        reason="this agent does not lead: deleted its own primary record",
    )
    return True
