"""Model check of promotions (issue 26, item 1): the real promotion, in-sync and takeover
code over a model of ZooKeeper's semantics (:mod:`tests.agent.zk_model`).

Three agents, each beside a modelled broker, in any interleaving hypothesis finds:
publishes (a message lost on its way to a backup), backups catching up, the primary's agent
keeping the in-sync set (the real :class:`~ha_agent.in_sync_keeper.InSyncKeeper`:
removals are multi-ops checked against the epoch counter and the set's version), claims
(the real :meth:`~ha_agent.in_sync_keeper.InSyncKeeper.take`: eligibility, the agent's
takeover rule :func:`~ha_agent.takeover.default_rule` (the old record gone, or the
candidate's own counted grant lapsed), the promotion's multi-op) and the broker's
promotion as a separate step after it, brokers and whole nodes crashing, sessions expiring
(a partition: the session guard fenced the broker first), a connection lost right after a
commit (the writer does not know), an empty set, a cascade of fenced primaries, a hand-run
``qpid-ha in-sync --commit`` of the set ZooKeeper holds, and optionally one agent of
release 0.1.0 (ZooKeeper format 1: it promotes under kazoo's lock with separate writes, the
epoch first, and cannot read a format-2 set).

The brokers are modelled, not run: a primary confirms a message once every backup it
guards has it (the guarded backups include every member of the committed set: a backup
leaves the guard only once its removal is committed); a backup that missed one is pending
removal, and the messages waiting for it are confirmed when the removal is committed.

The member lease (issue 26): a primary asks the backups linked to it for grants; a member
of its lease set (the set it was promoted with, then each committed one) grants it
(needed), another is only asked (its grant for that epoch no longer counted). A grant
lapses at any step (requests lost, the node gone); the primary's count ends with the
backup's promise (the worst case the drift argument allows: tests/ha/test_member_lease.py
checks the timing). A primary *serves* (confirms, counts in the invariant) only while
every member of its lease set it has asked holds a live grant to its epoch (none asked, or
an empty set: its agent's ZooKeeper lease, as before) and, once promoted, only after every
grant it gave an older epoch has lapsed. A restarted broker forgets its grants (it has a
new broker id, so no set names it). The candidate's takeover rule reads its own broker's
grants as ``GET /grant`` answers them.

ZooKeeper gone for a while (issue 26, item 2): every primary's cluster manager's lease runs
out; a primary whose lease set is non-empty and every member of it (asked or not) grants
serves on those grants, and fences at the first lapse; any other fences as before. A
primary that fenced itself serves no more but answers "active" (``fenced``) until it exits,
a step of its own: its agent's claim goes through the real eligibility meanwhile, and
never takes an epoch for it. When
ZooKeeper serves again it may have expired every session (each agent starts a new one, and
the primary's agent takes its record back with the real :func:`ha_agent.reclaim.reclaim`
if nothing changed) or kept them (the primary's agent renews its lease).

A broker kill without the grant's wait (issue 26, item 5): an agent's fence records the
epochs its killed (or dead) broker instance had answered it was primary of as ended, with
the real :func:`~ha_agent.ended.record_reaped` (the instance is gone: the model's kill is
its reap), and a promotion reads them with the real :func:`~ha_agent.ended.read_ended`; the
promoted broker's wait then skips its grants to those epochs.

Invariants: no two brokers serve at once, no epoch is promoted twice, and a new primary's
store holds every confirmed message. ``PROMOTION_MODEL_EXAMPLES`` runs it longer by hand
(``make test`` runs a few seconds of it).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError

from ha_agent.ended import read_ended, record_reaped
from ha_agent.epoch_counter import next_epoch
from ha_agent.in_sync import InSyncRecordError, read_in_sync, write_in_sync
from ha_agent.in_sync_keeper import InSyncKeeper, PromotionRequest, Taken
from ha_agent.membership import Member, read_members
from ha_agent.primary_record import delete_primary, read_primary, write_primary
from ha_agent.promotion import (
    BrokerInSync,
    BrokerView,
    ClusterView,
    InSyncRecord,
    PrimaryRecord,
    eligibility,
    promotion_in_sync,
)
from ha_agent.promotion_txn import needs_lock
from ha_agent.reclaim import reclaim
from ha_agent.takeover import GrantView, default_rule
from ha_agent.zk_layout import ClusterLayout
from tests.agent.zk_model import ModelClient, ModelZooKeeper

CLUSTER = "model"
NODES = ("n1", "n2", "n3")
LAYOUT = ClusterLayout(CLUSTER)
EXAMPLES = int(os.environ.get("PROMOTION_MODEL_EXAMPLES", "40"))
STEPS = int(os.environ.get("PROMOTION_MODEL_STEPS", "100"))

nodes = st.sampled_from(NODES)


def note(text: str) -> None:
    """A hypothesis event (statistics); nothing when a test drives the model by hand."""
    with contextlib.suppress(InvalidArgument):
        event(text)


@dataclass
class Broker:
    node: str
    starts: int = 1
    state: str = "joining"  # joining, ready, active (the primary), down
    epoch: int = 0
    store: set[int] = field(default_factory=set)
    #: a primary's: the backups it guards (broker ids), those pending removal, and the
    #: messages it has not confirmed yet
    guarded: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)
    held: set[int] = field(default_factory=set)
    #: a backup's: the node of the primary it is in sync with
    synced_to: str | None = None
    #: a primary's: whose member-lease grants it needs (broker ids)
    lease_set: set[str] = field(default_factory=set)
    #: a primary's: the members it sent a needed request (only they count)
    asked: set[str] = field(default_factory=set)
    #: a primary's: the committed set its agent told it (epoch 0: none since promoted)
    told: tuple[int, frozenset[str]] = (0, frozenset())
    #: a backup's member-lease grants, epoch -> live; the epochs no longer counted
    grants: dict[int, bool] = field(default_factory=dict)
    unneeded: set[int] = field(default_factory=set)
    #: a primary's: its cluster manager's lease holds (False: ZooKeeper was gone past it,
    #: it serves on its members' grants alone)
    leased: bool = True
    #: a primary that fenced itself: it serves no more and stops (still "active" until it
    #: exits: ``fenced_broker_exits``), as the real broker answers while it stops
    fenced: bool = False
    #: a primary's: the older epochs its promotion was told ended (their primaries'
    #: processes reaped: ha_agent.ended); its grants to them are not waited out
    ended: frozenset[int] = frozenset()

    @property
    def broker_id(self) -> str:
        return f"{self.node}-{self.starts}"

    @property
    def store_id(self) -> str:
        return f"store-{self.node}"

    def restart(self) -> None:
        self.starts += 1
        self.state, self.synced_to = "joining", None
        self.guarded, self.pending, self.held = set(), set(), set()
        self.lease_set, self.grants, self.unneeded = set(), {}, set()
        self.told, self.asked = (0, frozenset()), set()
        self.leased, self.fenced, self.ended = True, False, frozenset()

    def grant_answer(self, epoch: int) -> GrantView | None:
        """``GET /grant?epoch=N`` (None: the broker is down)."""
        if self.state == "down":
            return None
        live = any(up for e, up in self.grants.items() if e < epoch)
        needed = frozenset(e for e in self.grants if e not in self.unneeded)
        return GrantView(not live, 1.0 if live else 0.0, needed)

    def view(self) -> BrokerView | None:
        if self.state == "down":
            return None
        in_sync = None
        if self.state == "active":
            in_sync = BrokerInSync(
                frozenset(self.guarded - self.pending),
                frozenset(self.pending),
                committed=self.told,
            )
        return BrokerView(
            self.state,
            epoch=self.epoch,
            replication_position=len(self.store),
            store_status="clean",
            url=f"{self.node}:5672",
            broker_id=self.broker_id,
            store_id=self.store_id,
            in_sync=in_sync,
            on_grants=self.state == "active" and bool(self.lease_set) and not self.fenced,
            fenced=self.fenced,
        )


class BrokerPort:
    """What the keeper posts to its broker: a committed removal releases held confirms."""

    def __init__(self, model: PromotionModel, broker: Broker) -> None:
        self.model, self.broker = model, broker

    def commit_in_sync(self, epoch: int, members: list[str]) -> dict[str, Any]:
        broker = self.broker
        released = sorted(broker.pending - set(members)) if epoch == broker.epoch else []
        broker.guarded -= set(released)
        broker.pending -= set(released)
        if epoch == broker.epoch:
            broker.lease_set = set(members) - {broker.broker_id}
            broker.told = (epoch, frozenset(members))
        self.model.settle(broker)
        return {"released": released, "pending_removal": sorted(broker.pending)}


@dataclass
class Agent:
    node: str
    old: bool = False  # release 0.1.0: ZooKeeper format 1, the lock, separate writes
    alive: bool = True  # False: its node was lost; its session lives until it expires
    client: ModelClient | None = None
    keeper: InSyncKeeper | None = None
    promoted: int | None = None  # the epoch it promoted its broker with
    locked: bool = False
    taken: Taken | None = None  # committed in ZooKeeper, the broker not promoted yet
    old_epoch: int | None = None  # 0.1.0: the epoch taken, the set not written yet
    reclaim: int | None = None  # its session expired while its broker served on grants
    #: the epochs each broker instance (broker id) answered it was primary of
    seen: dict[str, set[int]] = field(default_factory=dict)


class PromotionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.zk = ModelZooKeeper()
        self.brokers = {n: Broker(n) for n in NODES}
        self.agents = {n: Agent(n) for n in NODES}
        self.confirmed: set[int] = set()
        self.next_message = 0
        self.epochs: list[int] = []

    @initialize(old=st.sampled_from([None, *NODES]))
    def start(self, old: str | None) -> None:
        for node in NODES:
            self.agents[node].old = node == old
            self.start_agent(node)

    # -- helpers ----------------------------------------------------------------------
    def start_agent(self, node: str) -> None:
        agent = self.agents[node]
        agent.alive, agent.client = True, self.zk.connect()
        agent.keeper = InSyncKeeper(
            agent.client,
            CLUSTER,
            BrokerPort(self, self.brokers[node]),  # type: ignore[arg-type]
            node,
        )
        agent.promoted, agent.locked, agent.taken, agent.old_epoch = None, False, None, None
        with contextlib.suppress(KazooException):  # its next check publishes it
            self.publish_member(node)

    def live(self, node: str) -> bool:
        agent = self.agents[node]
        client = agent.client
        return agent.alive and client is not None and client.session in self.zk.sessions

    def primaries(self) -> list[Broker]:
        """The active brokers that have not fenced themselves."""
        return [b for b in self.brokers.values() if b.state == "active" and not b.fenced]

    def serves(self, primary: Broker) -> bool:
        """Active, every member of its lease set granting its epoch, its own older grants
        lapsed (the member lease; an empty set: its agent's lease, as before)."""
        if primary.state != "active" or primary.fenced:
            return False
        if any(
            up for e, up in primary.grants.items() if e < primary.epoch and e not in primary.ended
        ):
            return False  # a promotion's wait (not for a primary whose process ended)
        by_id = {b.broker_id: b for b in self.brokers.values()}
        # a member never asked holds none; past its manager's lease every member must grant
        needed = primary.lease_set if not primary.leased else primary.lease_set & primary.asked
        if not primary.leased and not needed:
            return False  # an empty set: fenced at the lease's end
        for member in needed:
            backup = by_id.get(member)
            if backup is None or not backup.grants.get(primary.epoch, False):
                return False
        return True

    def on_grants(self, primary: Broker) -> bool:
        """Every member of a non-empty lease set grants (asked or not)."""
        by_id = {b.broker_id: b for b in self.brokers.values()}
        return bool(primary.lease_set) and all(
            (backup := by_id.get(m)) is not None and backup.grants.get(primary.epoch, False)
            for m in primary.lease_set
        )

    def lapses_fence(self) -> None:
        """A primary past its manager's lease fences at the first lapse (its role's Tick):
        it stops serving at once and exits later (``fenced_broker_exits``)."""
        for primary in self.primaries():
            if not primary.leased and not self.on_grants(primary):
                primary.fenced = True
                note("a primary fenced itself at a lapse")

    def serving(self) -> list[Broker]:
        return [b for b in self.primaries() if self.serves(b)]

    def publish_member(self, node: str) -> None:
        agent, broker = self.agents[node], self.brokers[node]
        assert agent.client is not None
        view = broker.view()
        member = Member(
            node,
            f"{node}:5672",
            ha_state="down" if view is None else view.ha_state,
            epoch=broker.epoch,
            store_status="clean",
            replication_position=len(broker.store),
            broker_id="" if view is None else broker.broker_id,
            store_id=broker.store_id,
            zookeeper_formats="1-1" if agent.old else "1-2",
        )
        path = LAYOUT.member(node)
        if agent.client.exists(path) is None:
            agent.client.create(path, member.to_json(), ephemeral=True, makepath=True)
        else:
            agent.client.set(path, member.to_json())

    def cluster_view(self, node: str) -> ClusterView:
        agent = self.agents[node]
        assert agent.client is not None and agent.keeper is not None
        read = agent.keeper.read()
        return ClusterView(
            node=node,
            broker=self.brokers[node].view(),
            members=read_members(agent.client, CLUSTER),
            primary=read_primary(agent.client, CLUSTER),
            in_sync=None if read is None else read.record,
            in_sync_error=agent.keeper.error,
            cluster_size=2,
        )

    def settle(self, primary: Broker) -> None:
        """Confirm the held messages every guarded backup now has (while it serves)."""
        if not self.serves(primary):
            return
        holders = [b for b in self.brokers.values() if b.broker_id in primary.guarded]
        for message in sorted(primary.held):
            if len(holders) == len(primary.guarded) and all(message in b.store for b in holders):
                primary.held.discard(message)
                self.confirmed.add(message)

    def resign(self, node: str) -> None:
        agent = self.agents[node]
        if agent.client is not None and self.live(node):
            with contextlib.suppress(KazooException):
                delete_primary(agent.client, CLUSTER)
            self.zk.unlock(agent.client.session)
        agent.promoted, agent.locked, agent.taken, agent.old_epoch = None, False, None, None

    def fence(self, node: str) -> None:
        """The agent kills its broker (it restarts as a joining backup), records the epochs
        that instance said it was primary of as ended (the real code: its process is
        reaped), then resigns."""
        broker, agent = self.brokers[node], self.agents[node]
        instance = broker.broker_id
        if agent.client is not None and self.live(node) and not agent.old:  # 0.1.0: none
            epochs = frozenset(agent.seen.get(instance, set()))
            if record_reaped(
                agent.client, CLUSTER, node, (broker.starts, instance, epochs),
                lambda pid, timeout: True, "fenced",
            ):  # fmt: skip
                note("an ended primary recorded")
        if broker.state != "down":
            broker.restart()
        self.resign(node)

    def saw(self, node: str) -> None:
        """The agent's check read its broker: an instance answering as primary is noted."""
        view = self.brokers[node].view()
        if view is not None and view.ha_state == "active":
            self.agents[node].seen.setdefault(view.broker_id, set()).add(view.epoch)

    def promote_broker(self, node: str, epoch: int, expect: list[str]) -> None:
        broker = self.brokers[node]
        assert self.confirmed <= broker.store, (
            f"{node} promoted at epoch {epoch} lacks confirmed"
            f" {sorted(self.confirmed - broker.store)}"
        )
        assert epoch not in self.epochs, f"epoch {epoch} promoted twice"
        self.epochs.append(epoch)
        if self.confirmed and len(self.epochs) > 1:
            note("a fail-over with confirmed messages")
        if len(self.epochs) > 2:
            note("a cascade: a third primary")
        broker.state, broker.epoch, broker.synced_to = "active", epoch, None
        broker.leased, broker.ended = True, frozenset()
        live = {b.broker_id for b in self.brokers.values() if b.state in ("ready", "joining")}
        broker.guarded, broker.held = set(expect), set()
        broker.lease_set, broker.told, broker.asked = set(expect), (0, frozenset()), set()
        broker.pending = broker.guarded - live  # awaited, gone: held for them
        for other in self.brokers.values():
            if other is broker or other.state in ("down", "active"):
                continue
            if other.broker_id in broker.guarded:
                other.store = set(broker.store)  # it follows the new primary, in sync
                other.state, other.synced_to, other.epoch = "ready", node, epoch
            else:
                other.state, other.synced_to = "joining", None

    # -- rules --------------------------------------------------------------------------
    @precondition(lambda self: bool(self.serving()))
    @rule(lost=st.sets(nodes))
    def publish(self, lost: set[str]) -> None:
        for primary in self.serving():
            message, self.next_message = self.next_message, self.next_message + 1
            primary.store.add(message)
            by_id = {b.broker_id: b for b in self.brokers.values()}
            for backup_id in sorted(primary.guarded - primary.pending):
                backup = by_id.get(backup_id)
                synced = backup is not None and backup.synced_to == primary.node
                if (
                    synced
                    and backup is not None
                    and backup.state == "ready"
                    and backup.node not in lost
                ):
                    backup.store.add(message)
                    continue
                primary.pending.add(backup_id)  # behind or gone: its removal waits
            primary.held.add(message)
            self.settle(primary)

    @rule(granting=st.sets(nodes))
    def lease_requests(self, granting: set[str]) -> None:
        """Each primary asks the backups linked to it (those in ``granting`` answer): a
        member of its lease set grants, another is only asked. A backup whose broker was
        promoted grants no more (it is not linked)."""
        for primary in self.primaries():
            for backup in self.brokers.values():
                linked = backup.state == "ready" and backup.synced_to == primary.node
                if linked and backup.broker_id in primary.lease_set:
                    primary.asked.add(backup.broker_id)  # sent: counted from now on
                if not linked or backup.node not in granting:
                    continue
                if backup.broker_id in primary.lease_set:
                    backup.grants[primary.epoch] = True
                    backup.unneeded.discard(primary.epoch)
                elif primary.epoch in backup.grants:
                    backup.unneeded.add(primary.epoch)
            self.settle(primary)

    @rule(node=nodes)
    def grants_lapse(self, node: str) -> None:
        """Time passes without requests reaching ``node``: its grants lapse."""
        backup = self.brokers[node]
        backup.grants = dict.fromkeys(backup.grants, False)
        if any(b.grants for b in self.brokers.values()):
            note("a grant lapsed")
        self.lapses_fence()
        for primary in self.primaries():
            self.settle(primary)

    @rule()
    def primary_cut_off(self) -> None:
        """The primary's links are cut (its node alive, its agent too, not checking yet):
        every grant lapses."""
        for node in NODES:
            self.grants_lapse(node)

    def catch_up(self, node: str) -> None:
        backup = self.brokers[node]
        for primary in self.primaries():
            if backup.state in ("joining", "ready") and backup.broker_id not in primary.guarded:
                backup.store = set(primary.store)
                backup.state, backup.synced_to, backup.epoch = "ready", primary.node, primary.epoch
                primary.guarded.add(backup.broker_id)

    @rule(order=st.permutations(NODES), promote=st.booleans())
    def every_agent_takes_a_turn(self, order: list[str], promote: bool) -> None:
        """The agents' usual turn: each one's check, each one's claim, the brokers whose
        promotion committed promoted (or not yet), the backups catching up, and a lease's
        time: every grant lapses unless renewed, every linked backup answering its
        primary's lease requests."""
        for node in order:
            self.check(node)
        for node in order:
            self.claim(node)
        for node in order:
            if promote and self.agents[node].taken is not None:
                self.promote(node)
            self.catch_up(node)
        for broker in self.brokers.values():  # a lease's time passes: only renewed grants
            broker.grants = dict.fromkeys(broker.grants, False)
        self.lease_requests(set(NODES))
        self.lapses_fence()

    def check(self, node: str) -> None:
        """The agent's check: its member record, the set kept on the primary's node, and a
        primary broker that may no longer be primary fenced (the real eligibility)."""
        agent, broker = self.agents[node], self.brokers[node]
        if not self.live(node):
            return
        if agent.reclaim is not None:
            self.reclaim(node)  # the real agent's check begins with it
        assert agent.client is not None and agent.keeper is not None
        try:
            self.publish_member(node)
            self.saw(node)
            view = broker.view()
            if agent.promoted is not None and (view is None or not view.is_primary):
                self.fence(node)  # its broker died or restarted: the record goes
                return
            if view is not None and view.is_primary and agent.promoted is not None:
                if agent.old and self.set_format(agent) > 1:
                    pass  # 0.1.0 cannot read the set
                else:
                    agent.keeper.keep(view, agent.promoted, read_members(agent.client, CLUSTER))
            cluster_view = self.cluster_view(node)
        except KazooException:
            return
        if view is not None and view.is_primary and not eligibility(cluster_view)[0]:
            self.fence(node)

    def set_format(self, agent: Agent) -> int:
        assert agent.client is not None
        try:
            read = read_in_sync(agent.client, CLUSTER)
        except InSyncRecordError:
            return 0
        return 1 if read is None else read.format

    def claim(self, node: str) -> None:
        """An agent of this code: its claim, then the promotion's multi-op."""
        agent, broker = self.agents[node], self.brokers[node]
        if agent.old or not self.live(node) or agent.promoted or agent.taken:
            return
        if broker.state == "down" or (broker.state == "active" and not broker.fenced):
            return  # a fenced one answers "active" while it stops: the real rule decides
        assert agent.client is not None and agent.keeper is not None
        try:
            cluster_view = self.cluster_view(node)
            if not eligibility(cluster_view)[0]:
                return
            if needs_lock(agent.keeper.in_sync):
                if not self.zk.try_lock(agent.client.session):
                    return
                agent.locked = True
            rule_ = default_rule(node, broker.grant_answer)
            request = PromotionRequest(rule_, agent.locked, None)
            view = broker.view()
            assert view is not None
            agent.taken = agent.keeper.take(view, cluster_view, request)
        except KazooException:
            agent.taken = None
        # issue 26: an epoch taken for a fenced broker named its store alone (an empty set:
        # its members' records were gone after ZooKeeper's outage), then a minute of churn
        assert agent.taken is None or not broker.fenced, (
            f"{node} took an epoch for its fenced broker"
        )
        if agent.taken is None:
            self.resign(node)
        else:
            note("promoted with the lock" if agent.locked else "promoted without the lock")
            if any(b.state == "active" for b in self.brokers.values()):
                note("taken over by a lapsed grant, the old primary still active")

    def promote(self, node: str) -> None:
        """The broker's promotion, after the multi-op committed (a separate step)."""
        agent, broker = self.agents[node], self.brokers[node]
        if agent.taken is None or not self.live(node):
            return
        taken, agent.taken = agent.taken, None
        if broker.state == "down":
            self.resign(node)  # refused: the record goes
            return
        try:
            ended = frozenset(e for e in read_ended(agent.client, CLUSTER) if e < taken.epoch)
        except KazooException:
            ended = frozenset()
        self.promote_broker(node, taken.epoch, taken.expect)
        broker.ended = ended
        if any(up for e, up in broker.grants.items() if e in ended):
            note("a promotion did not wait out a grant to an ended primary")
        agent.promoted = taken.epoch
        self.saw(node)  # the promotion's answer names the instance

    def old_agent_promotes(self, _node: str) -> None:
        """A step of an agent of 0.1.0: the lock; the epoch; the set (format 1, conditional); the
        broker promoted; then the primary record (NodeExists: it fences its broker)."""
        node = next((n for n in NODES if self.agents[n].old), NODES[0])
        agent, broker = self.agents[node], self.brokers[node]
        if not agent.old or not self.live(node) or agent.promoted or broker.state == "down":
            return
        client = agent.client
        assert client is not None and agent.keeper is not None
        try:
            if agent.old_epoch is None:
                if broker.state == "active" or not self.zk.try_lock(client.session):
                    return
                agent.locked = True
                if self.set_format(agent) != 1 or not eligibility(self.cluster_view(node))[0]:
                    self.resign(node)
                    return
                agent.old_epoch = next_epoch(client, CLUSTER, minimum=broker.epoch + 1)
                return
            read = read_in_sync(client, CLUSTER)
            if read is not None and read.format != 1:
                self.resign(node)
                return
            old = None if read is None else read.record
            view = broker.view()
            assert view is not None
            record = InSyncRecord(
                agent.old_epoch, promotion_in_sync(old, view), broker.store_id, node
            )
            write_in_sync(client, CLUSTER, record, read, 1)
            epoch = agent.old_epoch
            self.promote_broker(node, epoch, sorted(record.broker_ids))
            agent.promoted, agent.old_epoch = epoch, None
            note("an agent of 0.1.0 promoted its broker")
            write_primary(client, CLUSTER, PrimaryRecord(node, epoch, view.url))
            note("an agent of 0.1.0 promoted")
        except (BadVersionError, NodeExistsError, InSyncRecordError):
            if broker.state == "active":
                self.fence(node)  # promoted, not recorded: 0.1.0 fences it
            else:
                self.resign(node)
        except KazooException:
            pass

    def hand_commit(self, _node: str) -> None:
        """``qpid-ha in-sync --commit --members <the set ZooKeeper holds>`` on the primary."""
        read = read_in_sync(self.zk.connect(), CLUSTER)
        for broker in self.primaries():
            if read is not None and read.record.epoch == broker.epoch:
                members = sorted(read.record.broker_ids)
                BrokerPort(self, broker).commit_in_sync(broker.epoch, members)

    def crash_broker(self, node: str) -> None:
        self.brokers[node].state = "down"

    def fenced_broker_exits(self, node: str) -> None:
        """A broker that fenced itself exits; its supervisor starts it again, joining."""
        if self.brokers[node].fenced:
            self.brokers[node].restart()

    def restart_broker(self, node: str) -> None:
        if self.brokers[node].state == "down":
            self.brokers[node].restart()

    def crash_node(self, node: str) -> None:
        """Agent and broker gone; the agent's session lives until it expires."""
        self.brokers[node].state = "down"
        self.agents[node].alive = False

    def expire_session(self, node: str) -> None:
        """ZooKeeper expires the agent's session (its node was lost, or it was cut off: the
        session guard fenced its broker before, the timing argument), then the agent (and
        a lost node's broker) start again on a new session."""
        agent, broker = self.agents[node], self.brokers[node]
        assert agent.client is not None
        if broker.state == "active":
            broker.restart()
        self.zk.expire(agent.client.session)
        if broker.state == "down" and not agent.alive:
            broker.restart()
        self.start_agent(node)

    @rule(expired=st.booleans())
    def zookeeper_gone_for_a_while(self, expired: bool) -> None:
        """ZooKeeper serves nobody for longer than the agents' lease (issue 26, item 2):
        each primary serves on its members' grants or fences; then ZooKeeper serves again,
        having expired every session (``expired``: each agent on a new session, the
        primary's agent to take its record back) or kept them (its agent renews)."""
        for primary in self.primaries():
            primary.leased = False
        self.lapses_fence()
        if any(not b.leased for b in self.primaries()):
            note("a primary served on its members' grants through a ZooKeeper outage")
        for node in NODES:
            agent, broker = self.agents[node], self.brokers[node]
            if not expired:
                if agent.promoted is not None and self.live(node) and broker.state == "active":
                    broker.leased = True  # its agent's session lives: it renews
                continue
            if not agent.alive or agent.client is None:
                continue
            promoted = agent.promoted
            self.zk.expire(agent.client.session)
            self.start_agent(node)
            view = broker.view()
            if promoted is not None and view is not None and view.on_grants:
                agent.reclaim = promoted

    def reclaim(self, node: str) -> None:
        """The agent whose session expired takes its primary record back (the real rule)."""
        agent, broker = self.agents[node], self.brokers[node]
        epoch, agent.reclaim = agent.reclaim, None
        if epoch is None or not self.live(node) or agent.promoted or agent.taken:
            return
        assert agent.client is not None
        view = broker.view()
        try:
            why = None if view is None else reclaim(agent.client, CLUSTER, node, None, view, epoch)
        except KazooException:
            return
        if view is not None and why is None:
            agent.promoted = epoch
            broker.leased = True
            note("the primary's record taken back after ZooKeeper's outage")

    @rule()
    def primary_broker_killed(self) -> None:
        """The drill's broker kill: the serving primary's broker SIGKILLed, its agent alive
        (its next check fences: the ended record; the next promotion reads it)."""
        for primary in self.serving():
            primary.state = "down"

    @rule()
    def lose_the_next_answer(self) -> None:
        self.zk.lose_next = True

    @rule(
        step=st.sampled_from(
            ["check", "claim", "promote", "old_agent_promotes", "hand_commit", "reclaim"]
        ),
        node=nodes,
    )
    def one_step(self, step: str, node: str) -> None:
        """One agent's step alone: any interleaving of checks, claims and promotions."""
        getattr(self, step)(node)

    @rule(
        fault=st.sampled_from(
            [
                "crash_broker",
                "restart_broker",
                "crash_node",
                "expire_session",
                "fenced_broker_exits",
            ]
        ),
        node=nodes,
    )
    def fault(self, fault: str, node: str) -> None:
        """A broker killed or restarted, a node lost, a session expired, a fenced broker
        gone at last."""
        getattr(self, fault)(node)

    # -- invariants --------------------------------------------------------------------
    @invariant()
    def never_two_primaries(self) -> None:
        serving = [b.node for b in self.serving()]
        assert len(serving) <= 1, f"two primaries serve at once: {serving}"


PromotionModel.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_promotion_model = PromotionModel.TestCase
