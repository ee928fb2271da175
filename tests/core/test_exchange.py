"""Exchanges: routing by type, binding bookkeeping, and alternate exchanges."""

from __future__ import annotations

from typing import Any

import pytest

from broker.core.errors import AmqpError, ReplyCode
from broker.core.exchange import (
    EXCHANGE_TYPES,
    Binding,
    DefaultExchange,
    DirectExchange,
    Exchange,
    FanoutExchange,
    HeadersExchange,
    TopicExchange,
    binding_key,
)
from broker.core.message import Message
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from tests.core.fakes import FakeClock, message


def make_queues(*names: str) -> list[Queue]:
    clock = FakeClock()
    return [Queue(name, clock=clock) for name in names]


def bind(exchange: Exchange, queue: Queue, key: str = "", **arguments: Any) -> bool:
    return exchange.bind(Binding(exchange.name, queue, key, dict(arguments)))


def routed(exchange: Exchange, msg: Message) -> list[str]:
    return [q.name for q in exchange.route(msg)]


def test_exchange_types() -> None:
    assert {
        "direct": DirectExchange,
        "fanout": FanoutExchange,
        "topic": TopicExchange,
        "headers": HeadersExchange,
    } == EXCHANGE_TYPES
    for type_name, cls in EXCHANGE_TYPES.items():
        exchange = cls("x")
        assert exchange.type == type_name
        assert exchange.bindings == {}
        assert not exchange.had_bindings


def test_direct_routes_by_exact_key() -> None:
    q1, q2, q3 = make_queues("q1", "q2", "q3")
    exchange = DirectExchange("d")
    assert bind(exchange, q1, "a")
    assert bind(exchange, q2, "a")
    assert bind(exchange, q3, "b")
    assert bind(exchange, q1, "b")
    assert routed(exchange, message(routing_key="a")) == ["q1", "q2"]
    assert routed(exchange, message(routing_key="b")) == ["q3", "q1"]
    assert routed(exchange, message(routing_key="A")) == []
    assert routed(exchange, message(routing_key="a.b")) == []
    assert routed(exchange, message(routing_key="")) == []


def test_direct_empty_key_binding() -> None:
    (q,) = make_queues("q")
    exchange = DirectExchange("d")
    bind(exchange, q, "")
    assert routed(exchange, message(routing_key="")) == ["q"]
    assert routed(exchange, message(routing_key="x")) == []


def test_duplicate_binding_is_refused_and_arguments_distinguish() -> None:
    (q,) = make_queues("q")
    exchange = DirectExchange("d")
    assert bind(exchange, q, "a")
    assert not bind(exchange, q, "a")
    assert bind(exchange, q, "a", extra=1)  # different arguments: a different binding
    assert len(exchange.bindings) == 2
    # the queue is still routed once
    assert routed(exchange, message(routing_key="a")) == ["q"]


def test_binding_key_ignores_argument_order() -> None:
    assert binding_key("q", "k", {"a": 1, "b": "x"}) == binding_key("q", "k", {"b": "x", "a": 1})
    assert binding_key("q", "k", {"a": 1}) != binding_key("q", "k", {"a": "1"})
    assert binding_key("q", "k", {}) != binding_key("q", "k2", {})
    assert binding_key("q", "k", {}) != binding_key("q2", "k", {})


def test_unbind_updates_routing() -> None:
    q1, q2 = make_queues("q1", "q2")
    for exchange in (DirectExchange("d"), FanoutExchange("f"), TopicExchange("t")):
        bind(exchange, q1, "a")
        bind(exchange, q2, "a")
        assert routed(exchange, message(routing_key="a")) == ["q1", "q2"]
        removed = exchange.unbind(binding_key("q1", "a", {}))
        assert removed is not None and removed.queue is q1
        assert exchange.unbind(binding_key("q1", "a", {})) is None
        assert routed(exchange, message(routing_key="a")) == ["q2"]
        assert exchange.had_bindings


def test_fanout_routes_to_every_queue_once() -> None:
    q1, q2 = make_queues("q1", "q2")
    exchange = FanoutExchange("f")
    assert routed(exchange, message(routing_key="x")) == []
    bind(exchange, q1, "a")
    bind(exchange, q2, "b")
    bind(exchange, q1, "c")
    for key in ("a", "b", "zzz", ""):
        assert routed(exchange, message(routing_key=key)) == ["q1", "q2"]


