"""VirtualHost: declare/delete/bind semantics and the reply codes RabbitMQ clients expect."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.errors import AmqpError, ReplyCode
from broker.core.exchange import DirectExchange, HeadersExchange, TopicExchange
from broker.core.vhost import BUILTIN_EXCHANGES, VirtualHost
from tests.core.fakes import FakeClock, FakeConsumer, RecordingListener, message


class Owner:
    """Stands for a connection owning exclusive queues."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def vhost(clock: FakeClock) -> VirtualHost:
    return VirtualHost(clock=clock, wall_clock=lambda: 0.0)


@pytest.fixture
def listener(vhost: VirtualHost) -> RecordingListener:
    recording = RecordingListener()
    vhost.listeners.append(recording)
    return recording


def refused(code: ReplyCode, call: Any, *args: Any, **kwargs: Any) -> AmqpError:
    with pytest.raises(AmqpError) as info:
        call(*args, **kwargs)
    assert info.value.reply_code == code, info.value
    return info.value


# -- errors ----------------------------------------------------------------------------------
def test_amqp_error_soft_and_hard() -> None:
    soft = AmqpError(ReplyCode.NOT_FOUND, "no queue 'q'")
    assert not soft.closes_connection
    assert soft.wire_text() == "NOT_FOUND - no queue 'q'"
    hard = AmqpError(ReplyCode.COMMAND_INVALID, "x")
    assert hard.closes_connection
    long = AmqpError(ReplyCode.NOT_FOUND, "é" * 300)
    assert len(long.wire_text().encode()) <= 255


# -- exchanges -------------------------------------------------------------------------------
def test_builtin_exchanges(vhost: VirtualHost) -> None:
    assert set(vhost.exchanges) == {"", *BUILTIN_EXCHANGES}
    for name, type_name in BUILTIN_EXCHANGES.items():
        exchange = vhost.exchange(name)
        assert exchange.type == type_name
        assert exchange.durable and exchange.builtin
    assert vhost.exchange("").type == "direct"


def test_declare_exchange_and_redeclare(vhost: VirtualHost, listener: RecordingListener) -> None:
    exchange = vhost.declare_exchange("logs", "topic", durable=True)
    assert isinstance(exchange, TopicExchange)
    assert exchange.durable
    assert vhost.declare_exchange("logs", "topic", durable=True) is exchange
    assert vhost.declare_exchange("logs", "", passive=True) is exchange
    assert listener.events == [("exchange_declared", "logs")]


@pytest.mark.parametrize(
    ("changes", "field", "received", "current"),
    [
        ({"type": "fanout"}, "type", "fanout", "direct"),
        ({"durable": False}, "durable", "false", "true"),
        ({"auto_delete": True}, "auto_delete", "true", "false"),
        ({"internal": True}, "internal", "true", "false"),
    ],
)
def test_inequivalent_exchange_redeclare(
    vhost: VirtualHost, changes: dict[str, Any], field: str, received: str, current: str
) -> None:
    declared: dict[str, Any] = {"type": "direct", "durable": True}
    vhost.declare_exchange("x", **declared)
    error = refused(
        ReplyCode.PRECONDITION_FAILED, vhost.declare_exchange, "x", **(declared | changes)
    )
    assert f"inequivalent arg '{field}' for exchange 'x'" in error.reply_text
    assert f"received '{received}' but current is '{current}'" in error.reply_text
    assert not error.closes_connection


def test_passive_exchange_declare(vhost: VirtualHost) -> None:
    error = refused(ReplyCode.NOT_FOUND, vhost.declare_exchange, "nope", "direct", passive=True)
    assert error.reply_text == "no exchange 'nope' in vhost '/'"
    assert "nope" not in vhost.exchanges
    assert vhost.declare_exchange("amq.topic", "topic", passive=True).builtin
    # passive ignores the other fields entirely
    vhost.declare_exchange("x", "direct")
    assert vhost.declare_exchange("x", "fanout", passive=True, durable=True).type == "direct"


