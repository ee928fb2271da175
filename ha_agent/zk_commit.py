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

Exact bytes are the test: the records are canonical JSON (keys sorted, members sorted), and
a record at the writer's epoch is written by the writer alone (epochs come from ZooKeeper's
counter), so equal bytes are this write; a different writer's equal bytes would commit the
same record, which is all the caller relies on.

Error Handling
==============

- ``BadVersionError`` / ``NodeExistsError``: the znode holds something else (or, after a
  ``BadVersion``, nothing): a real conflict, as before.
- Other kazoo errors (connection loss past the retry policy, session expiry) propagate: the
  write may or may not be committed; the next read tells.
- Blocking calls: run them in a thread, not on an event loop.
"""

from __future__ import annotations

from typing import Any

import structlog
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

__all__ = ["create_absent", "set_if_version"]

_log = structlog.get_logger("ha_agent.zk_commit", component="agent")


def _holds(client: Any, path: str, data: bytes) -> int | None:
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
        committed = _holds(client, path, data)
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
        committed = _holds(client, path, data)
        if committed is None:
            raise
        _log.info("zk_write_confirmed", path=path, version=committed, retried="create")
        return committed
    return 0
