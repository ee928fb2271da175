"""The replication path with a client, transactions and a fail-over, under hypothesis (issue
24, item 4).

The primary is a real sans-I/O AMQP connection (:class:`tests.amqp.helpers.Client`) on a
virtual host with the replication contract, promoted by the real role machine
(:class:`~broker.ha.role.HaRole` through :class:`tests.ha.role_driver.RoleDriver`), serving
its real :class:`~broker.ha.streams.PrimaryStreams` (as the barrier of declare-ok, purge-ok,
commit-ok, and the queue guards that hold confirms) to an in-memory backup link
(:class:`tests.ha.replication_link.Link`: the real replicators and wire codecs). The client
has a confirm channel and a transactional channel.

Hypothesis draws declares (queues and exchanges), binds and unbinds of queues and of
exchanges to exchanges, deletes, purges, confirmed publishes, gets settled later by ack,
reject or nack (requeued or not), and transactions (publishes and gets with acks, commit or
rollback); after each step the link settles (or, drawn, lags: it applies only some of what
was sent). After every settled step:

- the backup holds what the primary replicates: queues, exchanges, bindings (exchange to
  exchange among them), each level-``all`` queue's messages in order;
- every confirm that should come came: each publish of the confirm channel is acknowledged,
  each commit has its commit-ok.

A fail-over step promotes the backup while its link lags (its staged transactions dropped,
as ``HaBroker`` does): it holds every message the client saw confirmed, or committed, that
the primary still held; of a transaction not yet committed-ok it holds all or nothing. The
promoted backup becomes the primary (the role machine again), a new backup links to it, the
client reconnects, and the steps go on against the new pair.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp.channel_consume import Delivery
from broker.amqp.context import BrokerContext
from broker.core.vhost import VirtualHost
from broker.ha.id_era import REPLICATION_ID_GAP
from broker.ha.primary import PrimaryListener
from broker.ha.primary_start import entered_steps
from broker.ha.replicate_level import ReplicateLevel, exchange_replicated, queue_level
from broker.ha.replication_contract import ReplicationContract
from broker.ha.role_events import QueueDeleted
from broker.ha.state import HaState
from broker.ha.streams import PrimaryStreams
from broker.security.sasl import Authenticator, UserDatabase
from common.slices import run_steps
from tests.amqp.helpers import Client, FakeClock
from tests.fuzz.traffic import unchecked
from tests.ha.replication_link import Link
from tests.ha.role_driver import RoleDriver

DEFAULT = ReplicateLevel.ALL
QUEUES = ["q", "t.a=b", "t.é", "<img src=x>"]
EXCHANGES = ["e", "t.a*b"]
KEYS = ["k", "#", "q"]
CONFIRM, TX = "confirm", "tx"
#: A message removed from a queue: (queue name, replication id).
Removed = tuple[str, int]


class Pair:
    """A primary (role, streams, contract) over ``vhost`` and a backup linked to it."""

    def __init__(self, vhost: VirtualHost, clock: FakeClock, backup_id: str) -> None:
        vhost.hold_contract(ReplicationContract(DEFAULT))
        self.vhost = vhost
        self.driver = RoleDriver(vhost, clock, replicate_default=DEFAULT)
        primary = self.driver.promote({})
        assert self.driver.state is HaState.ACTIVE
        self.streams = PrimaryStreams(primary, self.driver)
        vhost.listeners.append(
            PrimaryListener(primary, lambda key: self.driver.handle(QueueDeleted(key)))
        )
        self.ctx = BrokerContext(
            vhost=vhost,
            authenticator=Authenticator(UserDatabase.default(), True),
            clock=clock,
            streams=self.streams,
            barrier=self.streams,
        )
        self.link = Link(self.streams, backup_id)
        self.link.settle()

    def promote_backup(self, clock: FakeClock, new_backup: str) -> Pair:
        """The primary is gone: its backup becomes the primary (as ``HaBroker`` promotes:
        staged transactions dropped, then the promotion's pass over the queues: replication
        ids moved past any the old one used, ``x-expires`` leases restarted)."""
        self.link.replicator.staging.abandon()
        vhost = self.link.backup.default
        last = {name: queue.last_position for name, queue in vhost.queues.items()}
        run_steps(entered_steps(list(vhost.queues.values()), 0, None, []))  # (epoch 0: the gap)
        assert all(  # (the pass's rule, which the model relies on)
            queue.last_position == last[name] + REPLICATION_ID_GAP
            for name, queue in vhost.queues.items()
        )
        return Pair(vhost, clock, new_backup)


class Session:
    """The client: a confirm channel and a transactional channel, and what it was told."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.client = Client(ctx)
        self.client.handshake()
        self.numbers = {CONFIRM: 0, TX: 0}
        self.next_number = 1
        #: Per open confirm channel: delivery tag -> body published, and the tags acked.
        self.published: dict[int, bytes] = {}
        self.acked: set[int] = set()
        self.confirmed: set[bytes] = set()
        #: The transaction being built (bodies, and the messages its acks remove), the
        #: committed ones not yet answered, and those answered (commit-ok).
        self.tx_bodies: list[bytes] = []
        self.tx_removes: set[Removed] = set()
        self.tx_waiting: list[tuple[list[bytes], set[Removed]]] = []
        self.tx_committed: list[list[bytes]] = []
        #: The messages each purge sent removes, until its purge-ok.
        self.purges: list[set[Removed]] = []
        #: Messages whose removal was promised (purge-ok, commit-ok of an ack): they must
        #: never come back, on a promoted backup either.
        self.removed: set[Removed] = set()
        self.deliveries: dict[str, list[int]] = {CONFIRM: [], TX: []}
        self._open(CONFIRM)
        self._open(TX)

    def _open(self, kind: str) -> None:
        number = self.next_number
        self.next_number += 1
        self.numbers[kind] = number
        self.client.send(number, commands.Channel.Open())
        self.client.send(
            number, commands.Confirm.Select() if kind == CONFIRM else commands.Tx.Select()
        )
        self.deliveries[kind] = []
        if kind == CONFIRM:
            self.published, self.acked, self.purges = {}, set(), []
        else:
            self.tx_bodies, self.tx_waiting, self.tx_removes = [], [], set()
        self.read()

    def send(self, kind: str, method: Method) -> None:
        self.client.send(self.numbers[kind], method)

    def publish(self, kind: str, exchange: str, key: str, body: bytes) -> None:
        self.client.publish(self.numbers[kind], body, exchange=exchange, routing_key=key)
        if kind == CONFIRM:
            self.published[len(self.published) + 1] = body
        else:
            self.tx_bodies.append(body)

    def read(self) -> None:
        """Take what the broker sent: confirms, commit-oks, get-oks, channel closes."""
        reopen = []
        for number, frame in self.client.take():
            kind = CONFIRM if number == self.numbers[CONFIRM] else TX
            if number not in self.numbers.values():
                continue
            if isinstance(frame, commands.Basic.Ack):
                tag = frame.delivery_tag or 0
                tags = [t for t in self.published if t <= tag] if frame.multiple else [tag]
                for t in tags:
                    if t not in self.acked:
                        self.acked.add(t)
                        self.confirmed.add(self.published[t])
            elif isinstance(frame, commands.Basic.Nack):  # refused (a full queue): answered
                tag = frame.delivery_tag or 0
                tags = [t for t in self.published if t <= tag] if frame.multiple else [tag]
                self.acked.update(tags)
            elif isinstance(frame, commands.Basic.GetOk):
                self.deliveries[kind].append(frame.delivery_tag or 0)
            elif isinstance(frame, commands.Tx.CommitOk):
                committed, removes = self.tx_waiting.pop(0)
                self.tx_committed.append(committed)
                self.removed |= removes
            elif isinstance(frame, commands.Queue.PurgeOk):
                self.removed |= self.purges.pop(0)
            elif isinstance(frame, commands.Channel.Close):
                assert frame.reply_code in (404, 405, 406), frame
                self.client.send(number, commands.Channel.CloseOk())
                reopen.append(kind)
        for kind in reopen:
            self._open(kind)

    def unacked(self) -> list[Delivery]:
        """The deliveries not yet acknowledged on the primary (on every channel)."""
        return [
            d
            for channel in self.client.conn.channels.values()
            for d in channel.deliveries.unacked.values()
        ]

    def all_answered(self) -> str | None:
        """What should have come and has not (None: everything came)."""
        missing = sorted(set(self.published) - self.acked)
        if missing:
            return f"confirms {missing} of {sorted(self.published)} missing"
        if self.tx_waiting:
            return f"{len(self.tx_waiting)} commit-ok missing"
        return None