def test_reserved_exchange_names(vhost: VirtualHost) -> None:
    error = refused(ReplyCode.ACCESS_REFUSED, vhost.declare_exchange, "amq.custom", "direct")
    assert "amq.custom" in error.reply_text
    refused(ReplyCode.ACCESS_REFUSED, vhost.declare_exchange, "", "direct")
    error = refused(ReplyCode.ACCESS_REFUSED, vhost.declare_exchange, "", "direct", passive=True)
    assert error.reply_text == "operation not permitted on the default exchange"
    # redeclaring an existing amq.* exchange equivalently is allowed (RabbitMQ)
    assert vhost.declare_exchange("amq.direct", "direct", durable=True).builtin
    refused(
        ReplyCode.PRECONDITION_FAILED, vhost.declare_exchange, "amq.direct", "fanout", durable=True
    )


def test_unknown_exchange_type_is_a_connection_error(vhost: VirtualHost) -> None:
    error = refused(ReplyCode.COMMAND_INVALID, vhost.declare_exchange, "x", "x-custom")
    assert error.closes_connection
    assert "x" not in vhost.exchanges


def test_alternate_exchange_argument_must_be_a_string(vhost: VirtualHost) -> None:
    refused(
        ReplyCode.PRECONDITION_FAILED,
        vhost.declare_exchange,
        "x",
        "direct",
        arguments={"alternate-exchange": 42},
    )


def test_delete_exchange(vhost: VirtualHost, listener: RecordingListener) -> None:
    vhost.declare_exchange("x", "direct")
    vhost.declare_queue("q")
    vhost.bind("q", "x", "k")
    refused(ReplyCode.PRECONDITION_FAILED, vhost.delete_exchange, "x", if_unused=True)
    assert "x" in vhost.exchanges
    vhost.delete_exchange("x")
    assert "x" not in vhost.exchanges
    assert vhost.bindings() == []
    assert listener.events[-2:] == [("unbound", "x->q"), ("exchange_deleted", "x")]
    vhost.delete_exchange("x")  # deleting a missing exchange succeeds
    vhost.declare_exchange("y", "direct")
    vhost.delete_exchange("y", if_unused=True)
    assert "y" not in vhost.exchanges
    # the queue survives and can be bound again
    vhost.declare_exchange("x", "direct")
    vhost.bind("q", "x", "k")


@pytest.mark.parametrize("name", ["", *BUILTIN_EXCHANGES])
def test_builtin_exchanges_cannot_be_deleted(vhost: VirtualHost, name: str) -> None:
    refused(ReplyCode.ACCESS_REFUSED, vhost.delete_exchange, name)
    assert name in vhost.exchanges


def test_publish_checks(vhost: VirtualHost) -> None:
    vhost.declare_exchange("internal", "fanout", internal=True)
    error = refused(ReplyCode.ACCESS_REFUSED, vhost.check_publish, "internal")
    assert "internal" in error.reply_text
    refused(ReplyCode.NOT_FOUND, vhost.check_publish, "missing")
    assert vhost.check_publish("") is vhost.exchange("")
    assert vhost.check_publish("amq.direct").name == "amq.direct"


def test_auto_delete_exchange_goes_with_last_binding(
    vhost: VirtualHost, listener: RecordingListener
) -> None:
    vhost.declare_exchange("auto", "direct", auto_delete=True)
    vhost.declare_queue("q1")
    vhost.declare_queue("q2")
    # never bound: stays
    vhost.unbind("q1", "auto", "k")
    assert "auto" in vhost.exchanges
    vhost.bind("q1", "auto", "a")
    vhost.bind("q2", "auto", "b")
    vhost.unbind("q1", "auto", "a")
    assert "auto" in vhost.exchanges
    vhost.unbind("q2", "auto", "b")
    assert "auto" not in vhost.exchanges
    assert listener.events[-1] == ("exchange_deleted", "auto")


def test_auto_delete_exchange_goes_with_last_bound_queue(vhost: VirtualHost) -> None:
    vhost.declare_exchange("auto", "fanout", auto_delete=True)
    vhost.declare_exchange("plain", "fanout")
    vhost.declare_queue("q")
    vhost.bind("q", "auto", "a")
    vhost.bind("q", "auto", "b")
    vhost.bind("q", "plain", "")
    vhost.delete_queue("q")
    assert "auto" not in vhost.exchanges
    assert "plain" in vhost.exchanges


