"""Issue 10, item 4: the agent's loop in this process, with its supervised real broker and the
real ZooKeeper, while a partition longer than the session timeout happens to it.

The partition is made deterministic: the loop's next cluster read first runs a hook (in the
loop thread, so the loop is blocked in "ZooKeeper" as during a cut) that expires the agent's
session on the server (:func:`tests.zookeeper.expire_session`: the session watcher fences,
the broker is killed and restarted by the supervisor) and changes what the cluster will
show. Then the loop reads the cluster and decides, with the broker view it read before.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common.polling import free_port, holds_for, poll_until
from ha_agent.agent import Agent
from ha_agent.primary_record import read_primary, write_primary
from ha_agent.promotion import BrokerView, PrimaryRecord
from ha_agent.settings import AgentSettings
from tests.agent.agent_cluster import Node, get_json
from tests.zookeeper import ZooKeeper, expire_session

pytestmark = pytest.mark.timeout(120)

SESSION_TIMEOUT = 2.0


class HookedAgent(Agent):
    """An :class:`Agent` whose next cluster read first runs :attr:`hook` in the loop thread."""

    def __init__(self, settings: AgentSettings) -> None:
        super().__init__(settings)
        self.hook: Callable[[], None] | None = None
        self.hook_done = threading.Event()
        self.hook_error: BaseException | None = None

    def _read_cluster(self, view: BrokerView | None, read_in_sync_set: bool = True) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            try:
                hook()
            except BaseException as exc:  # reported by the test's thread
                self.hook_error = exc
            finally:
                self.hook_done.set()
        super()._read_cluster(view, read_in_sync_set)


class LoopAgent:
    """One in-process agent supervising a real broker, started, its broker the primary."""

    def __init__(self, root: Path, zookeeper: ZooKeeper, cluster: str, watchdog: float) -> None:
        port = free_port()
        self.node = Node(root, "n1", port, free_port(), f"127.0.0.1:{port}")
        self.zk_hosts = zookeeper.hosts
        self.cluster = cluster
        self.agent = HookedAgent(
            AgentSettings(
                zk_hosts=zookeeper.hosts,
                cluster=cluster,
                node="n1",
                broker=f"guest/guest@127.0.0.1:{self.node.mgmt_port}",
                broker_command=shlex.join(self.node.broker_command),
                broker_log=str(self.node.dir / "qpidd.out"),
                session_timeout=SESSION_TIMEOUT,
                check_interval=0.1,
                watchdog_timeout=watchdog,
            )
        )
        self.thread = threading.Thread(target=self.agent.run, name="agent-under-test")
        self.pids: set[int] = set()

    @property
    def supervisor(self) -> Any:
        supervisor = self.agent.supervisor
        assert supervisor is not None
        return supervisor

    def broker_pid(self) -> int | None:
        pid: int | None = self.supervisor.pid
        if pid is not None:
            self.pids.add(pid)
        return pid

    def start(self) -> LoopAgent:
        self.thread.start()
        poll_until(lambda: self.agent.supervisor is not None, 10, "the supervisor")
        poll_until(lambda: self.node.state() == "active", 30, "the broker promoted")
        self.broker_pid()
        return self

    def run_in_loop(self, hook: Callable[[], None], timeout: float = 40.0) -> None:
        """Run ``hook`` at the loop's next cluster read; wait for it; re-raise its error."""
        self.agent.hook = hook
        assert self.agent.hook_done.wait(timeout), "the loop never read the cluster"
        if self.agent.hook_error is not None:
            raise self.agent.hook_error

    def stop(self) -> None:
        self.broker_pid()
        self.agent.stop()
        self.thread.join(20)
        for pid in self.pids:  # whatever the agent did not stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def make_loop_agent(
    tmp_path: Path, zookeeper: ZooKeeper, cluster: str
) -> Iterator[Callable[[float], LoopAgent]]:
    started: list[LoopAgent] = []

    def make(watchdog: float) -> LoopAgent:
        loop = LoopAgent(tmp_path / "node", zookeeper, cluster, watchdog)
        started.append(loop)
        return loop.start()

    yield make
    for loop in started:
        loop.stop()


