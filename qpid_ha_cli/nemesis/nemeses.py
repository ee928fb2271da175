"""The nemeses: one small class each, :meth:`inject` then :meth:`heal`, on a settled cluster.

:Status: Beta (the nemesis drill; root only)

=============  ===========================================================================
name           inject / heal
=============  ===========================================================================
kill           SIGKILL the primary's broker; wait for another primary. Heal: nothing (its
               agent restarts it as a backup)
kill-node      SIGKILL the primary's agent, then its broker (node loss); wait for another
               primary (after the agent's ZooKeeper session expires). Heal: restart the
               agent (which starts the broker)
pause          SIGSTOP the primary's broker; wait for another primary. Heal: SIGCONT
pause-node     SIGSTOP the primary's agent and broker (a frozen machine: a VM's pause, a
               long GC of the whole node); wait for another primary (after the agent's
               ZooKeeper session expires). Heal: SIGCONT the agent, wait until it fenced
               (killed) its broker, then SIGCONT the broker if it is still there
partition      nft in the primary's namespace drops everything to and from the other
               nodes and ZooKeeper (clients still reach it); wait for another primary.
               Heal: delete the rules
stale-backup   nft in one backup's namespace drops its replication link to the primary
               (TCP 5672 only: its agent still reaches ZooKeeper); wait until the primary
               released it (``ha_in_sync_committed``: its removal from the in-sync set is
               committed in ZooKeeper); publish on for a second; then kill
               the primary's node; wait for another primary (which must not be the stale
               backup). Heal: delete the rules, restart the killed agent
zk-loss        SIGKILL the ZooKeeper leader of 3; hold a session timeout; SIGSTOP the two
               left (the whole ensemble gone) for 1.5 session timeouts; SIGCONT. Heal:
               restart the killed server
zk-server      SIGKILL the ZooKeeper leader of 3 (one server lost: the other two elect a
               leader and serve on, a majority); hold two session timeouts. Heal: restart
               it. Every broker stays up: the target is no outage (issue 26)
zk-ensemble    SIGSTOP all 3 ZooKeeper servers (the whole ensemble lost) for 20 s, every
               broker up; SIGCONT. The target is no outage: the primary serves on its
               members' grants (docs/reliability.md, "Serving through a ZooKeeper outage")
=============  ===========================================================================

Every step is noted through :attr:`Context.note` (the drill's log: ``broker_sigkilled``,
``node_sigkilled``, ``broker_paused``, ``node_paused``... with ``target`` the node), which
is what the two-primary check (:mod:`~qpid_ha_cli.nemesis.checks`) reads besides the brokers' logs.
Waits poll with deadlines (:class:`Timing`); holds are the fault's length, on purpose.
"""

from __future__ import annotations

import contextlib
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.polling import PollTimeout, poll_until
from qpid_ha_cli.nemesis.cluster import Cluster
from qpid_ha_cli.nemesis.processes import AMQP_PORT, Node
from qpid_ha_cli.nemesis.topology import in_namespace

__all__ = ["ENSEMBLE_LOSS_S", "NEMESES", "Context", "Nemesis", "Timing", "nemesis_named"]


@dataclass(frozen=True)
class Timing:
    """The settings under test, and the deadlines they imply."""

    session_timeout: float
    link_heartbeat_interval: float

    @property
    def failover(self) -> float:
        """Longest wait for another primary: a session's expiry, the watchdog, slack."""
        return 3 * self.session_timeout + 2 * self.link_heartbeat_interval + 30

    @property
    def removal(self) -> float:
        """Longest wait for a silent backup's removal to be committed."""
        return 4 * self.link_heartbeat_interval + self.session_timeout + 20


@dataclass
class Context:
    """What a nemesis works on: the cluster, its primary at the start, the clock's holds."""

    cluster: Cluster
    primary: Node
    timing: Timing
    hold: Callable[[float], None]
    note: Callable[..., None]  # note(event, target=node name, **fields)
    new_primary: Node | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def await_new_primary(self) -> Node:
        self.new_primary = self.cluster.wait_new_primary(self.primary, self.timing.failover)
        self.note("new_primary_seen", target=self.new_primary.name)
        return self.new_primary

    def kill_node(self, node: Node) -> None:
        pid = node.broker_pid()
        node.kill_agent()
        node.signal_broker(signal.SIGKILL, pid)
        self.note("node_sigkilled", target=node.name, pid=pid)