# -- queues ----------------------------------------------------------------------------------
def test_declare_queue_and_redeclare(vhost: VirtualHost, listener: RecordingListener) -> None:
    args = {"x-message-ttl": 1000, "x-max-length": 10}
    queue = vhost.declare_queue("q", durable=True, arguments=args)
    assert queue.durable and queue.limits.message_ttl_ms == 1000
    assert vhost.declare_queue("q", durable=True, arguments=dict(args)) is queue
    assert vhost.declare_queue("q", passive=True) is queue
    # arguments outside RabbitMQ's equivalence list are not compared
    assert vhost.declare_queue("q", durable=True, arguments={**args, "x-other": 1}) is queue
    assert listener.events == [("queue_declared", "q")]
    assert vhost.queue("q") is queue


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"durable": False}, "durable"),
        ({"auto_delete": True}, "auto_delete"),
        ({"arguments": {"x-message-ttl": 2000}}, "x-message-ttl"),
        ({"arguments": {}}, "x-message-ttl"),
        ({"arguments": {"x-message-ttl": 1000, "x-max-length": 5}}, "x-max-length"),
        ({"arguments": {"x-message-ttl": 1000, "x-expires": 5}}, "x-expires"),
        ({"arguments": {"x-message-ttl": 1000, "x-overflow": "reject-publish"}}, "x-overflow"),
        (
            {"arguments": {"x-message-ttl": 1000, "x-dead-letter-exchange": "d"}},
            "x-dead-letter-exchange",
        ),
        ({"arguments": {"x-message-ttl": 1000, "x-max-length-bytes": 1}}, "x-max-length-bytes"),
    ],
)
def test_inequivalent_queue_redeclare(
    vhost: VirtualHost, changes: dict[str, Any], field: str
) -> None:
    owner = Owner()
    declared: dict[str, Any] = {"durable": True, "arguments": {"x-message-ttl": 1000}}
    vhost.declare_queue("q", owner=owner, **declared)
    error = refused(
        ReplyCode.PRECONDITION_FAILED,
        vhost.declare_queue,
        "q",
        owner=owner,
        **(declared | changes),
    )
    assert f"inequivalent arg '{field}' for queue 'q' in vhost '/'" in error.reply_text


def test_exclusive_mismatch_on_redeclare_is_refused(vhost: VirtualHost) -> None:
    # RabbitMQ answers 405 RESOURCE_LOCKED here; either way the channel closes.
    owner = Owner()
    vhost.declare_queue("plain", owner=owner)
    vhost.declare_queue("ex", exclusive=True, owner=owner)
    for name, exclusive in (("plain", True), ("ex", False)):
        with pytest.raises(AmqpError) as info:
            vhost.declare_queue(name, exclusive=exclusive, owner=owner)
        assert info.value.reply_code in (ReplyCode.RESOURCE_LOCKED, ReplyCode.PRECONDITION_FAILED)
        assert not info.value.closes_connection
        assert "exclusive" in info.value.reply_text


def test_invalid_queue_arguments_are_refused(vhost: VirtualHost) -> None:
    error = refused(
        ReplyCode.PRECONDITION_FAILED,
        vhost.declare_queue,
        "q",
        arguments={"x-max-length": "ten"},
    )
    assert "x-max-length" in error.reply_text
    assert "q" not in vhost.queues


def test_passive_queue_declare(vhost: VirtualHost, clock: FakeClock) -> None:
    error = refused(ReplyCode.NOT_FOUND, vhost.declare_queue, "nope", passive=True)
    assert error.reply_text == "no queue 'nope' in vhost '/'"
    refused(ReplyCode.NOT_FOUND, vhost.declare_queue, "", passive=True)
    queue = vhost.declare_queue("q")
    clock.advance(5)
    assert vhost.declare_queue("q", passive=True, durable=True) is queue
    assert queue.last_used == clock.now