def replicated_state(vhost: VirtualHost, unacked: list[Delivery] | None = None) -> dict[str, Any]:
    """What of ``vhost`` a backup must hold (on a backup: what it holds). ``unacked``: the
    primary's deliveries not yet acknowledged (still messages of their queues for a backup)."""
    queues = {
        name: (q.durable, q.auto_delete, q.arguments, queue_level(q, DEFAULT))
        for name, q in vhost.queues.items()
        if queue_level(q, DEFAULT) is not ReplicateLevel.NONE
    }
    exchanges = {
        name: (e.type, e.durable, e.arguments)
        for name, e in vhost.exchanges.items()
        if not e.builtin and exchange_replicated(e, DEFAULT) is not ReplicateLevel.NONE
    }
    bindings = sorted(
        (b.exchange, b.destination_type, b.destination.name, b.routing_key)
        for b in vhost.bindings()
        if b.exchange in exchanges
        and b.destination.name in (queues if b.destination_type == "queue" else exchanges)
    )
    messages = {
        name: held(vhost, name, unacked) for name, row in queues.items() if row[3] is DEFAULT
    }
    return {"queues": queues, "exchanges": exchanges, "bindings": bindings, "messages": messages}


def held(vhost: VirtualHost, queue: str, unacked: list[Delivery] | None = None) -> list[Any]:
    """The messages of ``queue`` as (replication id, body), those delivered and not yet
    acknowledged among them, by id."""
    q = vhost.queues.get(queue)
    if q is None:
        return []
    entries = list(q.entries()) + [d.entry for d in unacked or () if d.queue is q]
    return sorted((entry.position, entry.message.body) for entry in entries)