def another_primary(zk: Any, cluster: str, epoch: int) -> None:
    """Another agent won meanwhile: ZooKeeper names qc primary (the record of ours went with
    our session)."""
    poll_until(lambda: read_primary(zk, cluster) is None, 10, "our primary record gone")
    write_primary(zk, cluster, PrimaryRecord("qc", epoch), None)


def partition(loop: LoopAgent, *, after_restart: Callable[[int], None]) -> tuple[int, int]:
    """In the loop thread: the session expires (the watcher fences: the broker is killed
    and restarted), then ``after_restart(new_pid)``; returns the restarted broker's pid and
    the supervisor's restart count then."""
    old_pid = loop.broker_pid()
    new: list[tuple[int, int]] = []

    def hook() -> None:
        expire_session(loop.agent.client, loop.zk_hosts)
        pid = poll_until(
            lambda: (p := loop.broker_pid()) is not None and p != old_pid and p,
            30,
            "the fenced broker restarted",
        )
        new.append((pid, loop.supervisor.restarts))
        after_restart(pid)
        poll_until(lambda: loop.agent.client.connected, 10, "a new ZooKeeper session")

    loop.run_in_loop(hook)
    return new[0]


def test_after_a_healed_partition_a_stale_primary_view_does_not_kill_the_restarted_broker(
    make_loop_agent: Callable[[float], LoopAgent], zk: Any, cluster: str
) -> None:
    loop = make_loop_agent(0)  # no watchdog: only the fence could kill
    # the agent records itself primary just after its broker is active: wait for it
    record = poll_until(lambda: read_primary(zk, cluster), 10, "the primary record")
    assert record is not None and record.node == "n1"
    port = loop.node.mgmt_port

    def heal(pid: int) -> None:
        poll_until(lambda: loop.node.state() == "joining", 30, "the restarted broker answers")
        another_primary(zk, cluster, record.epoch + 1)

    pid, restarts = partition(loop, after_restart=heal)
    # The loop read the broker active before the cut and ZooKeeper naming qc after it.
    # Before the fix it fenced ("ZooKeeper names qc primary") and killed the restarted
    # broker; now it reads the broker again and leaves a joining backup alone.
    holds_for(
        lambda: loop.broker_pid() == pid and loop.supervisor.restarts == restarts,
        2.0,
        "the restarted broker left alone",
    )
    assert get_json(port, "/api/status")["ha_state"] == "joining"


def test_the_watchdog_waits_for_a_broker_restarted_after_a_fence_to_answer(
    make_loop_agent: Callable[[float], LoopAgent], zk: Any, cluster: str
) -> None:
    watchdog = 1.0
    loop = make_loop_agent(watchdog)
    # the agent records itself primary just after its broker is active: wait for it
    record = poll_until(lambda: read_primary(zk, cluster), 10, "the primary record")
    assert record is not None
    frozen: list[int] = []

    def hung_at_start(pid: int) -> None:
        # The restarted broker does not answer yet (stopped at its start); the last answer
        # the loop saw is older than the watchdog timeout. Another agent won (so this one
        # neither contends nor leads: only the watchdog could kill).
        os.kill(pid, signal.SIGSTOP)
        frozen.append(pid)
        another_primary(zk, cluster, record.epoch + 1)
        last = time.monotonic()
        poll_until(lambda: time.monotonic() - last > watchdog, 5, "the watchdog timeout passed")

    try:
        pid, restarts = partition(loop, after_restart=hung_at_start)
        # Before the fix the next check found the broker silent since its predecessor's
        # last answer ("silent for 2.3 s") and killed it at once.
        holds_for(
            lambda: loop.broker_pid() == pid and loop.supervisor.restarts == restarts,
            2.0,
            "the restarted broker not killed by the watchdog",
        )
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    poll_until(lambda: loop.node.state() != "down", 30, "the restarted broker answers")