def test_server_named_queues(vhost: VirtualHost, listener: RecordingListener) -> None:
    first = vhost.declare_queue("")
    second = vhost.declare_queue("", exclusive=True, owner=Owner())
    assert first.name != second.name
    for queue in (first, second):
        assert re.fullmatch(r"amq\.gen-[A-Za-z0-9_-]{22}", queue.name)
        assert vhost.queues[queue.name] is queue
    # a server-named queue can be redeclared by its name despite the amq. prefix
    assert vhost.declare_queue(first.name) is first
    assert [e for e, _ in listener.events] == ["queue_declared", "queue_declared"]


def test_reserved_queue_names(vhost: VirtualHost) -> None:
    error = refused(ReplyCode.ACCESS_REFUSED, vhost.declare_queue, "amq.mine")
    assert "amq.mine" in error.reply_text
    assert "amq.mine" not in vhost.queues


def test_exclusive_queue_is_locked_to_its_owner(vhost: VirtualHost) -> None:
    owner, other = Owner(), Owner()
    queue = vhost.declare_queue("ex", exclusive=True, owner=owner)
    vhost.declare_exchange("x", "direct")
    assert vhost.declare_queue("ex", exclusive=True, owner=owner) is queue
    assert vhost.declare_queue("ex", passive=True, owner=owner) is queue
    locked = ReplyCode.RESOURCE_LOCKED
    error = refused(locked, vhost.declare_queue, "ex", exclusive=True, owner=other)
    assert "cannot obtain exclusive access to locked queue 'ex'" in error.reply_text
    assert not error.closes_connection
    refused(locked, vhost.declare_queue, "ex", passive=True, owner=other)
    refused(locked, vhost.queue, "ex", other)
    refused(locked, vhost.bind, "ex", "x", "k", owner=other)
    refused(locked, vhost.unbind, "ex", "x", "k", owner=other)
    refused(locked, vhost.purge_queue, "ex", owner=other)
    refused(locked, vhost.delete_queue, "ex", owner=other)
    assert "ex" in vhost.queues
    # the owner may do all of it; the queue stays routable for anyone
    vhost.bind("ex", "x", "k", owner=owner)
    assert vhost.publish(vhost.exchange("x"), message("m", "k")).routed
    assert vhost.purge_queue("ex", owner=owner) == 1
    assert vhost.delete_queue("ex", owner=owner) == 0


def test_owner_closed_deletes_only_its_exclusive_queues(
    vhost: VirtualHost, listener: RecordingListener
) -> None:
    owner, other = Owner(), Owner()
    vhost.declare_exchange("x", "fanout")
    vhost.declare_queue("mine1", exclusive=True, owner=owner)
    vhost.declare_queue("mine2", exclusive=True, owner=owner)
    vhost.declare_queue("theirs", exclusive=True, owner=other)
    vhost.declare_queue("shared", owner=owner)
    vhost.bind("mine1", "x", "")
    vhost.bind("theirs", "x", "")
    consumer = FakeConsumer()
    vhost.queue("mine1").add_consumer(consumer)
    vhost.owner_closed(owner)
    assert set(vhost.queues) == {"theirs", "shared"}
    assert [b.queue.name for b in vhost.bindings()] == ["theirs"]
    assert consumer.deleted_queues and consumer.deleted_queues[0].name == "mine1"
    deleted = {name for event, name in listener.events if event == "queue_deleted"}
    assert deleted == {"mine1", "mine2"}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["declare", "delete", "close"]),
            st.integers(0, 2),  # the owner (2: none, a shared queue)
            st.sampled_from(["a", "b", "c"]),
        ),
        max_size=30,
    )
)
def test_a_close_deletes_exactly_the_queues_its_connection_owns(
    steps: list[tuple[str, int, str]],
) -> None:
    """Exclusive queues are found by their owner, not by a scan of every queue (issue 25):
    after any sequence of declares, deletes and closes the queues left are those a scan
    would leave, and a closed owner holds nothing (a queue of the same name declared by
    another connection after a delete is not the closed one's)."""
    vhost = VirtualHost(clock=FakeClock(), wall_clock=lambda: 0.0)
    owners = [Owner(), Owner()]
    model: dict[str, int | None] = {}  # queue -> owner index (None: shared)
    for action, who, name in steps:
        owner = owners[who] if who < 2 else None
        if action == "declare" and name not in model:
            vhost.declare_queue(name, exclusive=owner is not None, owner=owner)
            model[name] = who if who < 2 else None
        elif action == "delete" and name in model:
            vhost.delete_queue(name, owner=owners[model[name] or 0])
            del model[name]
        elif action == "close" and owner is not None:
            vhost.owner_closed(owner)
            model = {n: o for n, o in model.items() if o != who}
            owners[who] = Owner()  # a closed connection never comes back
        assert set(vhost.queues) == set(model)
    for owner in owners:
        vhost.owner_closed(owner)
    assert set(vhost.queues) == {n for n, o in model.items() if o is None}