class Nemesis(ABC):
    """A fault: :meth:`inject` it (and wait for its effect), then :meth:`heal` it."""

    name: ClassVar[str] = ""
    #: runs on a 3-server ZooKeeper ensemble (else one server)
    ensemble: ClassVar[bool] = False

    @abstractmethod
    def inject(self, ctx: Context) -> None:
        """Cause the fault and wait for its effect."""

    def heal(self, ctx: Context) -> None:
        """Undo what :meth:`inject` did that the cluster does not undo by itself."""


class Kill(Nemesis):
    name = "kill"

    def inject(self, ctx: Context) -> None:
        pid = ctx.primary.signal_broker(signal.SIGKILL)
        ctx.note("broker_sigkilled", target=ctx.primary.name, pid=pid)
        ctx.await_new_primary()


class KillNode(Nemesis):
    name = "kill-node"

    def inject(self, ctx: Context) -> None:
        ctx.kill_node(ctx.primary)
        ctx.await_new_primary()

    def heal(self, ctx: Context) -> None:
        if not ctx.primary.agent_alive():  # inject may have failed before the kill
            ctx.primary.start_agent()
            ctx.note("agent_restarted", target=ctx.primary.name)


class Pause(Nemesis):
    name = "pause"
    pid: int | None = None

    def inject(self, ctx: Context) -> None:
        self.pid = ctx.primary.broker_pid()
        ctx.primary.signal_broker(signal.SIGSTOP, self.pid)
        ctx.note("broker_paused", target=ctx.primary.name, pid=self.pid)
        ctx.await_new_primary()

    def heal(self, ctx: Context) -> None:
        ctx.primary.signal_broker(signal.SIGCONT, self.pid)
        ctx.note("broker_resumed", target=ctx.primary.name, pid=self.pid)


class PauseNode(Nemesis):
    name = "pause-node"
    pid: int | None = None

    def inject(self, ctx: Context) -> None:
        self.pid = ctx.primary.broker_pid()
        ctx.primary.signal_agent(signal.SIGSTOP)
        ctx.primary.signal_broker(signal.SIGSTOP, self.pid)
        ctx.note("node_paused", target=ctx.primary.name, pid=self.pid)
        ctx.await_new_primary()

    def heal(self, ctx: Context) -> None:
        ctx.primary.signal_agent(signal.SIGCONT)
        pid, node = self.pid, ctx.primary
        # the agent runs first: it finds its session gone and fences (kills) its broker,
        # stopped or not; the broker is let run only once that is done (or never happened)
        with contextlib.suppress(PollTimeout):
            poll_until(
                lambda: pid is None or not in_namespace(pid, node.host.namespace),
                ctx.timing.failover,
                f"{node.name}'s agent fencing its paused broker",
            )
        node.signal_broker(signal.SIGCONT, pid)
        ctx.note("node_resumed", target=node.name, pid=pid)


class Partition(Nemesis):
    name = "partition"

    def inject(self, ctx: Context) -> None:
        peers = [n.host.address for n in ctx.cluster.nodes if n is not ctx.primary]
        ctx.primary.host.block(peers + ctx.cluster.zk_addresses)
        ctx.note("node_partitioned", target=ctx.primary.name)
        ctx.await_new_primary()

    def heal(self, ctx: Context) -> None:
        ctx.primary.host.unblock()
        ctx.note("partition_healed", target=ctx.primary.name)


class StaleBackup(Nemesis):
    name = "stale-backup"
    stale: Node | None = None

    def inject(self, ctx: Context) -> None:
        stale = self.stale = next(n for n in ctx.cluster.nodes if n is not ctx.primary)
        # its id, asked until it answers: a loaded machine lets a GET time out, and an id
        # of None would never be found released
        stale_id = str(
            poll_until(
                lambda: (stale.get("/api/ha?queues=summary") or {}).get("broker_id"),
                ctx.timing.removal,
                f"{stale.name}'s broker id",
            )
        )
        stale.host.block([ctx.primary.host.address], port=AMQP_PORT)
        cut_at = time.monotonic()
        ctx.note("link_cut", target=stale.name, primary=ctx.primary.name)

        def removed() -> bool:  # the primary released its guards: the removal committed
            return any(
                stale_id in (e.get("released") or ())
                for e in ctx.primary.broker_events("ha_in_sync_committed")
            )

        def why() -> str:  # what the primary said, for a wait that fails
            said = [e.get("released") for e in ctx.primary.broker_events("ha_in_sync_committed")]
            return (
                f"{stale.name}'s removal from the in-sync set (broker id {stale_id}; the"
                f" primary released {said[-3:]}, its /api/ha in_sync"
                f" {(ctx.primary.get('/api/ha') or {}).get('in_sync')})"
            )

        poll_until(removed, ctx.timing.removal, why)
        ctx.facts["removal_s"] = round(time.monotonic() - cut_at, 3)
        ctx.note("stale_removed", target=stale.name, after_s=ctx.facts["removal_s"])
        ctx.hold(1.0)  # publish on with the other backup only
        ctx.kill_node(ctx.primary)
        new = ctx.await_new_primary()
        ctx.facts["stale_backup"] = stale.name
        ctx.facts["stale_promoted"] = new is stale

    def heal(self, ctx: Context) -> None:
        if self.stale is not None:
            self.stale.host.unblock()
            ctx.note("link_healed", target=self.stale.name)
        if not ctx.primary.agent_alive():  # inject may have failed before the kill
            ctx.primary.start_agent()
            ctx.note("agent_restarted", target=ctx.primary.name)


