"""The replication path without I/O, under hypothesis (issue 24, item 4: a start).

A primary's real virtual host (with the replication contract) and its real streams
(:class:`~broker.ha.streams.PrimaryStreams`: the configuration stream and one queue stream
per level-``all`` queue) write to in-memory sinks instead of channels; a backup's real
:class:`~broker.ha.broker_replicator.BrokerReplicator` and
:class:`~broker.ha.queue_replicator.QueueReplicator` apply every body through the real wire
codecs (:func:`~broker.ha.wire.decode_config_event`, :func:`~broker.ha.wire.decode_batch`)
and acknowledge it, subscribing and unsubscribing queue streams as a backup's link does.
Hypothesis draws declares (any of a set of awkward names, arguments, ``qpid.replicate``
levels, a dead-letter exchange, a TTL of 0), binds, unbinds, deletes, purges, publishes
(some expiring on arrival), gets with acknowledgement, consumers that take messages, settle
some and go away (their messages requeued), and the expiry walk; after every step the
backup holds what the primary replicates: the same queues, exchanges and bindings with the
same arguments, and each level-``all`` queue's messages (ready or delivered) in order, and
no stream failed. Only the primary expires and dead-letters: a message a consumer took as
it arrived, with a TTL of 0, is replicated and must stay on the backup until it leaves.
(Transactions, exchange-to-exchange bindings and a fail-over are for the next step of the
issue.)
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.core import properties
from broker.core.errors import AmqpError
from broker.core.message import Message
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.primary import Primary, StandaloneBackups
from broker.ha.replicate_level import ReplicateLevel, exchange_replicated, queue_level
from broker.ha.replication_contract import ReplicationContract
from broker.ha.streams import PrimaryStreams
from tests.core.fakes import FakeConsumer
from tests.ha.replication_link import Link

QUEUES = ["q", "t.a=b", "t.é", "<img src=x onerror=alert(1)>", "%", "/"]
EXCHANGES = ["e", "t.a*b", "x/y"]
LEVELS = st.sampled_from([None, "all", "configuration", "none"])
ARGUMENTS = st.dictionaries(
    st.sampled_from(["x-a", "x-b", "é"]),
    st.recursive(
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.booleans()),
        lambda leaves: st.one_of(
            st.lists(leaves, max_size=2), st.dictionaries(st.text(max_size=3), leaves, max_size=2)
        ),
        max_leaves=4,
    ),
    max_size=2,
)


@st.composite
def _arguments(draw: st.DrawFn) -> dict[str, Any]:
    arguments = draw(ARGUMENTS)
    level = draw(LEVELS)
    if level is not None:
        arguments["qpid.replicate"] = level
    if draw(st.booleans()):
        arguments["x-dead-letter-exchange"] = draw(st.sampled_from(EXCHANGES))
    if draw(st.integers(0, 3)) == 0:
        arguments["x-message-ttl"] = 0
    return arguments


#: Properties of a publish: none, or an expiration of 0 (expired unless a consumer takes it
#: as it arrives).
EXPIRED_ON_ARRIVAL = properties.encode(commands.Basic.Properties(expiration="0"))


PUBLISH = st.tuples(
    st.just("publish"),
    st.sampled_from(["", "", *EXCHANGES]),
    st.sampled_from([*QUEUES, "k", "k.x"]),
    st.binary(max_size=8),
    st.booleans(),
)
STEPS = st.one_of(
    st.tuples(st.just("declare_queue"), st.sampled_from(QUEUES), st.booleans(), _arguments()),
    st.tuples(
        st.just("declare_exchange"),
        st.sampled_from(EXCHANGES),
        st.sampled_from(["direct", "topic", "fanout"]),
        _arguments(),
    ),
    st.tuples(
        st.just("bind"),
        st.sampled_from(QUEUES),
        st.sampled_from(EXCHANGES),
        st.sampled_from(["k", "k.#", "*"]),
    ),
    st.tuples(
        st.just("unbind"),
        st.sampled_from(QUEUES),
        st.sampled_from(EXCHANGES),
        st.sampled_from(["k", "k.#", "*"]),
    ),
    st.tuples(st.just("delete_queue"), st.sampled_from(QUEUES)),
    st.tuples(st.just("delete_exchange"), st.sampled_from(EXCHANGES)),
    st.tuples(st.just("purge"), st.sampled_from(QUEUES)),
    PUBLISH,
    PUBLISH,  # (twice as likely as another step: most steps of a broker's life are these)
    st.tuples(st.just("get"), st.sampled_from(QUEUES)),
    st.tuples(st.just("consume"), st.sampled_from(QUEUES), st.integers(1, 3)),
    st.tuples(st.just("ack"), st.integers(0, 3)),
    st.tuples(st.just("reject"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 3)),
    st.just(("expire",)),
)


class Consumers:
    """The consumers the steps made, each with the queue it consumes from."""

    def __init__(self) -> None:
        self.active: list[tuple[Queue, FakeConsumer]] = []

    def pick(self, number: int) -> tuple[Queue, FakeConsumer] | None:
        return self.active[number % len(self.active)] if self.active else None


def _apply(vhost: VirtualHost, step: tuple[Any, ...], consumers: Consumers) -> None:
    kind, *args = step
    try:
        if kind == "declare_queue":
            name, durable, arguments = args
            vhost.declare_queue(name, durable=durable, arguments=arguments)
        elif kind == "declare_exchange":
            name, type_, arguments = args
            vhost.declare_exchange(name, type_, arguments=arguments)
        elif kind == "bind":
            vhost.bind(args[0], args[1], args[2])
        elif kind == "unbind":
            vhost.unbind(args[0], args[1], args[2])
        elif kind == "delete_queue":
            vhost.delete_queue(args[0])
        elif kind == "delete_exchange":
            vhost.delete_exchange(args[0])
        elif kind == "purge":
            vhost.purge_queue(args[0])
        elif kind == "publish":
            exchange, key, body, expired = args
            raw = EXPIRED_ON_ARRIVAL if expired else properties.EMPTY
            vhost.publish(vhost.exchange(exchange), Message(exchange, key, raw, body))
        elif kind == "get":
            queue = vhost.queue(args[0])
            entry = queue.get()
            if entry is not None:
                queue.delivered(entry, no_ack=False)
                queue.settle(entry)
        elif kind == "consume":
            queue = vhost.queue(args[0])
            consumer = FakeConsumer(f"c{len(consumers.active)}", credit=args[1])
            consumers.active.append((queue, consumer))
            queue.add_consumer(consumer)
        elif kind == "ack" and (picked := consumers.pick(args[0])) is not None:
            queue, consumer = picked
            if consumer.unacked and not queue.deleted:
                queue.settle(consumer.unacked.pop(0))
                consumer.credit = (consumer.credit or 0) + 1
                queue.dispatch()
        elif kind == "reject" and (picked := consumers.pick(args[0])) is not None:
            queue, consumer = picked  # basic.reject: requeued, or dropped (dead-lettered)
            if consumer.unacked and not queue.deleted:
                queue.reject(consumer.unacked.pop(0), requeue=args[1])
                consumer.credit = (consumer.credit or 0) + 1
                queue.dispatch()
        elif kind == "cancel" and (picked := consumers.pick(args[0])) is not None:
            queue, consumer = picked  # its channel closed: its deliveries go back
            consumers.active.remove(picked)
            queue.remove_consumer(consumer)
            queue.requeue(consumer.unacked)
            consumer.unacked.clear()
        elif kind == "expire":
            vhost.tick()
    except AmqpError:
        pass  # refused (not found, inequivalent, the contract): nothing changed


def _replicated_state(vhost: VirtualHost, default: ReplicateLevel) -> dict[str, Any]:
    """What of ``vhost`` a backup must hold (on a backup: what it holds)."""
    queues = {
        name: (q.durable, q.auto_delete, q.arguments, queue_level(q, default))
        for name, q in vhost.queues.items()
        if queue_level(q, default) is not ReplicateLevel.NONE
    }
    exchanges = {
        name: (e.type, e.durable, e.arguments)
        for name, e in vhost.exchanges.items()
        if not e.builtin and exchange_replicated(e, default) is not ReplicateLevel.NONE
    }
    bindings = sorted(
        (b.exchange, b.destination.name, b.routing_key)
        for b in vhost.bindings()
        if b.exchange in exchanges and b.destination.name in queues
    )
    messages = {  # ready or delivered (a backup delivers nothing), by replication id
        name: [entry.message.body for entry in vhost.queues[name].snapshot()]
        for name, row in queues.items()
        if row[3] is ReplicateLevel.ALL
    }
    return {"queues": queues, "exchanges": exchanges, "bindings": bindings, "messages": messages}


def _check(steps: list[tuple[Any, ...]], link_at: int, *, dead_letter: bool = False) -> None:
    """Apply ``steps`` on a primary (with a fanout ``dlx`` bound to queue ``d`` first when
    ``dead_letter``), a backup connecting before step ``link_at``; after every step once
    connected, the backup holds what the primary replicates."""
    default = ReplicateLevel.ALL
    vhost = VirtualHost()
    vhost.contract = ReplicationContract(default)
    primary = Primary(vhost, replicate_default=default, clock=lambda: 0.0, auto_delete_grace=10)
    streams = PrimaryStreams(primary, StandaloneBackups(primary))
    if dead_letter:
        vhost.declare_exchange("dlx", "fanout")
        vhost.declare_queue("d")
        vhost.bind("d", "dlx", "")
    link: Link | None = None
    consumers = Consumers()
    for number, step in enumerate(steps):
        if number == link_at:  # the backup connects here: a snapshot, then the changes
            link = Link(streams)
        _apply(vhost, step, consumers)
        if link is not None:
            link.settle()
            backup = link.backup.default
            assert _replicated_state(backup, default) == _replicated_state(vhost, default), step
    if link is None:
        link = Link(streams)
        link.settle()
        backup = link.backup.default
        assert _replicated_state(backup, default) == _replicated_state(vhost, default)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEPS, max_size=40), st.integers(0, 40))
def test_the_backup_holds_what_the_primary_replicates_after_every_step(
    steps: list[tuple[Any, ...]], link_at: int
) -> None:
    _check(steps, link_at)


#: One queue's messages as consumers, TTLs, length limits and dead-lettering move them:
#: queue ``q`` (declared with or without a dead-letter exchange, a TTL of 0, a length limit
#: dropping the head or refusing with a dead letter), the ``dlx`` exchange bound to ``d``.
CONSUMER_STEPS = st.one_of(
    st.tuples(
        st.just("declare_queue"),
        st.just("q"),
        st.booleans(),
        st.fixed_dictionaries(
            {},
            optional={
                "x-dead-letter-exchange": st.just("dlx"),
                "x-message-ttl": st.just(0),
                "x-max-length": st.integers(0, 2),
                "x-overflow": st.sampled_from(["drop-head", "reject-publish-dlx"]),
            },
        ),
    ),
    st.tuples(st.just("delete_queue"), st.just("q")),
    st.tuples(st.just("purge"), st.sampled_from(["q", "d"])),
    *[
        st.tuples(
            st.just("publish"),
            st.sampled_from(["", "dlx"]),
            st.just("q"),
            st.binary(max_size=4),
            st.booleans(),
        )
    ]
    * 3,
    st.tuples(st.just("get"), st.sampled_from(["q", "d"])),
    st.tuples(st.just("consume"), st.sampled_from(["q", "q", "d"]), st.integers(1, 3)),
    st.tuples(st.just("ack"), st.integers(0, 3)),
    st.tuples(st.just("reject"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 3)),
    st.just(("expire",)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CONSUMER_STEPS, min_size=3, max_size=30), st.integers(0, 10))
def test_consumers_expiry_and_dead_letters_replicate(
    steps: list[tuple[Any, ...]], link_at: int
) -> None:
    """Only the primary expires and dead-letters; whatever its consumers took, settled or
    gave back, the backup holds the same messages after every step."""
    _check(steps, link_at, dead_letter=True)