def bodies(vhost: VirtualHost, queue: str, unacked: list[Delivery] | None = None) -> set[bytes]:
    return {body for _, body in held(vhost, queue, unacked)}


NAMES = st.sampled_from(QUEUES)
XS = st.sampled_from(EXCHANGES)
ACTIONS = st.one_of(
    st.tuples(
        st.just("declare_queue"),
        NAMES,
        st.sampled_from(
            [
                {},
                {"qpid.replicate": "configuration"},
                {"x-max-length": 2},
                {"x-max-length": 1, "x-overflow": "reject-publish"},
                {"x-message-ttl": 1000},
                {"x-dead-letter-exchange": "e", "x-message-ttl": 500},
            ]
        ),
    ),
    st.tuples(st.just("time"), st.sampled_from([0.4, 1.0, 2.0])),
    st.tuples(st.just("declare_exchange"), XS, st.sampled_from(["topic", "fanout"])),
    st.tuples(st.sampled_from(["bind", "unbind"]), NAMES, XS, st.sampled_from(KEYS)),
    st.tuples(st.sampled_from(["bind_exchange", "unbind_exchange"]), XS, XS, st.sampled_from(KEYS)),
    st.tuples(st.sampled_from(["delete_queue", "purge"]), NAMES),
    st.tuples(st.just("delete_exchange"), XS),
    st.tuples(
        st.sampled_from(["publish", "tx_publish"]),
        st.sampled_from(["", *EXCHANGES]),
        st.sampled_from([*QUEUES, *KEYS]),
        st.integers(1, 4),
    ),
    st.tuples(
        st.sampled_from(["publish", "publish", "tx_publish"]), st.just(""), NAMES, st.integers(1, 4)
    ),
    st.tuples(st.sampled_from(["get", "tx_get", "tx_commit"]), NAMES),
    st.tuples(st.sampled_from(["get", "tx_get"]), NAMES),
    st.tuples(
        st.just("settle"), st.sampled_from(["ack", "reject", "requeue", "nack"]), st.integers(0, 3)
    ),
    st.tuples(st.sampled_from(["tx_ack", "tx_commit", "tx_rollback"])),
    st.tuples(st.just("failover"), st.integers(0, 6)),
)
#: (action, whether the link settles after it)
STEPS = st.tuples(ACTIONS, st.sampled_from([True, True, True, False]))


