"""The registry of virtual hosts, sans I/O: create, delete, listeners, queue keys."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.core.errors import AmqpError, ReplyCode
from broker.core.exchange import Binding
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts, check_vhost_name, key_of, queue_key, split_key
from tests.core.fakes import FakeClock


class Heard:
    """A configuration and vhost listener that writes down what it hears."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __getattr__(self, event: str) -> Any:
        def heard(thing: Any) -> None:
            if isinstance(thing, VirtualHost):
                vhost = thing.name
            elif isinstance(thing, Binding):
                vhost = thing.destination.vhost
            else:
                vhost = thing.vhost
            self.events.append((event, vhost, _name(thing)))

        return heard


def _name(thing: Any) -> str:
    return str(getattr(thing, "name", None) or getattr(thing, "routing_key", ""))


def test_the_default_vhost_exists_and_stays() -> None:
    vhosts = VirtualHosts()
    assert vhosts.names() == ["/"] and vhosts.get("/") is vhosts.default
    with pytest.raises(AmqpError) as info:
        vhosts.delete("/")
    assert info.value.reply_code == ReplyCode.ACCESS_REFUSED
    with pytest.raises(AmqpError) as missing:
        vhosts.delete("nope")
    assert missing.value.reply_code == ReplyCode.NOT_FOUND


def test_each_vhost_has_its_own_objects_with_the_builtin_exchanges() -> None:
    vhosts = VirtualHosts()
    other, created = vhosts.create("other")
    assert created and vhosts.create("other") == (other, False)
    assert set(other.exchanges) == set(vhosts.default.exchanges)
    assert other.exchanges["amq.direct"] is not vhosts.default.exchanges["amq.direct"]
    mine = vhosts.default.declare_queue("q")
    theirs = other.declare_queue("q")
    other.publish(other.exchange(""), Message("", "q", body=b"x"))
    assert (mine.message_count, theirs.message_count) == (0, 1)
    assert (mine.vhost, theirs.vhost, other.exchanges["amq.topic"].vhost) == ("/", "other", "other")
    assert vhosts.queue("q") is mine and vhosts.queue(key_of(theirs)) is theirs
    assert dict(vhosts.queues) == {"q": mine, queue_key("other", "q"): theirs}
    assert len(vhosts.queues) == 2


def test_one_listener_hears_every_vhost_and_a_delete_comes_after_its_objects() -> None:
    vhosts = VirtualHosts()
    heard = Heard()
    vhosts.listeners.append(heard)
    vhosts.vhost_listeners.append(heard)
    other, _ = vhosts.create("other")
    other.declare_exchange("x", "fanout", durable=True)
    other.declare_queue("q")
    other.bind("q", "x", "")
    vhosts.delete("other")
    assert heard.events == [
        ("vhost_created", "other", "other"),
        ("exchange_declared", "other", "x"),
        ("queue_declared", "other", "q"),
        ("bound", "other", ""),
        ("queue_deleted", "other", "q"),
        ("exchange_deleted", "other", "x"),
        ("vhost_deleted", "other", "other"),
    ]
    assert vhosts.names() == ["/"] and vhosts.queue(queue_key("other", "q")) is None
    assert vhosts.delete_queue(queue_key("other", "q")) == 0


def test_a_vhost_made_around_an_existing_default() -> None:
    default = VirtualHost()
    vhosts = VirtualHosts(default=default)
    assert vhosts.default is default and vhosts.listeners is default.listeners


@pytest.mark.parametrize("bad", ["", "x" * 256, "a\x00b", 7])
def test_bad_vhost_names_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        check_vhost_name(bad)


@given(st.text(min_size=1).filter(lambda v: "\x00" not in v), st.text())
def test_a_queue_key_splits_back(vhost: str, name: str) -> None:
    assert split_key(queue_key(vhost, name)) == (vhost, name)
    if vhost == "/":
        assert queue_key(vhost, name) == name


def test_the_tick_walks_every_vhost_in_slices_and_skips_one_deleted_meanwhile() -> None:
    clock = FakeClock()
    vhosts = VirtualHosts(lambda name: VirtualHost(name=name, clock=clock))
    other, _ = vhosts.create("other")
    gone, _ = vhosts.create("gone")
    for host in (vhosts.default, other, gone):
        for i in range(3):
            host.declare_queue(f"q{i}", arguments={"x-expires": 1000})
    clock.advance(2.0)
    steps = vhosts.tick_steps(size=2)
    next(steps)  # "/" q0-q1
    assert len(vhosts.queues) == 7
    vhosts.delete("gone")
    turns = 2 + sum(1 for _ in steps)  # then "/" q2; "other" q0-q1; q2 (the last ends it)
    assert turns == 4 and len(vhosts.queues) == 0
