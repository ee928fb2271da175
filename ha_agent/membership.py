"""Cluster membership: each agent publishes its broker's state in an ephemeral znode.

:Status: Beta (the record's fields follow the agent's needs; ``version`` marks the schema)

Each agent owns ``/qpid-ha/<cluster>/members/<node>``: an *ephemeral* znode, so it goes
away when the agent's ZooKeeper session ends (crash, partition past the session timeout,
clean exit). It holds a JSON object (:class:`Member`, ZooKeeper format 1, in ``version``:
:mod:`ha_agent.zk_format`)::

    {"version": 1, "node": "n1", "broker_url": "amqp://10.0.0.1:5672",
     "ha_state": "ready", "epoch": 7, "store_status": "clean",
     "replication_position": 1234, "broker_id": "6f1c...",
     "replication_formats": "1-1", "zookeeper_formats": "1-1"}

``replication_position`` is one number that orders brokers of the same epoch (larger is
more advanced); the agent derives it from its broker's ``/api/ha``. ``store_status`` is
``empty``, ``clean``, ``dirty`` or ``unknown``. ``broker_id`` is the id the broker reports
in ``/api/ha`` (new at each broker start; "" while it does not answer): the in-sync set
(:mod:`ha_agent.in_sync`) names brokers by it. It was added to schema 1 compatibly: a
record without it reads as "" (but an agent older than the field refuses records with it,
so upgrade every agent of a cluster together).

``replication_formats`` (its broker's, from ``/api/ha``) and ``zookeeper_formats`` (the
agent's) are the formats the member speaks, ``"LOW-HIGH"`` (:mod:`common.formats`; added in
release 0.1.0: a record without them is of an earlier build and reads as ``"1-1"``). A new
feature of a format is used only once every member speaks it: :func:`cluster_speaks`.

:class:`MemberPublisher` creates and updates this agent's record; :func:`read_members`
returns everyone's.

Error Handling
==============

- Every call talks to ZooKeeper and may raise kazoo's ``ConnectionLoss``,
  ``SessionExpiredError`` (or ``RetryFailedError`` after the client's retry policy gave
  up). Nothing is half done then: the next :meth:`MemberPublisher.update` (the agent calls
  it every check interval) writes the whole record again.
- After a LOST session the ephemeral record is gone; :meth:`MemberPublisher.update`
  re-creates it under the new session, so the agent needs no special path for that.
- :class:`MemberConflictError` when another *live* session owns the node: another agent
  runs with the same ``--node``, or this agent restarted before ZooKeeper expired its
  previous session. :meth:`MemberPublisher.publish` can wait for the old record to vanish
  (``timeout``); it never deletes another session's record.
- A record that cannot be parsed (a hand-made znode) is left out of :func:`read_members`
  with a ``member_record_invalid`` warning; :meth:`Member.from_json` raises
  :class:`MemberRecordError`. A record of a ZooKeeper format this agent cannot read is a
  fault, not garbage: :meth:`Member.from_json` raises
  :class:`~ha_agent.zk_format.ZkFormatError`, and :func:`read_members` leaves it out and
  hands its line to the caller (``unreadable``), which then does not contend.
- Blocking calls: run them in a thread, not on an event loop.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import structlog
from kazoo.exceptions import NodeExistsError, NoNodeError

from common.formats import parse_range
from common.version import REPLICATION_FORMATS, ZOOKEEPER_FORMATS
from ha_agent.zk_format import WRITTEN_FORMAT, ZkFormatError, record_format
from ha_agent.zk_layout import ClusterLayout, check_name

__all__ = [
    "MEMBER_SCHEMA",
    "STORE_STATUSES",
    "Member",
    "MemberConflictError",
    "MemberPublisher",
    "MemberRecordError",
    "cluster_speaks",
    "read_members",
]

#: Version (the ZooKeeper format) of the member record written by this code.
MEMBER_SCHEMA = WRITTEN_FORMAT

#: What a member record of a build before release 0.1.0 speaks (it does not say).
_BEFORE_0_1_0 = "1-1"

#: The store statuses a record may carry.
STORE_STATUSES = frozenset({"empty", "clean", "dirty", "unknown"})

_log = structlog.get_logger("ha_agent.membership", component="agent")


class MemberRecordError(ValueError):
    """A member record is not valid JSON of the expected shape."""


class MemberConflictError(Exception):
    """The member znode exists and belongs to another live ZooKeeper session."""

    def __init__(self, path: str, owner: int) -> None:
        super().__init__(
            f"{path} belongs to ZooKeeper session {owner:#x}: another agent uses this node "
            "name, or the previous session of this agent has not expired yet"
        )
        self.path = path
        self.owner = owner


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MemberRecordError(f"{name} must be a non-negative integer: {value!r}")
    return value


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise MemberRecordError(f"{name} must be a string: {value!r}")
    return value


@dataclass(frozen=True)
class Member:
    """One agent's view of its broker, as published in its member znode."""

    node: str
    broker_url: str
    ha_state: str = "unknown"
    epoch: int = 0
    store_status: str = "unknown"
    replication_position: int = 0
    broker_id: str = ""
    store_id: str = ""  # the broker's store, kept across its restarts ("" unknown)
    #: the formats the member speaks (its broker's replication, its agent's ZooKeeper)
    replication_formats: str = REPLICATION_FORMATS.text
    zookeeper_formats: str = ZOOKEEPER_FORMATS.text

    def __post_init__(self) -> None:
        try:
            check_name("node", self.node)
        except ValueError as exc:
            raise MemberRecordError(str(exc)) from None
        _str("broker_url", self.broker_url)
        _str("ha_state", self.ha_state)
        _str("broker_id", self.broker_id)
        _str("store_id", self.store_id)
        _int("epoch", self.epoch)
        _int("replication_position", self.replication_position)
        for name in ("replication_formats", "zookeeper_formats"):
            try:
                parse_range(getattr(self, name))
            except ValueError as exc:
                raise MemberRecordError(f"{name}: {exc}") from None
        if self.store_status not in STORE_STATUSES:
            raise MemberRecordError(
                f"store_status must be one of {sorted(STORE_STATUSES)}: {self.store_status!r}"
            )

    def to_json(self) -> bytes:
        """The znode's content: compact JSON, keys sorted, with the schema version."""
        record = {"version": MEMBER_SCHEMA, **asdict(self)}
        return json.dumps(record, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes | None) -> Member:
        """Parse a znode's content; MemberRecordError if it is not a member record,
        :class:`~ha_agent.zk_format.ZkFormatError` if it is one of a ZooKeeper format this
        agent cannot read."""
        try:
            record = json.loads(data or b"")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MemberRecordError(f"not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise MemberRecordError(f"not a JSON object: {type(record).__name__}")
        try:
            record_format(record, "a member record")
        except ValueError as exc:
            raise MemberRecordError(str(exc)) from None
        record.pop("version", None)
        fields = {"node", "broker_url", "ha_state", "epoch", "store_status"}
        fields |= {"replication_position"}
        optional = {"broker_id", "store_id", "replication_formats", "zookeeper_formats"}
        missing, unknown = fields - record.keys(), record.keys() - fields - optional
        if missing or unknown:
            raise MemberRecordError(f"fields missing {sorted(missing)}, unknown {sorted(unknown)}")
        record.setdefault("replication_formats", _BEFORE_0_1_0)
        record.setdefault("zookeeper_formats", _BEFORE_0_1_0)
        return cls(**record)


def cluster_speaks(members: Mapping[str, Member], kind: str, format_: int) -> bool:
    """Whether every member speaks ``format_`` of ``kind`` ("replication" or "zookeeper"):
    the condition to use a feature of that format (docs/ha-design.md, "Format versions").
    A record of a build before 0.1.0 speaks format 1 only; no members: False."""
    if kind not in ("replication", "zookeeper"):
        raise ValueError(f"bad format kind {kind!r}: replication or zookeeper")
    spoken = [parse_range(getattr(m, f"{kind}_formats")) for m in members.values()]
    return bool(spoken) and all(format_ in formats for formats in spoken)


def read_members(
    client: Any,
    cluster: str,
    unreadable: list[ZkFormatError] | None = None,
    invalid: list[str] | None = None,
) -> dict[str, Member]:
    """Every member record of ``cluster`` by node name (empty when there is none).

    A record of a ZooKeeper format this agent cannot read is left out; its error goes to
    ``unreadable`` when given (the agent logs it once and does not contend), else to the
    log (``zk_record_format_unknown``). A record that cannot be parsed is left out too;
    ``path: reason`` goes to ``invalid`` when given (``qpid-ha status`` shows it), else to
    the log (``member_record_invalid``)."""
    layout = ClusterLayout(cluster)
    try:
        children = client.retry(client.get_children, layout.members)
    except NoNodeError:
        return {}
    members: dict[str, Member] = {}
    for child in sorted(children):
        path = f"{layout.members}/{child}"
        try:
            data, _ = client.retry(client.get, path)
        except NoNodeError:
            continue  # its session ended between the two reads
        try:
            member = Member.from_json(data)
            if member.node != child:
                raise MemberRecordError(f"record of node {member.node!r} under {child!r}")
        except ZkFormatError as exc:
            if unreadable is None:
                _log.warning(
                    "zk_record_format_unknown", path=path, found=exc.found, reason=str(exc.at(path))
                )
            else:
                unreadable.append(exc.at(path))
            continue
        except MemberRecordError as exc:
            if invalid is None:
                _log.warning("member_record_invalid", cluster=cluster, path=path, reason=str(exc))
            else:
                invalid.append(f"{path}: {exc}")
            continue
        members[child] = member
    return members


class MemberPublisher:
    """This agent's member record: publish it, update it, withdraw it.

    THREAD UNSAFE: one owner (the agent's check loop) calls it.
    """

    def __init__(self, client: Any, cluster: str, member: Member) -> None:
        self.client = client
        self.layout = ClusterLayout(cluster)
        self.path = self.layout.member(member.node)
        self._member = member

    @property
    def member(self) -> Member:
        """The record as last published (or as it will be, before :meth:`publish`)."""
        return self._member

    def _session_id(self) -> int | None:
        client_id = self.client.client_id
        return None if client_id is None else int(client_id[0])

    def publish(self, timeout: float = 0.0) -> None:
        """Create the ephemeral record (or overwrite it if this session already owns it).

        When another session owns the node, wait up to ``timeout`` seconds for it to go away
        (a watch, not a poll), then raise :class:`MemberConflictError`.
        """
        deadline = time.monotonic() + timeout
        data = self._member.to_json()
        while True:
            try:
                self.client.retry(
                    self.client.create, self.path, data, ephemeral=True, makepath=True
                )
                return
            except NodeExistsError:
                pass
            gone = threading.Event()
            try:
                _, stat = self.client.retry(
                    self.client.get, self.path, watch=lambda _event, gone=gone: gone.set()
                )
            except NoNodeError:
                continue  # it went away between create and get: create again
            if stat.ephemeralOwner == self._session_id():
                self.client.retry(self.client.set, self.path, data)
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not gone.wait(remaining):
                raise MemberConflictError(self.path, int(stat.ephemeralOwner))

    def update(self, *, wait: float = 0.0, **changes: Any) -> Member:
        """Change fields of the record (``ha_state=``, ``epoch=`` ...) and write it.

        Re-creates the record when it is gone (a new session after LOST). When another
        session owns it, waits up to ``wait`` seconds for that record to go, as
        :meth:`publish` does, then creates it: an older session's record (this agent's own
        before a LOST, not expired yet) goes within a session timeout. Raising at once
        ended the agent's thread with a traceback, its node lost for good, in 1 of 10
        ``zk-server`` cycles (a ZooKeeper leader SIGKILLed). Returns the new record.
        MemberRecordError for a bad value (nothing written then); MemberConflictError when
        the other session's record is still there after ``wait``.
        """
        member = replace(self._member, **changes)
        data = member.to_json()
        try:
            _, stat = self.client.retry(self.client.get, self.path)
        except NoNodeError:
            self._member = member
            self.publish()
            return member
        if stat.ephemeralOwner != self._session_id():
            self.publish_as(member, wait)
            return member
        self._member = member
        try:
            self.client.retry(self.client.set, self.path, data)  # only this session writes it
        except NoNodeError:
            self.publish()  # the session ended between get and set
        return member

    def publish_as(self, member: Member, wait: float) -> None:
        """:meth:`publish` ``member`` (waiting up to ``wait`` seconds for another session's
        record to go); the record kept only once written."""
        before, self._member = self._member, member
        try:
            self.publish(timeout=wait)
        except BaseException:
            self._member = before
            raise

    def withdraw(self) -> bool:
        """Delete this session's record; False when it was not there or not ours."""
        try:
            _, stat = self.client.retry(self.client.get, self.path)
            if stat.ephemeralOwner != self._session_id():
                return False
            self.client.retry(self.client.delete, self.path, version=stat.version)
        except NoNodeError:
            return False
        return True
