"""Conditional ZooKeeper writes that know their own commit after a lost answer (issue 26).

:Status: Beta

The agent's conditional writes (the in-sync set at a promotion, a removal, every change of
the set: :func:`ha_agent.in_sync.write_in_sync`) go through kazoo's command retry. When the
connection drops after ZooKeeper applied a ``setData`` but before its answer arrived, the
retry sends the same ``setData`` again, now against the version the first one made: it
fails with ``BadVersion``, for the writer's own commit. A ``create`` retried the same way
fails with ``NodeExists``. Taken as "another writer won", this made the winner of an
election resign after it had committed the set at its new epoch, which names no one but
what it wrote: no primary was left.

:func:`set_if_version` and :func:`create_absent` read the znode back after such a
conflict: when it holds exactly the bytes written, the write is committed (whoever made the
last step of it), and they return its version as a success; else the conflict is real and
raised. The caller's rules do not change: a removal is told to the broker only once a
record without the backup is committed, and that is what the read shows.

A *multi-op* (:func:`commit_multi`: a ZooKeeper transaction, all its operations applied or
none) is never retried: its answer lost, it waits for the connection (a ``sync``) and asks
the caller's ``committed`` probe whether its writes are there (the promotion's: the
ephemeral primary record holds exactly its bytes and belongs to this session; a change of
the in-sync set's: the set holds exactly its bytes), ``zk_write_confirmed`` with
``retried="multi"``. A transaction ZooKeeper refused raises :class:`MultiConflict` naming
the operation that failed (nothing of it applied).

Exact bytes are the test: the records are canonical JSON (keys sorted, members sorted), and
a record at the writer's epoch is written by the writer alone (epochs come from ZooKeeper's
counter), so equal bytes are this write; a different writer's equal bytes would commit the
same record, which is all the caller relies on.

Error Handling
==============

- ``BadVersionError`` / ``NodeExistsError``: the znode holds something else (or, after a
  ``BadVersion``, nothing): a real conflict, as before.
- Other kazoo errors (connection loss past the retry policy, session expiry) propagate: the
  write may or may not be committed; the next read tells. A multi-op whose answer was lost
  and whose probe does not find it raises the ``ConnectionLoss``: not committed as far as
  this session can tell (a late commit is found by the next read: the agent deletes a
  primary record of its own session that it does not lead, ``primary_record_stale``).
- Blocking calls: run them in a thread, not on an event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)

__all__ = ["MultiConflict", "Op", "commit_multi", "create_absent", "holds", "set_if_version"]

_log = structlog.get_logger("ha_agent.zk_commit", component="agent")


def holds(client: Any, path: str, data: bytes) -> int | None:
    """The znode's version when it holds exactly ``data``; None otherwise (or absent)."""
    try:
        current, stat = client.retry(client.get, path)
    except NoNodeError:
        return None
    return int(stat.version) if current == data else None


def set_if_version(client: Any, path: str, data: bytes, version: int) -> int:
    """``setData(path, data, version)``; the new version. A ``BadVersion`` after which the
    znode holds ``data`` is this write's own commit, retried after a lost answer."""
    try:
        stat = client.retry(client.set, path, data, version=version)
    except BadVersionError:
        committed = holds(client, path, data)
        if committed is None:
            raise
        _log.info("zk_write_confirmed", path=path, version=committed, retried="set")
        return committed
    return int(stat.version)


def create_absent(client: Any, path: str, data: bytes) -> int:
    """``create(path, data)`` (parents made); the version, 0. A ``NodeExists`` after which
    the znode holds ``data`` is this create's own commit, retried after a lost answer."""
    try:
        client.retry(client.create, path, data, makepath=True)
    except NodeExistsError:
        committed = holds(client, path, data)
        if committed is None:
            raise
        _log.info("zk_write_confirmed", path=path, version=committed, retried="create")
        return committed
    return 0


@dataclass(frozen=True)
class Op:
    """One operation of a multi-op: ``check`` (the znode's version is ``version``),
    ``set`` (``data`` at ``version``), ``create`` (``data``; ``ephemeral``: owned by this
    session) or ``delete`` (at ``version``)."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("check", "set", "create", "delete"):
            raise ValueError(f"bad multi-op kind {self.kind!r}")


class MultiConflict(Exception):
    """ZooKeeper refused a multi-op (nothing of it applied): ``op`` failed with ``error``
    (``BadVersionError``, ``NodeExistsError``, ``NoNodeError``)."""

    def __init__(self, op: Op, error: Exception) -> None:
        super().__init__(f"{op.kind} {op.path}: {type(error).__name__}")
        self.op = op
        self.error = error


def commit_multi(client: Any, ops: Sequence[Op], committed: Callable[[], bool]) -> list[Any]:
    """Commit ``ops`` as one ZooKeeper transaction; its results (kazoo's: a path for a
    create, a stat for a set, True for a check or delete). After a lost answer,
    ``committed()`` (run once the connection is back) says whether it was applied: then
    the results are unknown (an empty list), else the ``ConnectionLoss`` is raised."""
    transaction = client.transaction()
    for op in ops:
        if op.kind == "check":
            transaction.check(op.path, op.version)
        elif op.kind == "set":
            transaction.set_data(op.path, op.data, op.version)
        elif op.kind == "create":
            transaction.create(op.path, op.data, ephemeral=op.ephemeral)
        else:
            transaction.delete(op.path, op.version)
    try:
        results = list(transaction.commit())
    except ConnectionLoss:
        parent = ops[-1].path.rsplit("/", 1)[0] or "/"
        client.retry(client.sync, parent)  # the connection back, the server caught up
        if not committed():
            raise
        _log.info("zk_write_confirmed", path=ops[-1].path, version=-1, retried="multi")
        return []
    for op, result in zip(ops, results, strict=False):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise MultiConflict(op, result)
    return results