class Model:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.pair = Pair(VirtualHost(clock=self.clock), self.clock, "backup-1")
        self.session = Session(self.pair.ctx)
        for queue in QUEUES:  # most steps find something to work on
            self.session.send(CONFIRM, unchecked(commands.Queue.Declare, queue=queue, durable=True))
        for exchange in EXCHANGES:
            self.session.send(
                CONFIRM,
                unchecked(commands.Exchange.Declare, exchange=exchange, exchange_type="topic"),
            )
        self.session.read()
        self.backups = 1
        self.count = 0
        self.commits = 0
        self.confirmed = 0  # confirms received before the last fail-over
        #: What sessions before the last fail-over were promised: confirmed or committed
        #: messages (kept while a queue holds them), removed ones (never back).
        self.promised: set[bytes] = set()
        self.removed: set[Removed] = set()

    def body(self) -> bytes:
        self.count += 1
        return f"m{self.count}".encode()

    def apply(self, action: tuple[Any, ...]) -> None:
        kind, *args = action
        s = self.session
        if kind == "declare_queue":
            s.send(
                CONFIRM,
                unchecked(commands.Queue.Declare, queue=args[0], durable=True, arguments=args[1]),
            )
        elif kind == "declare_exchange":
            s.send(
                CONFIRM,
                unchecked(commands.Exchange.Declare, exchange=args[0], exchange_type=args[1]),
            )
        elif kind in ("bind", "unbind"):
            method = commands.Queue.Bind if kind == "bind" else commands.Queue.Unbind
            s.send(CONFIRM, unchecked(method, queue=args[0], exchange=args[1], routing_key=args[2]))
        elif kind in ("bind_exchange", "unbind_exchange"):
            emethod = (
                commands.Exchange.Bind if kind == "bind_exchange" else commands.Exchange.Unbind
            )
            s.send(
                CONFIRM,
                unchecked(emethod, destination=args[0], source=args[1], routing_key=args[2]),
            )
        elif kind == "delete_queue":
            s.send(CONFIRM, unchecked(commands.Queue.Delete, queue=args[0]))
        elif kind == "purge":
            queue = self.pair.vhost.queues.get(args[0])
            ready = () if queue is None else queue.entries()
            s.purges.append({(args[0], entry.position) for entry in ready})
            s.send(CONFIRM, unchecked(commands.Queue.Purge, queue=args[0]))
        elif kind == "delete_exchange":
            s.send(CONFIRM, unchecked(commands.Exchange.Delete, exchange=args[0]))
        elif kind in ("publish", "tx_publish"):
            for _ in range(args[2]):
                s.publish(CONFIRM if kind == "publish" else TX, args[0], args[1], self.body())
        elif kind in ("get", "tx_get"):
            s.send(CONFIRM if kind == "get" else TX, unchecked(commands.Basic.Get, queue=args[0]))
        elif kind == "settle":
            self._settle(*args)
        elif kind == "tx_ack":
            if s.deliveries[TX]:
                tag = s.deliveries[TX].pop(0)
                delivery = s.client.conn.channels[s.numbers[TX]].deliveries.unacked[tag]
                s.tx_removes.add((delivery.queue.name, delivery.entry.position))
                s.send(TX, commands.Basic.Ack(delivery_tag=tag))
        elif kind == "tx_commit":
            self.commits += 1
            s.tx_waiting.append((s.tx_bodies, s.tx_removes))
            s.tx_bodies, s.tx_removes = [], set()
            s.send(TX, commands.Tx.Commit())
        elif kind == "time":  # expiry: the primary's clock (the backup's is its own)
            self.clock.now += args[0]
            for queue in self.pair.vhost.queues.values():
                queue.expire()
        elif kind == "tx_rollback":
            s.tx_bodies, s.tx_removes = [], set()
            s.send(TX, commands.Tx.Rollback())
        s.read()

    def _settle(self, how: str, index: int) -> None:
        held = self.session.deliveries[CONFIRM]
        if not held:
            return
        tag = held.pop(index % len(held))
        if how == "ack":
            method: Method = commands.Basic.Ack(delivery_tag=tag)
        elif how == "nack":
            method = commands.Basic.Nack(delivery_tag=tag, requeue=True)
        else:
            method = commands.Basic.Reject(delivery_tag=tag, requeue=how == "requeue")
        self.session.send(CONFIRM, method)

    def settle_and_check(self, step: object) -> None:
        self.pair.link.settle()
        self.session.read()
        backup = self.pair.link.backup.default
        primary = replicated_state(self.pair.vhost, self.session.unacked())
        assert replicated_state(backup) == primary, step
        assert self.session.all_answered() is None, (step, self.session.all_answered())

    def failover(self, applied: int) -> None:
        """The backup, having applied ``applied`` more bodies, is promoted."""
        self.pair.link.apply_some(applied)
        old, backup = self.pair.vhost, self.pair.link.backup.default
        s = self.session
        unacked = s.unacked()
        promised = self.promised | s.confirmed | {b for tx in s.tx_committed for b in tx}
        removed = self.removed | s.removed
        for name, q in old.queues.items():
            if queue_level(q, DEFAULT) is not ReplicateLevel.ALL:
                continue
            held_there = bodies(old, name, unacked)
            on_backup = bodies(backup, name)
            missing = held_there & promised - on_backup
            assert not missing, (name, missing)
        everywhere = {b for name in old.queues for b in bodies(old, name, unacked)}
        on_backup_all = {b for name in backup.queues for b in bodies(backup, name)}
        for tx, _ in s.tx_waiting:  # committed, not answered: all or none
            if set(tx) <= everywhere:
                kept = set(tx) & on_backup_all
                assert kept in (set(), set(tx)), ("part of a transaction", tx, kept)
        back = {(name, position) for name in backup.queues for position, _ in held(backup, name)}
        assert not back & removed, ("removed messages came back", back & removed)
        self.promised, self.removed = promised, removed
        self.backups += 1
        self.pair = self.pair.promote_backup(self.clock, f"backup-{self.backups}")
        self.confirmed += len(s.confirmed)
        self.session = Session(self.pair.ctx)


@settings(
    max_examples=int(os.environ.get("MODEL_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(STEPS, min_size=8, max_size=40))
def test_the_backup_holds_every_promise_and_the_promoted_backup_keeps_them(
    steps: list[tuple[tuple[Any, ...], bool]],
) -> None:
    model = Model()
    for action, settle in steps:
        if action[0] == "failover":
            model.failover(action[1])
        else:
            model.apply(action)
        if settle:
            model.settle_and_check((action, settle))
    model.settle_and_check("end")
    model.confirmed += len(model.session.confirmed)
    event(f"fail-overs: {min(model.backups - 1, 2)}+")
    event(f"messages published: {min(model.count // 5 * 5, 15)}+")
    event(f"confirmed: {min(model.confirmed // 3 * 3, 6)}+")
    event(f"commits: {min(model.commits, 3)}+")
