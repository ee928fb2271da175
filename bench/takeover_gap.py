"""The takeover gap: from the old primary's record vanishing to the new primary's record
created (issue 26, item 1), with a real ZooKeeper and the agents' default settings.

Three nodes (agent supervising its broker; ``--session-timeout 4 --check-interval 0.5``,
the defaults) on a standalone ZooKeeper of the tests (``tickTime=100``). Each cycle waits
for a settled cluster, SIGKILLs the primary's agent and broker together (a node lost: the
record goes only when ZooKeeper expires the dead session), and times, from a watching
client, the deletion of ``/qpid-ha/<cluster>/primary`` and the creation of the next one,
and from the agents' logs the new primary's ``agent_promoted`` (its broker answered the
promotion). The killed node is started again before the next cycle.

``--source DIR`` runs the agents (and brokers) of another tree (e.g. main's, exported with
``git archive``) through PYTHONPATH: the before/after comparison of docs/agent.md.

    .venv/bin/python bench/takeover_gap.py --cycles 5 [--source /tmp/main-src]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, WatchedEvent

from common.polling import poll_until
from ha_agent.zk_layout import ClusterLayout
from tests.agent.agent_cluster import AgentCluster
from tests.zookeeper import start_zookeeper


class RecordWatch:
    """When the primary record was deleted (the watch event's arrival, wall clock) and
    created (the znode's ``ctime``, the server's wall clock: the same machine). A raw
    watch, re-armed at each event: a deletion is seen even when the next record was
    created before the watcher could read again."""

    def __init__(self, client: KazooClient, path: str) -> None:
        self.client, self.path = client, path
        self.deleted: list[float] = []
        self.created: list[float] = []
        self.lock = threading.Lock()
        self._arm()

    def _arm(self) -> None:
        stat = self.client.exists(self.path, watch=self._event)
        if stat is not None:
            with self.lock:
                if stat.ctime / 1000 not in self.created:
                    self.created.append(stat.ctime / 1000)

    def _event(self, event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            with self.lock:
                self.deleted.append(time.time())
        threading.Thread(target=self._arm, daemon=True).start()

    def gone_after(self, since: float) -> float | None:
        with self.lock:
            return next((t for t in self.deleted if t >= since), None)

    def gap_after(self, since: float) -> float | None:
        """Seconds from the first deletion after ``since`` (wall clock) to the next
        creation."""
        with self.lock:
            gone = next((t for t in self.deleted if t >= since), None)
            if gone is None:
                return None
            back = next((t for t in sorted(self.created) if t >= gone - 0.05), None)
        return None if back is None else max(0.0, back - gone)


def promoted_after(cluster: AgentCluster, since: float) -> float | None:
    """Wall-clock time of the first ``agent_promoted`` logged after ``since``."""
    times = [
        datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
        for node in cluster.nodes
        for event in node.agent_events()
        if event.get("event") == "agent_promoted"
    ]
    return min((t for t in times if t >= since), default=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--source", type=Path, help="run the agents of this tree")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="takeover-gap-"))
    server = start_zookeeper(work / "zk")
    cluster = AgentCluster(work / "nodes", server.hosts, "gap", size=3)
    if args.source is not None:
        for node in cluster.nodes:
            node.env = {"PYTHONPATH": str(args.source)}
    watcher = KazooClient(hosts=server.hosts, timeout=10.0)
    watcher.start(timeout=10)
    gaps: list[float] = []
    promoted: list[float] = []
    try:
        defaults = ("--check-interval=0.5",)  # after the harness's 0.1: the default wins
        cluster.start(*defaults, session_timeout=4.0)
        watch = RecordWatch(watcher, ClusterLayout("gap").primary)
        for cycle in range(args.cycles):
            primary = cluster.wait_settled(timeout=60)
            pid = primary.broker_pid()
            since = time.time()
            assert primary.agent is not None
            os.kill(primary.agent.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            primary.agent.wait(timeout=10)

            def taken_over(since: float = since) -> bool:
                return watch.gap_after(since) is not None

            poll_until(taken_over, 30, "a new primary record")
            gap, gone = watch.gap_after(since), watch.gone_after(since)
            assert gap is not None and gone is not None

            def logged(gone: float = gone) -> bool:
                return promoted_after(cluster, gone) is not None

            poll_until(logged, 30, "agent_promoted")
            serving = (promoted_after(cluster, gone) or gone) - gone
            gaps.append(gap)
            promoted.append(serving)
            print(
                f"cycle {cycle + 1}: record gone -> new record {gap * 1000:.0f} ms,"
                f" -> agent_promoted {serving * 1000:.0f} ms",
                flush=True,
            )
            cluster.start_node(primary, *defaults, session_timeout=4.0)
    finally:
        cluster.stop()
        watcher.stop()
        watcher.close()
        server.stop()
    for what, values in (("new record", gaps), ("agent_promoted", promoted)):
        print(
            f"record gone -> {what} over {len(values)} cycles: median"
            f" {statistics.median(values) * 1000:.0f} ms, min {min(values) * 1000:.0f},"
            f" max {max(values) * 1000:.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