def test_delete_queue(vhost: VirtualHost, listener: RecordingListener) -> None:
    vhost.declare_exchange("x", "direct")
    queue = vhost.declare_queue("q")
    vhost.bind("q", "x", "a")
    vhost.bind("q", "amq.topic", "#")
    vhost.bind("q", "amq.fanout", "")
    for body in ("1", "2", "3"):
        vhost.publish(vhost.exchange(""), message(body, "q"))
    consumer = FakeConsumer(credit=1)
    queue.add_consumer(consumer)
    refused(ReplyCode.PRECONDITION_FAILED, vhost.delete_queue, "q", if_unused=True)
    queue.remove_consumer(consumer)
    refused(ReplyCode.PRECONDITION_FAILED, vhost.delete_queue, "q", if_empty=True)
    assert vhost.delete_queue("q", if_unused=True) == 2
    assert "q" not in vhost.queues
    assert queue.deleted
    # its bindings went with it: nothing routes to it any more
    assert vhost.bindings() == []
    for name in ("x", "amq.topic", "amq.fanout"):
        assert vhost.exchange(name).bindings == {}
    assert not vhost.publish(vhost.exchange("x"), message("m", "a")).routed
    assert not vhost.publish(vhost.exchange(""), message("m", "q")).routed
    assert listener.events[-1] == ("queue_deleted", "q")
    assert vhost.delete_queue("q") == 0  # deleting a missing queue succeeds
    # the name is free again, with fresh state
    again = vhost.declare_queue("q")
    assert again is not queue and again.message_count == 0


def test_delete_empty_unused_queue_with_conditions(vhost: VirtualHost) -> None:
    vhost.declare_queue("q")
    assert vhost.delete_queue("q", if_unused=True, if_empty=True) == 0
    assert "q" not in vhost.queues


