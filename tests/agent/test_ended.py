"""The ended record (ha_agent/ended.py, issue 26): the epochs whose primary's broker process
its agent saw reaped, so that the next primary does not wait out its grants to them.

The record's rule without I/O (hypothesis), then the real ZooKeeper: two agents writing at
once, a record that cannot be read, and the fence's step with a supervisor that did or did
not reap the instance (a real child process).
"""

from __future__ import annotations

import sys
from typing import Any

import structlog
from hypothesis import example, given
from hypothesis import strategies as st

from common.polling import poll_until
from ha_agent.ended import (
    KEEP,
    EndedPrimary,
    decode_ended,
    encode_ended,
    merge_ended,
    read_ended,
    record_ended,
    record_reaped,
)
from ha_agent.supervisor import BrokerSupervisor
from ha_agent.zk_layout import ClusterLayout

entries = st.builds(
    EndedPrimary,
    epoch=st.integers(0, 40),
    node=st.sampled_from(["n1", "n2", "n3"]),
    pid=st.integers(1, 2**22),
    broker_id=st.text(max_size=8),
)


@given(st.lists(entries), st.lists(entries))
@example([], [])
@example([EndedPrimary(e, "n1", e) for e in range(KEEP)], [EndedPrimary(0, "n2", 99)])
def test_merge_keeps_the_newest_epochs_and_the_newer_word(
    old: list[EndedPrimary], new: list[EndedPrimary]
) -> None:
    merged = merge_ended(old, new)
    epochs = [e.epoch for e in merged]
    every = sorted({e.epoch for e in [*old, *new]})
    assert epochs == every[-KEEP:]  # one entry per epoch, the highest KEEP, in order
    newest = {e.epoch: e for e in old} | {e.epoch: e for e in new}
    assert all(entry == newest[entry.epoch] for entry in merged)
    assert decode_ended(encode_ended(merged)) == merged  # the record round-trips


@given(st.binary(max_size=64))
@example(b'{"version": 99, "ended": [{"epoch": 3, "node": "n1", "pid": 7}]}')
@example(b'{"ended": [{"epoch": true, "node": "n1", "pid": 7}, 5, {"epoch": 3}]}')
@example(b'{"ended": {"epoch": 3}}')
@example(b"[]")
def test_a_record_that_cannot_be_read_names_nothing_it_cannot(data: bytes) -> None:
    """Garbage, an unknown format, a bad entry: nothing (or nothing of it) is taken for
    ended, never a traceback."""
    for entry in decode_ended(data):
        assert isinstance(entry.epoch, int) and not isinstance(entry.epoch, bool)
        assert entry.epoch >= 0 and isinstance(entry.pid, int) and isinstance(entry.node, str)
    assert decode_ended(b'{"version": 99, "ended": [{"epoch": 3, "node": "n", "pid": 7}]}') == ()


class Interleaved:
    """A real client whose first read of the record is followed, before its write, by
    another agent's write (``between``): the race of two fences at once."""

    def __init__(self, client: Any, between: Any) -> None:
        self.client, self.between, self.reads = client, between, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def retry(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        answer = self.client.retry(func, *args, **kwargs)
        if func == self.client.get:
            self.reads += 1
            if self.reads == 1:
                self.between()
        return answer


def test_two_agents_writing_at_once_both_are_kept(make_client: Any, cluster: str) -> None:
    first, second = make_client(), make_client()
    assert read_ended(first, cluster) == frozenset()
    assert record_ended(first, cluster, [EndedPrimary(3, "n1", 100, "b-3")]) == (3,)
    racing = Interleaved(second, lambda: record_ended(first, cluster, [EndedPrimary(4, "n2", 200)]))
    assert record_ended(racing, cluster, [EndedPrimary(5, "n3", 300)]) == (3, 4, 5)
    assert racing.reads >= 2  # its conditional write lost once; it read again and merged
    assert read_ended(first, cluster) == frozenset({3, 4, 5})
    first.set(ClusterLayout(cluster).ended, b"not json")
    assert read_ended(first, cluster) == frozenset()  # unreadable: nothing is ended
    assert record_ended(first, cluster, [EndedPrimary(6, "n1", 101)]) == (6,)


def test_the_fence_records_an_instance_only_once_its_process_was_reaped(
    zk: Any, cluster: str
) -> None:
    supervisor = BrokerSupervisor(
        [sys.executable, "-c", "import time; time.sleep(60)"], min_delay=0.05
    ).start()
    try:
        pid = poll_until(lambda: supervisor.pid, 10)
        instance = (pid, "b-1", frozenset({7}))
        with structlog.testing.capture_logs() as logs:
            assert record_reaped(zk, cluster, "n1", instance, supervisor.reaped, "t") == ()
            assert record_reaped(zk, cluster, "n1", instance, None, "t") == ()
        unknown = [e for e in logs if e["event"].startswith("primary_ended")]
        assert [e["event"] for e in unknown] == ["primary_ended_unknown"] * 2
        assert "not reaped" in unknown[0]["reason"] and "no supervisor" in unknown[1]["reason"]
        assert read_ended(zk, cluster) == frozenset()
        assert supervisor.kill("test", pid)
        with structlog.testing.capture_logs() as logs:
            assert record_reaped(zk, cluster, "n1", instance, supervisor.reaped, "t") == (7,)
        [recorded] = [e for e in logs if e["event"].startswith("primary_ended")]
        assert recorded["event"] == "primary_ended_recorded" and recorded["epochs"] == [7]
        assert read_ended(zk, cluster) == frozenset({7})
        # an instance that never said it was primary records nothing, reaped or not
        assert (
            record_reaped(zk, cluster, "n1", (pid, "", frozenset()), supervisor.reaped, "t") == ()
        )
        assert not supervisor.reaped(2**22 + 5)  # a pid it never ran
    finally:
        supervisor.stop(timeout=5)
