"""The fencing epoch from ZooKeeper: strictly increasing, never handed out twice."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha_agent.epoch_counter import (
    MAX_EPOCH,
    EpochCounterError,
    next_epoch,
    raise_epoch,
    read_epoch,
)
from ha_agent.zk_layout import ClusterLayout


def test_a_new_cluster_starts_at_one_and_counts_up(zk: Any, cluster: str) -> None:
    assert read_epoch(zk, cluster) == 0
    assert [next_epoch(zk, cluster) for _ in range(3)] == [1, 2, 3]
    assert read_epoch(zk, cluster) == 3
    data, _ = zk.get(ClusterLayout(cluster).epoch)
    assert data == b"3"


def test_the_counter_survives_the_session(make_client: Any, cluster: str) -> None:
    first = make_client()
    assert next_epoch(first, cluster) == 1
    first.stop()
    assert next_epoch(make_client(), cluster) == 2


def test_minimum_jumps_past_epochs_the_brokers_know(zk: Any, cluster: str) -> None:
    assert next_epoch(zk, cluster, minimum=42) == 42
    assert next_epoch(zk, cluster, minimum=5) == 43
    with pytest.raises(ValueError, match="minimum"):
        next_epoch(zk, cluster, minimum=0)


@pytest.mark.parametrize("content", [b"", b"abc", b"-1", b"1.5", str(MAX_EPOCH + 1).encode()])
def test_a_counter_that_is_not_an_epoch_is_an_error_and_left_alone(
    zk: Any, cluster: str, content: bytes
) -> None:
    path = ClusterLayout(cluster).epoch
    zk.create(path, content, makepath=True)
    with pytest.raises(EpochCounterError, match=path):
        next_epoch(zk, cluster)
    assert zk.get(path)[0] == content


def test_an_exhausted_counter_is_an_error(zk: Any, cluster: str) -> None:
    zk.create(ClusterLayout(cluster).epoch, str(MAX_EPOCH).encode(), makepath=True)
    with pytest.raises(EpochCounterError, match="exhausted"):
        next_epoch(zk, cluster)


def test_concurrent_callers_never_get_the_same_epoch(make_client: Any, cluster: str) -> None:
    """4 sessions x 3 threads x 15 epochs, all racing from the first one (counter absent)."""
    clients = [make_client() for _ in range(4)]
    threads_per_client, per_thread = 3, 15
    start = threading.Barrier(len(clients) * threads_per_client)
    taken: list[list[int]] = []
    errors: list[BaseException] = []

    def take(client: Any) -> None:
        mine: list[int] = []
        taken.append(mine)
        try:
            start.wait()
            for _ in range(per_thread):
                mine.append(next_epoch(client, cluster))
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=take, args=(client,))
        for client in clients
        for _ in range(threads_per_client)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    everything = [epoch for mine in taken for epoch in mine]
    total = len(clients) * threads_per_client * per_thread
    assert len(everything) == total
    assert len(set(everything)) == total  # unique
    assert set(everything) == set(range(1, total + 1))  # no connection loss here: no gaps
    for mine in taken:
        assert mine == sorted(mine) and len(set(mine)) == len(mine)  # strictly increasing
    assert read_epoch(clients[0], cluster) == total


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(minimums=st.lists(st.integers(min_value=1, max_value=1000), min_size=1, max_size=8))
def test_each_epoch_is_above_the_last_and_the_minimum(zk: Any, minimums: list[int]) -> None:
    cluster = f"h-{uuid.uuid4().hex[:12]}"  # the client is shared by the examples; clusters are not
    last = 0
    for minimum in minimums:
        epoch = next_epoch(zk, cluster, minimum=minimum)
        assert epoch == max(last + 1, minimum)
        last = epoch


def test_an_epoch_a_broker_took_outside_the_counter_raises_it(zk: Any, cluster: str) -> None:
    """A backup promoted by hand (`qpid-ha --cluster-manager promote`) takes its broker's
    next epoch, which the counter never handed out; the agents then handed it out again
    (seen: the hand-promoted broker at epoch 6 stopped, the agents promoted another broker
    at 6). Its agent raises the counter to the epoch its broker reports, never lowers it."""
    for _ in range(5):
        next_epoch(zk, cluster)
    assert raise_epoch(zk, cluster, 6) == 6 and read_epoch(zk, cluster) == 6
    assert raise_epoch(zk, cluster, 4) == 6 and read_epoch(zk, cluster) == 6
    assert next_epoch(zk, cluster) == 7
    other = f"{cluster}-new"
    assert raise_epoch(zk, other, 3) == 3 and next_epoch(zk, other) == 4
