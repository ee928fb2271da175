"""A conditional write whose answer was lost is read back (issue 26, item 1's bug).

kazoo's command retry sends a ``setData`` (``create``) again when the connection dropped
after ZooKeeper applied it: the retry fails with BadVersion (NodeExists) for the writer's
own commit. :mod:`ha_agent.zk_commit` reads the znode back and takes its own bytes as
committed; a write that really lost still raises.

The core is driven over a store of versioned znodes (any interleaving of losses and other
writers, hypothesis); the same path with kazoo's real client and retry against the real
ZooKeeper, the answer of the real write dropped (ConnectionLoss raised after it was
applied), including the in-sync set a promotion writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry

from ha_agent.in_sync import VersionedInSync, read_in_sync, write_in_sync
from ha_agent.promotion import InSyncMember, InSyncRecord
from ha_agent.zk_layout import ClusterLayout


@dataclass
class Stat:
    version: int


class VersionedZnodes:
    """ZooKeeper's versioned znodes, and a connection whose answers may be lost: each
    ``lose`` entry says, for the next write, whether its answer is lost after it was
    applied (True) or before it reached the server (False); a retry follows, as kazoo's."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.lose: list[bool] = []
        self.retry = KazooRetry(max_tries=5, delay=0, max_delay=0, ignore_expire=False)

    def _fault(self) -> bool | None:
        return self.lose.pop(0) if self.lose else None

    def get(self, path: str) -> tuple[bytes, Stat]:
        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, Stat(version)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        fault = self._fault()
        if fault is False:
            raise ConnectionLoss("lost before it was applied")
        if path not in self.nodes:
            raise NoNodeError(path)
        if version != -1 and self.nodes[path][1] != version:
            raise BadVersionError(path)
        self.nodes[path] = (data, self.nodes[path][1] + 1)
        if fault:
            raise ConnectionLoss("lost after it was applied")
        return Stat(self.nodes[path][1])

    def create(self, path: str, data: bytes, makepath: bool = False) -> str:
        fault = self._fault()
        if fault is False:
            raise ConnectionLoss("lost before it was applied")
        if path in self.nodes:
            raise NodeExistsError(path)
        self.nodes[path] = (data, 0)
        if fault:
            raise ConnectionLoss("lost after it was applied")
        return path


def record(epoch: int, *ids: str) -> InSyncRecord:
    return InSyncRecord(epoch, tuple(InSyncMember(i, f"n-{i}") for i in ids), "store-p")


@settings(max_examples=200, deadline=None)
@given(
    writes=st.lists(
        st.tuples(
            st.sampled_from(["b1", "b2", "b3"]),  # a member the next set has
            st.booleans(),  # another writer commits just before (a real conflict)
            st.lists(st.booleans(), max_size=3),  # this write's lost answers
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_write_is_committed_exactly_when_it_returns(
    writes: list[tuple[str, bool, list[bool]]],
) -> None:
    zk = VersionedZnodes()
    path = ClusterLayout("c").in_sync
    read = None
    for step, (member, raced, lost) in enumerate(writes):
        if raced and read is not None:  # a hand-run commit, or another agent's
            zk.nodes[path] = (zk.nodes[path][0] + b" ", zk.nodes[path][1] + 1)
        mine = record(3, member, f"x{step}")
        zk.lose = list(lost)
        try:
            committed = write_in_sync(zk, "c", mine, read)
        except (BadVersionError, NodeExistsError):
            assert raced, "its own commit taken for a conflict"
            assert zk.get(path)[0] != committed_bytes(mine)
            read = read_in_sync(zk, "c")
            continue
        except ConnectionLoss:
            continue  # the retry policy gave up: unknown, the next read tells
        # returned: committed, with the version ZooKeeper holds
        data, stat = zk.get(path)
        assert data == committed_bytes(mine)
        assert committed == VersionedInSync(mine, stat.version)
        read = committed


def committed_bytes(mine: InSyncRecord) -> bytes:
    from ha_agent.in_sync import encode_in_sync

    return encode_in_sync(mine)


class LossyClient:
    """A real, started KazooClient whose next ``set`` or ``create`` answers are lost after
    ZooKeeper applied them: kazoo's own retry (the client's policy) sends them again."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.lose = 0
        self.lost = 0

    def retry(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        return self.client.retry(func, *args, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self.client.get(*args, **kwargs)

    def _applied_then_lost(self, answer: Any) -> Any:
        if self.lose:
            self.lose -= 1
            self.lost += 1
            raise ConnectionLoss("the answer was lost after ZooKeeper applied it")
        return answer

    def set(self, *args: Any, **kwargs: Any) -> Any:
        return self._applied_then_lost(self.client.set(*args, **kwargs))

    def create(self, *args: Any, **kwargs: Any) -> Any:
        return self._applied_then_lost(self.client.create(*args, **kwargs))


def test_real_zookeeper_create_and_set_retried_after_their_commit_are_committed(
    zk: Any, cluster: str
) -> None:
    lossy = LossyClient(zk)
    lossy.lose = 1
    first = write_in_sync(lossy, cluster, record(4), None)  # the promotion's write
    assert lossy.lost == 1
    assert read_in_sync(zk, cluster) == first
    lossy.lose = 1
    removal = write_in_sync(lossy, cluster, record(4, "b2"), first)
    assert lossy.lost == 2
    assert read_in_sync(zk, cluster) == removal
    assert removal.version == first.version + 1
    # a real conflict still raises: someone else wrote since the read
    zk.set(ClusterLayout(cluster).in_sync, b'{"version":1,"epoch":5,"members":[]}')
    with pytest.raises(BadVersionError):
        write_in_sync(lossy, cluster, record(4, "b3"), removal)