def zookeeper_leader(ctx: Context, name: str) -> Any:
    """The ensemble's leader (polled: an election may be under way). :raises ValueError:
    the cluster runs one server."""
    servers = ctx.cluster.zookeepers
    if len(servers) < 3:
        raise ValueError(f"{name} needs the 3-server ensemble")
    return poll_until(
        lambda: next((z for z in servers if z.alive() and z.mode() == "leader"), None),
        30,
        "a ZooKeeper leader",
    )


class ZkLoss(Nemesis):
    name = "zk-loss"
    ensemble = True
    killed: Any = None

    def inject(self, ctx: Context) -> None:
        servers = ctx.cluster.zookeepers
        leader = self.killed = zookeeper_leader(ctx, self.name)
        leader.kill()
        ctx.note("zk_server_killed", target=leader.host.name)
        ctx.hold(ctx.timing.session_timeout)
        rest = [z for z in servers if z is not leader]
        for server in rest:
            server.signal(signal.SIGSTOP)
        ctx.note("zk_ensemble_paused", targets=[z.host.name for z in rest])
        ctx.hold(1.5 * ctx.timing.session_timeout)
        for server in rest:
            server.signal(signal.SIGCONT)
        ctx.note("zk_ensemble_resumed", targets=[z.host.name for z in rest])

    def heal(self, ctx: Context) -> None:
        if self.killed is not None:
            self.killed.start()
            ctx.note("zk_server_restarted", target=self.killed.host.name)


class ZkServer(Nemesis):
    name = "zk-server"
    ensemble = True
    killed: Any = None

    def inject(self, ctx: Context) -> None:
        leader = self.killed = zookeeper_leader(ctx, self.name)
        leader.kill()
        ctx.note("zk_server_killed", target=leader.host.name)
        ctx.hold(2 * ctx.timing.session_timeout)

    def heal(self, ctx: Context) -> None:
        if self.killed is not None:
            self.killed.start()
            ctx.note("zk_server_restarted", target=self.killed.host.name)


#: how long ``zk-ensemble`` keeps the whole ensemble stopped (issue 26's target: 20 s)
ENSEMBLE_LOSS_S = 20.0


class ZkEnsemble(Nemesis):
    name = "zk-ensemble"
    ensemble = True
    stopped: tuple[Any, ...] = ()

    def inject(self, ctx: Context) -> None:
        zookeeper_leader(ctx, self.name)  # the ensemble serves before it goes
        self.stopped = tuple(ctx.cluster.zookeepers)
        for server in self.stopped:
            server.signal(signal.SIGSTOP)
        ctx.note("zk_ensemble_paused", targets=[z.host.name for z in self.stopped])
        ctx.hold(ENSEMBLE_LOSS_S)

    def heal(self, ctx: Context) -> None:
        for server in self.stopped:
            server.signal(signal.SIGCONT)
        if self.stopped:
            ctx.note("zk_ensemble_resumed", targets=[z.host.name for z in self.stopped])


NEMESES: dict[str, type[Nemesis]] = {
    n.name: n
    for n in (
        Kill,
        KillNode,
        Pause,
        PauseNode,
        Partition,
        StaleBackup,
        ZkLoss,
        ZkServer,
        ZkEnsemble,
    )
}


def nemesis_named(name: str) -> Nemesis:
    """A fresh nemesis. :raises ValueError: naming the known ones."""
    try:
        return NEMESES[name]()
    except KeyError:
        raise ValueError(f"unknown nemesis {name!r}: expected {', '.join(NEMESES)}") from None