def test_delete_queue_tells_its_consumers(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    consumers = [FakeConsumer("a"), FakeConsumer("b")]
    for consumer in consumers:
        queue.add_consumer(consumer)
    vhost.delete_queue("q")
    assert all(c.deleted_queues == [queue] for c in consumers)
    assert queue.consumer_count == 0


def test_purge_queue(vhost: VirtualHost) -> None:
    vhost.declare_queue("q")
    for body in ("1", "2"):
        vhost.publish(vhost.exchange(""), message(body, "q"))
    assert vhost.purge_queue("q") == 2
    assert vhost.purge_queue("q") == 0
    refused(ReplyCode.NOT_FOUND, vhost.purge_queue, "missing")


def test_auto_delete_queue_goes_after_last_consumer(
    vhost: VirtualHost, listener: RecordingListener
) -> None:
    queue = vhost.declare_queue("auto", auto_delete=True)
    vhost.bind("auto", "amq.direct", "k")
    first, second = FakeConsumer("1"), FakeConsumer("2")
    queue.add_consumer(first)
    queue.add_consumer(second)
    queue.remove_consumer(first)
    vhost.consumer_cancelled(queue)
    assert "auto" in vhost.queues
    queue.remove_consumer(second)
    vhost.consumer_cancelled(queue)
    assert "auto" not in vhost.queues
    assert queue.deleted
    assert vhost.bindings() == []
    assert listener.events[-1] == ("queue_deleted", "auto")
    vhost.consumer_cancelled(queue)  # a late call for a deleted queue is harmless
    assert listener.events.count(("queue_deleted", "auto")) == 1


def test_non_auto_delete_queue_survives_its_consumers(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("q")
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    queue.remove_consumer(consumer)
    vhost.consumer_cancelled(queue)
    assert "q" in vhost.queues


def test_unused_auto_delete_queue_stays(vhost: VirtualHost, clock: FakeClock) -> None:
    vhost.declare_queue("auto", auto_delete=True)
    clock.advance(3600)
    vhost.tick()
    assert "auto" in vhost.queues


# -- bindings --------------------------------------------------------------------------------
def test_bind_and_list(vhost: VirtualHost, listener: RecordingListener) -> None:
    vhost.declare_queue("q")
    vhost.declare_exchange("h", "headers")
    first = vhost.bind("q", "amq.direct", "k")
    assert vhost.bind("q", "amq.direct", "k") is first  # idempotent
    second = vhost.bind("q", "h", "", {"x-match": "any", "a": 1})
    listed = vhost.bindings()
    assert first in listed and second in listed and len(listed) == 2
    assert (first.exchange, first.queue.name, first.routing_key) == ("amq.direct", "q", "k")
    assert second.arguments == {"x-match": "any", "a": 1}
    assert isinstance(vhost.exchange("h"), HeadersExchange)
    assert listener.events == [
        ("queue_declared", "q"),
        ("exchange_declared", "h"),
        ("bound", "amq.direct->q"),
        ("bound", "h->q"),
    ]
    vhost.unbind("q", "amq.direct", "k")
    vhost.unbind("q", "amq.direct", "k")  # not bound any more: still fine
    vhost.unbind("q", "h", "", {"a": 1, "x-match": "any"})
    assert vhost.bindings() == []
    assert listener.events[-2:] == [("unbound", "amq.direct->q"), ("unbound", "h->q")]


def test_bind_errors(vhost: VirtualHost) -> None:
    vhost.declare_queue("q")
    refused(ReplyCode.NOT_FOUND, vhost.bind, "missing", "amq.direct", "k")
    error = refused(ReplyCode.NOT_FOUND, vhost.bind, "q", "missing", "k")
    assert "missing" in error.reply_text
    refused(ReplyCode.ACCESS_REFUSED, vhost.bind, "q", "", "q")
    refused(ReplyCode.ACCESS_REFUSED, vhost.unbind, "q", "", "q")
    # unbinding from a queue or exchange that is gone is done already (RabbitMQ)
    vhost.unbind("missing", "amq.direct", "k")
    vhost.unbind("q", "missing", "k")
    refused(ReplyCode.PRECONDITION_FAILED, vhost.bind, "q", "amq.match", "", {"x-match": "one"})
    assert vhost.bindings() == []


def test_bindings_route_published_messages(vhost: VirtualHost) -> None:
    vhost.declare_exchange("d", "direct")
    queue = vhost.declare_queue("q")
    vhost.bind("q", "d", "k1")
    vhost.bind("q", "d", "k2")
    assert isinstance(vhost.exchange("d"), DirectExchange)
    for key in ("k1", "k2", "k3"):
        vhost.publish(vhost.exchange("d"), message(key, key))
    assert [e.message.body for e in queue.entries()] == [b"k1", b"k2"]


def test_config_listener_sees_everything(vhost: VirtualHost, listener: RecordingListener) -> None:
    owner = Owner()
    vhost.declare_exchange("x", "topic", auto_delete=True)
    vhost.declare_queue("q", exclusive=True, owner=owner)
    vhost.bind("q", "x", "#", owner=owner)
    vhost.owner_closed(owner)
    # (whether the binding that goes with its queue is reported as unbound is left open)
    assert [event for event in listener.events if event[0] != "unbound"] == [
        ("exchange_declared", "x"),
        ("queue_declared", "q"),
        ("bound", "x->q"),
        ("exchange_deleted", "x"),
        ("queue_deleted", "q"),
    ]


# -- time ------------------------------------------------------------------------------------
def test_x_expires_deletes_unused_queue(
    vhost: VirtualHost, clock: FakeClock, listener: RecordingListener
) -> None:
    vhost.declare_queue("temp", arguments={"x-expires": 1000})
    clock.advance(0.9)
    vhost.tick()
    assert "temp" in vhost.queues
    vhost.declare_queue("temp", arguments={"x-expires": 1000})  # a redeclare is a use
    clock.advance(0.9)
    vhost.tick()
    assert "temp" in vhost.queues
    clock.advance(0.2)
    vhost.tick()
    assert "temp" not in vhost.queues
    assert listener.events[-1] == ("queue_deleted", "temp")


def test_x_expires_waits_for_consumers_and_counts_gets(
    vhost: VirtualHost, clock: FakeClock
) -> None:
    queue = vhost.declare_queue("temp", arguments={"x-expires": 1000})
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    clock.advance(10)
    vhost.tick()
    assert "temp" in vhost.queues
    queue.remove_consumer(consumer)
    vhost.consumer_cancelled(queue)
    clock.advance(0.5)
    assert queue.get() is None  # basic.get counts as a use
    clock.advance(0.9)
    vhost.tick()
    assert "temp" in vhost.queues
    clock.advance(0.2)
    vhost.tick()
    assert "temp" not in vhost.queues


def test_publishing_does_not_keep_a_queue_alive(vhost: VirtualHost, clock: FakeClock) -> None:
    vhost.declare_queue("temp", arguments={"x-expires": 1000})
    for _ in range(3):
        clock.advance(0.4)
        vhost.publish(vhost.exchange(""), message("m", "temp"))
        vhost.tick()
    assert "temp" not in vhost.queues


def test_tick_expires_messages(vhost: VirtualHost, clock: FakeClock) -> None:
    queue = vhost.declare_queue("q", arguments={"x-message-ttl": 100})
    vhost.publish(vhost.exchange(""), message("m", "q"))
    vhost.tick()
    assert queue.message_count == 1
    clock.advance(0.2)
    vhost.tick()
    assert queue.message_count == 0
    assert queue.expired_total == 1


def test_tick_walks_the_queues_in_slices(vhost: VirtualHost, clock: FakeClock) -> None:
    """The tick's walk of thousands of queues is a slice of ``size`` queues a turn of the
    loop (issue 25, "no long stalls"): each queue is expired or deleted when its slice
    runs, by the clock read then; a queue deleted or declared again between two slices
    is skipped (not deleted for its namesake's idleness)."""
    for i in range(10):
        vhost.declare_queue(f"q{i}", arguments={"x-expires": 1000})
    clock.advance(2.0)
    steps = vhost.tick_steps(size=4)
    next(steps)  # q0-q3
    assert [f"q{i}" in vhost.queues for i in range(10)] == [False] * 4 + [True] * 6
    vhost.delete_queue("q5")
    vhost.declare_queue("q5", arguments={"x-expires": 1000})  # a new queue, just used
    vhost.declare_queue("q9", arguments={"x-expires": 1000})  # used: not idle any more
    next(steps)  # q4-q7: q5 is another queue now
    assert sorted(vhost.queues) == ["q5", "q8", "q9"]
    with pytest.raises(StopIteration):
        next(steps)  # q8-q9
    assert sorted(vhost.queues) == ["q5", "q9"]


def test_a_deleted_queue_is_freed_by_reference_counting(vhost: VirtualHost) -> None:
    """A deleted queue's objects form no reference cycle: reference counting frees them
    even when the heap is frozen (``gc.freeze()``, broker.collector), where a cycle would
    be kept until the broker stops."""
    import gc
    import weakref

    enabled = gc.isenabled()
    gc.disable()
    try:
        queue = vhost.declare_queue("q", durable=True, arguments={"x-max-priority": 3})
        vhost.bind("q", "amq.topic", "k.#")
        vhost.declare_queue("plain")
        gone = [weakref.ref(queue), weakref.ref(vhost.queues["plain"])]
        del queue
        vhost.delete_queue("q")
        vhost.delete_queue("plain")
        assert [ref() for ref in gone] == [None, None]
    finally:
        if enabled:
            gc.enable()
