"""Exchange-to-exchange bindings (RabbitMQ's exchange.bind): routing through chains and
loops, alternate exchanges on the way, unbind and delete rules, listeners."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.errors import AmqpError, ReplyCode
from broker.core.exchange import Exchange
from broker.core.vhost import VirtualHost
from tests.core.fakes import RecordingListener, message


def routed(vhost: VirtualHost, exchange: str, key: str = "k") -> list[str]:
    return [q.name for q in vhost.route(vhost.exchange(exchange), message("m", key, exchange))]


def refused(code: ReplyCode, call: object, *args: object) -> None:
    with pytest.raises(AmqpError) as info:
        call(*args)  # type: ignore[operator]
    assert info.value.reply_code == code, info.value


def test_chain_of_exchanges_routes_by_each_exchange_rules() -> None:
    vhost = VirtualHost()
    vhost.declare_exchange("front", "topic")
    vhost.declare_exchange("middle", "direct")
    vhost.declare_exchange("back", "fanout")
    for name in ("near", "mid", "far"):
        vhost.declare_queue(name)
    vhost.bind("near", "front", "orders.#")
    binding = vhost.bind_exchange("middle", "front", "orders.*")
    assert binding.to_exchange and binding.destination_type == "exchange"
    assert vhost.bind_exchange("middle", "front", "orders.*") is binding  # idempotent
    vhost.bind("mid", "middle", "orders.eu")
    vhost.bind_exchange("back", "middle", "orders.eu")
    vhost.bind("far", "back", "")
    assert routed(vhost, "front", "orders.eu") == ["near", "mid", "far"]
    assert routed(vhost, "front", "orders.us") == ["near"]
    assert routed(vhost, "front", "orders.eu.x") == ["near"]
    assert routed(vhost, "middle", "orders.eu") == ["mid", "far"]


def test_loops_end_and_each_queue_gets_one_copy() -> None:
    vhost = VirtualHost()
    for name in ("a", "b", "c"):
        vhost.declare_exchange(name, "fanout")
    vhost.declare_queue("q")
    vhost.bind_exchange("b", "a", "")
    vhost.bind_exchange("c", "b", "")
    vhost.bind_exchange("a", "c", "")
    vhost.bind_exchange("a", "a", "")  # an exchange bound to itself
    vhost.bind("q", "a", "")
    vhost.bind("q", "c", "")
    for start in ("a", "b", "c"):
        assert routed(vhost, start) == ["q"]
    result = vhost.publish(vhost.exchange("b"), message("m", "", "b"))
    assert result.queues == 1
    assert vhost.queues["q"].message_count == 1


def test_alternate_exchange_is_used_where_an_exchange_routes_nowhere() -> None:
    vhost = VirtualHost()
    vhost.declare_exchange("ae", "fanout")
    vhost.declare_queue("unrouted")
    vhost.bind("unrouted", "ae", "")
    vhost.declare_exchange("inner", "direct", arguments={"alternate-exchange": "ae"})
    vhost.declare_exchange("outer", "fanout")
    vhost.bind_exchange("inner", "outer", "")
    vhost.declare_queue("hit")
    vhost.bind("hit", "inner", "yes")
    assert routed(vhost, "outer", "yes") == ["hit"]
    # outer routes to inner, inner to nothing: inner's alternate exchange takes it
    assert routed(vhost, "outer", "no") == ["unrouted"]
    # an exchange that routes only to an exchange that routes nowhere keeps its message
    # from its own alternate exchange (RabbitMQ: it routed somewhere)
    vhost.declare_exchange("sink", "direct")
    vhost.declare_exchange("top", "fanout", arguments={"alternate-exchange": "ae"})
    vhost.bind_exchange("sink", "top", "")
    assert routed(vhost, "top") == []


def test_unbind_and_errors() -> None:
    vhost = VirtualHost()
    listener = RecordingListener()
    vhost.listeners.append(listener)
    vhost.declare_exchange("src", "direct")
    vhost.declare_exchange("dst", "fanout")
    vhost.declare_queue("dst")  # a queue named as the exchange: another destination
    vhost.bind_exchange("dst", "src", "k")
    vhost.bind("dst", "src", "k")
    assert len(vhost.exchange("src").bindings) == 2
    vhost.unbind("dst", "src", "k")  # the queue's binding only
    assert [b.destination_type for b in vhost.bindings()] == ["exchange"]
    vhost.unbind_exchange("dst", "src", "k")
    vhost.unbind_exchange("dst", "src", "k")  # not bound: unbind-ok
    vhost.unbind_exchange("gone", "src", "k")
    vhost.unbind_exchange("dst", "gone", "k")
    assert vhost.bindings() == []
    assert listener.events[-4:] == [
        ("bound", "src->dst"),
        ("bound", "src->dst"),
        ("unbound", "src->dst"),
        ("unbound", "src->dst"),
    ]
    refused(ReplyCode.NOT_FOUND, vhost.bind_exchange, "gone", "src", "k")
    refused(ReplyCode.NOT_FOUND, vhost.bind_exchange, "dst", "gone", "k")
    refused(ReplyCode.ACCESS_REFUSED, vhost.bind_exchange, "", "src", "k")
    refused(ReplyCode.ACCESS_REFUSED, vhost.bind_exchange, "dst", "", "k")
    refused(ReplyCode.ACCESS_REFUSED, vhost.unbind_exchange, "", "src", "k")
    vhost.declare_exchange("h", "headers")
    refused(ReplyCode.PRECONDITION_FAILED, vhost.bind_exchange, "dst", "h", "", {"x-match": "no"})


def test_deleting_an_exchange_removes_bindings_to_it_and_auto_deletes_sources() -> None:
    vhost = VirtualHost()
    vhost.declare_exchange("src", "fanout", auto_delete=True)
    vhost.declare_exchange("keep", "fanout")
    vhost.declare_exchange("dst", "fanout")
    vhost.bind_exchange("dst", "src", "")
    vhost.bind_exchange("dst", "keep", "")
    vhost.bind_exchange("keep", "dst", "")
    refused(ReplyCode.PRECONDITION_FAILED, lambda: vhost.delete_exchange("dst", if_unused=True))
    vhost.delete_exchange("dst")
    assert "src" not in vhost.exchanges  # its last binding went: auto-deleted
    assert vhost.exchange("keep").bindings == {}
    assert vhost.exchange("keep").exchange_destinations == 0
    assert vhost.bindings() == []
    # an auto-delete source goes with its last exchange binding too
    vhost.declare_exchange("auto", "direct", auto_delete=True)
    vhost.bind_exchange("keep", "auto", "k")
    vhost.unbind_exchange("keep", "auto", "k")
    assert "auto" not in vhost.exchanges


def test_publish_counts_and_dead_letters_through_a_chain() -> None:
    vhost = VirtualHost()
    vhost.declare_exchange("dlx", "fanout")
    vhost.declare_exchange("dl-spread", "fanout")
    vhost.bind_exchange("dl-spread", "dlx", "")
    vhost.declare_queue("dead")
    vhost.bind("dead", "dl-spread", "")
    work = vhost.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx"})
    vhost.publish(vhost.exchange(""), message("m", "work"))
    vhost.purge_queue("work")  # purge does not dead-letter
    vhost.publish(vhost.exchange(""), message("m", "work"))
    entry = work.get()
    assert entry is not None
    work.delivered(entry, False)
    work.reject(entry, requeue=False)
    assert vhost.queues["dead"].message_count == 1


# -- any graph: every queue reachable through matching bindings, once, in finite time ------
_EXCHANGES = ["e0", "e1", "e2", "e3", "e4"]
_QUEUES = ["q0", "q1", "q2"]


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    keys = st.sampled_from(["k", "x"])
    e2e = draw(st.lists(st.tuples(st.sampled_from(_EXCHANGES), st.sampled_from(_EXCHANGES), keys)))
    e2q = draw(st.lists(st.tuples(st.sampled_from(_EXCHANGES), st.sampled_from(_QUEUES), keys)))
    return e2e, e2q


def _expected(
    start: str, key: str, e2e: list[tuple[str, str, str]], e2q: list[tuple[str, str, str]]
) -> set[str]:
    seen, work = {start}, deque([start])
    queues: set[str] = set()
    while work:
        source = work.popleft()
        queues.update(q for s, q, k in e2q if s == source and k == key)
        for s, d, k in e2e:
            if s == source and k == key and d not in seen:
                seen.add(d)
                work.append(d)
    return queues


@settings(max_examples=200, deadline=None)
@given(graphs(), st.sampled_from(_EXCHANGES), st.sampled_from(["k", "x"]))
def test_routing_through_any_graph(
    graph: tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]], start: str, key: str
) -> None:
    e2e, e2q = graph
    vhost = VirtualHost()
    for name in _EXCHANGES:
        vhost.declare_exchange(name, "direct")
    for name in _QUEUES:
        vhost.declare_queue(name)
    for source, destination, k in e2e:
        vhost.bind_exchange(destination, source, k)
    for source, queue, k in e2q:
        vhost.bind(queue, source, k)
    result = routed(vhost, start, key)
    assert len(result) == len(set(result))
    assert set(result) == _expected(start, key, e2e, e2q)
    # unbinding everything leaves plain exchanges routing nowhere
    for source, destination, k in e2e:
        vhost.unbind_exchange(destination, source, k)
    exchanges: list[Exchange] = [vhost.exchange(n) for n in _EXCHANGES]
    assert all(e.exchange_destinations == 0 for e in exchanges)
    assert set(routed(vhost, start, key)) == {q for s, q, k in e2q if s == start and k == key}