def test_topic_routes_by_pattern() -> None:
    q1, q2, q3 = make_queues("q1", "q2", "q3")
    exchange = TopicExchange("t")
    bind(exchange, q1, "stock.*.nyse")
    bind(exchange, q2, "stock.#")
    bind(exchange, q3, "#.nyse")
    bind(exchange, q2, "*.ibm.*")
    assert routed(exchange, message(routing_key="stock.ibm.nyse")) == ["q1", "q2", "q3"]
    assert routed(exchange, message(routing_key="stock")) == ["q2"]
    assert routed(exchange, message(routing_key="bond.ibm.nyse")) == ["q3", "q2"]
    assert routed(exchange, message(routing_key="bond.x")) == []


def test_topic_cache_is_invalidated_by_binding_changes() -> None:
    q1, q2 = make_queues("q1", "q2")
    exchange = TopicExchange("t")
    bind(exchange, q1, "a.*")
    msg = message(routing_key="a.b")
    assert routed(exchange, msg) == ["q1"]
    assert routed(exchange, msg) == ["q1"]  # cached
    bind(exchange, q2, "#")
    assert routed(exchange, msg) == ["q1", "q2"]
    exchange.unbind(binding_key("q1", "a.*", {}))
    assert routed(exchange, msg) == ["q2"]


def test_topic_cache_limit() -> None:
    (q,) = make_queues("q")
    exchange = TopicExchange("t")
    exchange._CACHE_LIMIT = 3
    bind(exchange, q, "#")
    for i in range(10):
        assert routed(exchange, message(routing_key=f"k{i}")) == ["q"]
        assert len(exchange._cache) <= 3


def test_headers_exchange_routes_on_headers() -> None:
    q_all, q_any, q_void = make_queues("all", "any", "void")
    exchange = HeadersExchange("h")
    bind(exchange, q_all, "ignored", **{"x-match": "all", "format": "pdf", "type": "report"})
    bind(exchange, q_any, "", **{"x-match": "any", "format": "pdf", "type": "log"})
    bind(exchange, q_void, "", present=None)
    assert routed(exchange, message(headers={"format": "pdf", "type": "report"})) == ["all", "any"]
    assert routed(exchange, message(headers={"type": "log", "present": 1})) == ["any", "void"]
    assert routed(exchange, message(headers={"format": "doc"})) == []
    assert routed(exchange, message()) == []


def test_headers_exchange_empty_binding_matches_all_messages() -> None:
    (q,) = make_queues("q")
    exchange = HeadersExchange("h")
    bind(exchange, q, "")
    assert routed(exchange, message()) == ["q"]
    assert routed(exchange, message(headers={"a": 1})) == ["q"]


def test_headers_exchange_validates_x_match() -> None:
    exchange = HeadersExchange("h")
    exchange.validate_binding({"x-match": "any"})
    with pytest.raises(AmqpError) as info:
        exchange.validate_binding({"x-match": "most"})
    assert info.value.reply_code == ReplyCode.PRECONDITION_FAILED
    # other types accept any arguments
    DirectExchange("d").validate_binding({"x-match": "most"})


def test_default_exchange_routes_by_queue_name() -> None:
    q1, q2 = make_queues("q1", "q2")
    queues = {"q1": q1, "q2": q2}
    exchange = DefaultExchange(queues)
    assert exchange.name == ""
    assert exchange.type == "direct"
    assert exchange.builtin and exchange.durable
    assert routed(exchange, message(routing_key="q2")) == ["q2"]
    assert routed(exchange, message(routing_key="q3")) == []
    del queues["q2"]
    assert routed(exchange, message(routing_key="q2")) == []


def test_alternate_exchange_property() -> None:
    assert DirectExchange("d").alternate_exchange is None
    assert DirectExchange("d", arguments={"alternate-exchange": "ae"}).alternate_exchange == "ae"
    assert DirectExchange("d", arguments={"alternate-exchange": 5}).alternate_exchange is None


# -- routing through a virtual host --------------------------------------------------------
@pytest.fixture
def vhost() -> VirtualHost:
    return VirtualHost(clock=FakeClock(), wall_clock=lambda: 0.0)


def names(queues: list[Queue]) -> list[str]:
    return [q.name for q in queues]


def test_each_builtin_exchange_routes(vhost: VirtualHost) -> None:
    for name in ("q1", "q2"):
        vhost.declare_queue(name)
    vhost.bind("q1", "amq.direct", "k")
    vhost.bind("q1", "amq.fanout", "")
    vhost.bind("q2", "amq.fanout", "")
    vhost.bind("q2", "amq.topic", "k.#")
    vhost.bind("q1", "amq.match", "", {"h": 1})
    vhost.bind("q2", "amq.headers", "", {"x-match": "any", "h": 2})
    route = vhost.route
    assert names(route(vhost.exchange("amq.direct"), message(routing_key="k"))) == ["q1"]
    assert names(route(vhost.exchange("amq.fanout"), message(routing_key="z"))) == ["q1", "q2"]
    assert names(route(vhost.exchange("amq.topic"), message(routing_key="k.x"))) == ["q2"]
    assert names(route(vhost.exchange("amq.match"), message(headers={"h": 1}))) == ["q1"]
    assert names(route(vhost.exchange("amq.headers"), message(headers={"h": 2}))) == ["q2"]
    assert names(route(vhost.exchange(""), message(routing_key="q2"))) == ["q2"]


