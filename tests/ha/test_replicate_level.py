"""broker.ha.replicate_level: replication levels and what they replicate (seed 001, 1.12.7)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.core.errors import AmqpError, ReplyCode
from broker.core.exchange import Binding, DirectExchange
from broker.core.vhost import BUILTIN_EXCHANGES, VirtualHost
from broker.ha.replicate_level import (
    MANAGEMENT_EXCHANGES,
    QPID_REPLICATE,
    ReplicateLevel,
    binding_replicated,
    exchange_replicated,
    is_builtin_exchange,
    is_standard_exchange,
    level_of,
    queue_level,
)

NONE, CONFIGURATION, ALL = ReplicateLevel.NONE, ReplicateLevel.CONFIGURATION, ReplicateLevel.ALL
LEVELS = [NONE, CONFIGURATION, ALL]


@pytest.fixture
def vhost() -> VirtualHost:
    return VirtualHost(clock=lambda: 0.0, wall_clock=lambda: 0.0)


def replicate(level: str | bytes | None) -> dict[str, Any]:
    """Declare arguments setting qpid.replicate (none: no argument at all)."""
    return {} if level is None else {QPID_REPLICATE: level}


def refused(call: Any, *args: Any, **kwargs: Any) -> AmqpError:
    with pytest.raises(AmqpError) as info:
        call(*args, **kwargs)
    assert info.value.reply_code == ReplyCode.PRECONDITION_FAILED
    assert not info.value.closes_connection  # a channel error
    return info.value


# -- ReplicateLevel -----------------------------------------------------------------


def test_level_names_are_the_option_values() -> None:
    assert [level.value for level in ReplicateLevel] == ["none", "configuration", "all"]
    assert QPID_REPLICATE == "qpid.replicate"


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("none", NONE),
        ("configuration", CONFIGURATION),
        ("all", ALL),
        ("ALL", ALL),
        (" Configuration\n", CONFIGURATION),
    ],
)
def test_parse(text: str, level: ReplicateLevel) -> None:
    assert ReplicateLevel.parse(text) is level


@pytest.mark.parametrize("text", ["", "some", "config", "al", "none,all", "0"])
def test_parse_refuses_other_words(text: str) -> None:
    with pytest.raises(ValueError) as info:
        ReplicateLevel.parse(text)
    assert repr(text) in str(info.value)
    assert "none, configuration, all" in str(info.value)


def test_parse_refuses_non_text() -> None:
    with pytest.raises(ValueError, match="invalid replication level 2"):
        ReplicateLevel.parse(2)  # type: ignore[arg-type]


def test_levels_are_ordered() -> None:
    assert NONE < CONFIGURATION < ALL
    assert ALL > CONFIGURATION > NONE
    assert NONE <= NONE <= CONFIGURATION
    assert ALL >= ALL >= CONFIGURATION
    assert not CONFIGURATION < CONFIGURATION
    assert sorted([ALL, NONE, CONFIGURATION]) == LEVELS
    assert max(LEVELS) is ALL
    assert [level.rank for level in LEVELS] == [0, 1, 2]
    with pytest.raises(TypeError):
        assert NONE < "all"


@given(st.sampled_from(LEVELS), st.sampled_from(LEVELS))
def test_order_agrees_with_rank(a: ReplicateLevel, b: ReplicateLevel) -> None:
    assert (a < b) == (a.rank < b.rank)
    assert (a <= b) == (a.rank <= b.rank)
    assert (a > b) == (a.rank > b.rank)
    assert (a >= b) == (a.rank >= b.rank)
    assert (a == b) == (a.rank == b.rank)


# -- level_of -----------------------------------------------------------------------


@pytest.mark.parametrize("default", LEVELS)
def test_without_the_argument_the_default_applies(default: ReplicateLevel) -> None:
    assert level_of({}, default) is default
    assert level_of({"x-max-length": 5, "qpid.replicat": "all"}, default) is default


@pytest.mark.parametrize("default", LEVELS)
@pytest.mark.parametrize(
    ("value", "level"),
    [
        ("none", NONE),
        ("configuration", CONFIGURATION),
        ("all", ALL),
        (b"all", ALL),
        (b"configuration", CONFIGURATION),
        (bytearray(b"none"), NONE),
        ("All", ALL),
    ],
)
def test_the_argument_overrides_the_default(
    value: str | bytes, level: ReplicateLevel, default: ReplicateLevel
) -> None:
    assert level_of({QPID_REPLICATE: value}, default) is level


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("most", "'most'"),
        ("", "''"),
        (b"some", "'some'"),
        (b"\xff\xfe", "b'\\xff\\xfe'"),
        (2, "2"),
        (True, "True"),
        (None, "None"),
        (["all"], "['all']"),
    ],
)
def test_a_bad_argument_is_precondition_failed(value: object, shown: str) -> None:
    error = refused(level_of, {QPID_REPLICATE: value}, ALL)
    assert error.reply_text == (
        f"invalid arg 'qpid.replicate': {shown} (expected one of none, configuration, all)"
    )
    error = refused(level_of, {QPID_REPLICATE: value}, ALL, owner="queue 'q'")
    assert error.reply_text.startswith(f"invalid arg 'qpid.replicate' for queue 'q': {shown}")


# -- queues -------------------------------------------------------------------------


@pytest.mark.parametrize("default", LEVELS)
@pytest.mark.parametrize("argument", [None, "none", "configuration", "all"])
def test_queue_level(vhost: VirtualHost, default: ReplicateLevel, argument: str | None) -> None:
    queue = vhost.declare_queue("q", arguments=replicate(argument))
    expected = default if argument is None else ReplicateLevel(argument)
    assert queue_level(queue, default) is expected


@pytest.mark.parametrize("default", LEVELS)
def test_exclusive_and_auto_delete_queues_follow_the_same_rule(
    vhost: VirtualHost, default: ReplicateLevel
) -> None:
    owner = object()
    exclusive = vhost.declare_queue("", exclusive=True, auto_delete=True, owner=owner)
    assert queue_level(exclusive, default) is default
    pinned = vhost.declare_queue("", exclusive=True, owner=owner, arguments=replicate("all"))
    assert queue_level(pinned, default) is ALL


def test_a_bad_queue_argument_names_the_queue(vhost: VirtualHost) -> None:
    queue = vhost.declare_queue("orders", arguments=replicate("everything"))
    error = refused(queue_level, queue, NONE)
    assert error.reply_text == (
        "invalid arg 'qpid.replicate' for queue 'orders': 'everything'"
        " (expected one of none, configuration, all)"
    )


# -- exchanges ----------------------------------------------------------------------


@pytest.mark.parametrize("default", LEVELS)
@pytest.mark.parametrize("argument", [None, "none", "configuration", "all"])
def test_exchange_level(vhost: VirtualHost, default: ReplicateLevel, argument: str | None) -> None:
    exchange = vhost.declare_exchange("x", "topic", arguments=replicate(argument))
    expected = default if argument is None else ReplicateLevel(argument)
    assert exchange_replicated(exchange, default) is expected
    assert not is_builtin_exchange(exchange)


@pytest.mark.parametrize("name", ["", *BUILTIN_EXCHANGES])
def test_builtin_exchanges_are_never_replicated(vhost: VirtualHost, name: str) -> None:
    exchange = vhost.exchange(name)
    assert exchange.builtin
    assert is_builtin_exchange(exchange)
    for default in LEVELS:
        assert exchange_replicated(exchange, default) is NONE


@pytest.mark.parametrize("name", sorted(MANAGEMENT_EXCHANGES))
def test_management_exchanges_are_never_replicated(vhost: VirtualHost, name: str) -> None:
    # Our broker does not reserve these names, but the seed lists them among the built-ins.
    exchange = vhost.declare_exchange(name, "topic", arguments=replicate("all"))
    assert is_builtin_exchange(exchange)
    assert exchange_replicated(exchange, ALL) is NONE


def test_builtin_exchanges_ignore_their_arguments() -> None:
    # Even a (built-in) exchange carrying qpid.replicate, good or bad, is not replicated.
    for value in ["all", "garbage"]:
        exchange = DirectExchange("amq.direct", builtin=True, arguments=replicate(value))
        assert exchange_replicated(exchange, ALL) is NONE
    assert exchange_replicated(DirectExchange("amq.other", arguments=replicate("all")), ALL) is NONE


def test_a_bad_exchange_argument_names_the_exchange(vhost: VirtualHost) -> None:
    exchange = vhost.declare_exchange("prices", "fanout", arguments=replicate(b"most"))
    error = refused(exchange_replicated, exchange, ALL)
    assert error.reply_text.startswith("invalid arg 'qpid.replicate' for exchange 'prices': 'most'")


# -- bindings -----------------------------------------------------------------------


def bind(
    vhost: VirtualHost, queue_level_arg: str | None, exchange_level_arg: str | None
) -> Binding:
    vhost.declare_queue("q", arguments=replicate(queue_level_arg))
    vhost.declare_exchange("x", "direct", arguments=replicate(exchange_level_arg))
    return vhost.bind("q", "x", "key")


@pytest.mark.parametrize("default", LEVELS)
@pytest.mark.parametrize("queue_arg", [None, "none", "configuration", "all"])
@pytest.mark.parametrize("exchange_arg", [None, "none", "configuration", "all"])
def test_binding_replicated_when_both_ends_are(
    vhost: VirtualHost,
    default: ReplicateLevel,
    queue_arg: str | None,
    exchange_arg: str | None,
) -> None:
    binding = bind(vhost, queue_arg, exchange_arg)
    queue = default if queue_arg is None else ReplicateLevel(queue_arg)
    exchange = default if exchange_arg is None else ReplicateLevel(exchange_arg)
    expected = queue != NONE and exchange != NONE
    assert binding_replicated(binding, default, exchange=vhost.exchange("x")) is expected


STANDARD = sorted(name for name in BUILTIN_EXCHANGES if name.startswith("amq."))


@pytest.mark.parametrize("name", STANDARD)
@pytest.mark.parametrize("default", LEVELS)
@pytest.mark.parametrize("queue_arg", [None, "none", "configuration", "all"])
def test_bindings_to_standard_exchanges_follow_their_queue(
    vhost: VirtualHost, name: str, default: ReplicateLevel, queue_arg: str | None
) -> None:
    """amq.topic and the like are on every broker: a binding to one is replicated when its
    queue is (RabbitMQ keeps them over a fail-over), on a link whose format carries them."""
    vhost.declare_queue("q", arguments=replicate(queue_arg))
    arguments = {"x-match": "all", "a": 1} if name in ("amq.headers", "amq.match") else {}
    binding = vhost.bind("q", name, "q.#", arguments)
    exchange = vhost.exchange(name)
    assert is_standard_exchange(exchange) and exchange_replicated(exchange, ALL) is NONE
    queue = default if queue_arg is None else ReplicateLevel(queue_arg)
    expected = queue is not NONE
    assert binding_replicated(binding, default, exchange=exchange) is expected
    assert binding_replicated(binding, default, exchange=exchange, standard_exchanges=True) is (
        expected
    )
    # a link of format 1 to 3 is sent none (release 0.1.0 kept a leftover one)
    assert (
        binding_replicated(binding, default, exchange=exchange, standard_exchanges=False) is False
    )


def test_exchange_to_exchange_bindings_between_standard_exchanges(vhost: VirtualHost) -> None:
    binding = vhost.bind_exchange("amq.fanout", "amq.topic", "a.#")
    assert binding_replicated(binding, NONE, exchange=vhost.exchange("amq.topic")) is True
    own = vhost.declare_exchange("mine", "fanout", arguments=replicate("none"))
    to_own = vhost.bind_exchange(own.name, "amq.direct", "k")
    assert binding_replicated(to_own, ALL, exchange=vhost.exchange("amq.direct")) is False


def test_default_exchange_bindings_stay_implicit(vhost: VirtualHost) -> None:
    """Every queue is bound to the default exchange by its name: nothing to replicate (and
    no client may bind to it), so no such binding is ever listed or sent."""
    vhost.declare_queue("q", arguments=replicate("all"))
    default_exchange = vhost.exchange("")
    assert not is_standard_exchange(default_exchange) and is_builtin_exchange(default_exchange)
    with pytest.raises(AmqpError):
        vhost.bind("q", "", "q")
    assert all(b.exchange != "" for b in vhost.bindings())


def test_bindings_to_header_exchanges_follow_the_same_rules(vhost: VirtualHost) -> None:
    vhost.declare_queue("q", arguments=replicate("all"))
    builtin = vhost.bind("q", "amq.match", "", {"x-match": "all", "a": 1})
    assert binding_replicated(builtin, ALL, exchange=vhost.exchange("amq.match")) is True
    vhost.declare_exchange("h", "headers")
    own = vhost.bind("q", "h", "", {"x-match": "any", "a": 1})
    assert binding_replicated(own, CONFIGURATION, exchange=vhost.exchange("h")) is True
    assert binding_replicated(own, NONE, exchange=vhost.exchange("h")) is False


def test_binding_with_the_wrong_exchange_is_a_bug(vhost: VirtualHost) -> None:
    binding = bind(vhost, "all", "all")
    other = vhost.declare_exchange("y", "direct", arguments=replicate("all"))
    with pytest.raises(ValueError, match="binding is on exchange 'x', not on 'y'"):
        binding_replicated(binding, ALL, exchange=other)


def test_a_bad_argument_on_either_end_of_a_binding_is_refused(vhost: VirtualHost) -> None:
    binding = bind(vhost, "sometimes", "all")
    refused(binding_replicated, binding, ALL, exchange=vhost.exchange("x"))
    vhost2 = VirtualHost(clock=lambda: 0.0, wall_clock=lambda: 0.0)
    binding = bind(vhost2, "all", "sometimes")
    refused(binding_replicated, binding, ALL, exchange=vhost2.exchange("x"))