def test_publish_result_and_counters(vhost: VirtualHost) -> None:
    vhost.declare_queue("q1")
    vhost.declare_queue("full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    vhost.declare_exchange("f", "fanout")
    vhost.bind("q1", "f", "")
    vhost.bind("full", "f", "")
    fanout = vhost.exchange("f")
    result = vhost.publish(fanout, message("x"))
    assert (result.queues, result.rejected, result.routed) == (2, 1, True)
    assert vhost.queue("q1").message_count == 1
    result = vhost.publish(vhost.exchange(""), message("x", routing_key="nowhere"))
    assert (result.queues, result.rejected, result.routed) == (0, 0, False)
    assert vhost.published_total == 2
    assert vhost.unroutable_total == 1
    assert fanout.routed_total == 1
    assert vhost.exchange("").unroutable_total == 1


def test_alternate_exchange_takes_unroutable_messages(vhost: VirtualHost) -> None:
    vhost.declare_exchange("ae", "fanout")
    vhost.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    vhost.declare_queue("routed")
    vhost.declare_queue("unrouted")
    vhost.bind("routed", "main", "k")
    vhost.bind("unrouted", "ae", "")
    main = vhost.exchange("main")
    assert names(vhost.route(main, message(routing_key="k"))) == ["routed"]
    assert names(vhost.route(main, message(routing_key="other"))) == ["unrouted"]
    result = vhost.publish(main, message("x", routing_key="other"))
    assert result.routed
    assert vhost.queue("unrouted").message_count == 1
    # the message keeps its original exchange and routing key
    (entry,) = vhost.queue("unrouted").entries()
    assert (entry.message.exchange, entry.message.routing_key) == ("", "other")


def test_alternate_exchange_chain(vhost: VirtualHost) -> None:
    vhost.declare_exchange("ae2", "fanout")
    vhost.declare_exchange("ae1", "direct", arguments={"alternate-exchange": "ae2"})
    vhost.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae1"})
    vhost.declare_queue("q1")
    vhost.declare_queue("q2")
    vhost.bind("q1", "ae1", "k1")
    vhost.bind("q2", "ae2", "")
    main = vhost.exchange("main")
    assert names(vhost.route(main, message(routing_key="k1"))) == ["q1"]
    assert names(vhost.route(main, message(routing_key="k2"))) == ["q2"]


def test_alternate_exchange_loops_terminate(vhost: VirtualHost) -> None:
    vhost.declare_exchange("a", "direct", arguments={"alternate-exchange": "b"})
    vhost.declare_exchange("b", "direct", arguments={"alternate-exchange": "c"})
    vhost.declare_exchange("c", "direct", arguments={"alternate-exchange": "a"})
    vhost.declare_exchange("self", "direct", arguments={"alternate-exchange": "self"})
    assert vhost.route(vhost.exchange("a"), message(routing_key="k")) == []
    assert vhost.route(vhost.exchange("self"), message(routing_key="k")) == []
    assert not vhost.publish(vhost.exchange("a"), message(routing_key="k")).routed
    # a queue bound anywhere in the loop is found
    vhost.declare_queue("q")
    vhost.bind("q", "c", "k")
    assert names(vhost.route(vhost.exchange("a"), message(routing_key="k"))) == ["q"]


def test_missing_alternate_exchange_is_unroutable(vhost: VirtualHost) -> None:
    vhost.declare_exchange("main", "direct", arguments={"alternate-exchange": "gone"})
    assert vhost.route(vhost.exchange("main"), message(routing_key="k")) == []
    vhost.declare_exchange("gone", "fanout")
    vhost.declare_queue("q")
    vhost.bind("q", "gone", "")
    assert names(vhost.route(vhost.exchange("main"), message(routing_key="k"))) == ["q"]


def test_internal_alternate_exchange_still_routes(vhost: VirtualHost) -> None:
    vhost.declare_exchange("ae", "fanout", internal=True)
    vhost.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    vhost.declare_queue("q")
    vhost.bind("q", "ae", "")
    assert names(vhost.route(vhost.check_publish("main"), message(routing_key="x"))) == ["q"]
