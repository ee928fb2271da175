"""The replication contract against the real wire codecs (issue 24, item 1), in replication
format 1 (release 0.1.0's wire: the limits a cluster with a member of that release holds;
format 2's are in tests/ha/test_replication_format2.py).

Arguments are drawn as a client sends them: any field value the AMQP codec accepts, put in
a real queue.declare frame by pamqp and decoded by the broker's own frame decoder, nested up
to the AMQP limit (64). Then:

- whatever the contract accepts, the configuration wire carries unchanged, wherever the
  primary's streams put it (a queue-declared, exchange-declared or bound event, a snapshot),
  a level-``all`` queue's stream name is a valid basic.consume, and a dead-lettered
  message's exchange and routing key fit a batch;
- whatever the wire cannot carry, the contract refuses (406, naming the limit);
- plain arguments within the limits are accepted (the contract is not "refuse all").
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.amqp.framing import marshal_method, unmarshal_method
from broker.core.errors import AmqpError, ReplyCode
from broker.core.field_tables import MAX_DEPTH as AMQP_MAX_DEPTH
from broker.core.vhost import VirtualHost
from broker.ha.config_objects import binding_config, exchange_config, queue_config
from broker.ha.names import QUEUE_STREAM_PREFIX
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.replication_contract import (
    ARGUMENTS_MAX_DEPTH,
    QUEUE_NAME_MAX_BYTES,
    Floor,
    ReplicationContract,
    check_arguments,
)
from broker.ha.wire import (
    CONFIG_MAX_DEPTH,
    CONFIG_MAX_KEY_BYTES,
    Enqueue,
    decode_batch,
    decode_config_event,
    encode_batch,
    encode_config_event,
)


def _format_1() -> Floor:
    """The floor of a cluster with a member of release 0.1.0."""
    return Floor(1, "member n3 speaks no higher")


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, width=64),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=20),
    st.decimals(places=2, min_value=-(10**6), max_value=10**6, allow_nan=False),
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 2),
        max_value=datetime.datetime(2100, 1, 1),
        timezones=st.just(datetime.UTC),
    ).map(lambda t: t.replace(microsecond=0)),
    st.binary(max_size=8).map(bytearray),
)
_KEYS = st.one_of(
    st.text(min_size=1, max_size=12),
    st.text(min_size=1, max_size=90).filter(lambda k: len(k.encode()) <= 255),
)


def _tables(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(leaves, max_size=3), st.dictionaries(_KEYS, leaves, max_size=3))


_VALUES = st.recursive(_SCALARS, _tables, max_leaves=12)


@st.composite
def _nested(draw: st.DrawFn) -> Any:
    """A value wrapped ``n`` tables or arrays deep, n up to the AMQP codec's limit."""
    value = draw(_VALUES)
    for _ in range(draw(st.integers(0, AMQP_MAX_DEPTH - 2))):
        value = {draw(_KEYS): value} if draw(st.booleans()) else [value]
    return value


_ARGUMENTS = st.dictionaries(_KEYS, st.one_of(_VALUES, _nested()), max_size=4)


def _as_a_client_sends(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """``arguments`` through a real queue.declare frame: what the broker decodes (None:
    the AMQP codec refuses them, so no client can send them)."""
    try:
        frame = marshal_method(commands.Queue.Declare(queue="q", arguments=arguments), 1)
    except (TypeError, ValueError, OverflowError):
        return None
    try:
        method = unmarshal_method(frame[7:-1])
    except AmqpError:
        return None
    return dict(getattr(method, "arguments", None) or {})


def _accepted(arguments: dict[str, Any]) -> bool:
    try:
        check_arguments("queue 'q'", arguments)
    except AmqpError as refused:
        assert refused.reply_code is ReplyCode.PRECONDITION_FAILED
        return False
    return True


def _round_trip(event: dict[str, Any]) -> dict[str, Any]:
    return decode_config_event(encode_config_event(event))


def _carried_everywhere(arguments: dict[str, Any]) -> bool | None:
    """The real streams' events with ``arguments`` on a queue, an exchange and a binding,
    through the real codec: all back equal (None: the virtual host refuses these arguments
    for its own reasons, e.g. a bad ``x-overflow``; no declare gets as far as the wire)."""
    vhost = VirtualHost()
    try:
        queue = vhost.declare_queue("q", arguments=arguments)
        exchange = vhost.declare_exchange("e", "direct", arguments=arguments)
        binding = vhost.bind("q", "e", "k", arguments)
    except AmqpError:
        return None
    level = ReplicateLevel.ALL
    events: list[dict[str, Any]] = [
        {"type": "queue-declared", "queue": queue_config(queue, level)},
        {"type": "exchange-declared", "exchange": exchange_config(exchange)},
        {"type": "bound", "binding": binding_config(binding)},
        {
            "type": "snapshot",
            "queues": [queue_config(queue, level)],
            "exchanges": [exchange_config(exchange)],
            "bindings": [binding_config(binding)],
        },
    ]
    try:
        back = [_round_trip(event) for event in events]
    except ValueError:
        return False
    return (
        back[0]["queue"]["arguments"] == arguments
        and back[1]["exchange"]["arguments"] == arguments
        and back[2]["binding"]["arguments"] == arguments
        and all(
            back[3][kind][0]["arguments"] == arguments
            for kind in ("queues", "exchanges", "bindings")
        )
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ARGUMENTS)
def test_what_the_contract_accepts_the_wire_carries_and_only_that(raw: dict[str, Any]) -> None:
    arguments = _as_a_client_sends(raw)
    if arguments is None:
        return
    carried = _carried_everywhere(arguments)
    if carried is None:
        return  # refused before the contract is asked
    if _accepted(arguments):
        assert carried, arguments
    else:
        # Refused: either the wire could not carry it, or it is past a stated limit.
        from broker.core.field_tables import depth

        assert not carried or depth(arguments) > ARGUMENTS_MAX_DEPTH or _has_lossy(arguments)


def _has_lossy(value: Any) -> bool:
    """A value the wire would carry but change or truncate: refused on purpose."""
    if isinstance(value, dict):
        return any(
            len(k.encode()) > CONFIG_MAX_KEY_BYTES or _has_lossy(v) for k, v in value.items()
        )
    if isinstance(value, list):
        return any(_has_lossy(v) for v in value)
    return False


_PLAIN = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=10)),
    lambda leaves: st.one_of(
        st.lists(leaves, max_size=3),
        st.dictionaries(st.text(min_size=1, max_size=10), leaves, max_size=3),
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=10), _PLAIN, max_size=4))
def test_plain_arguments_within_the_limits_are_accepted(arguments: dict[str, Any]) -> None:
    from broker.core.field_tables import depth

    if depth(arguments) <= ARGUMENTS_MAX_DEPTH:
        assert _accepted(arguments)
        assert _carried_everywhere(arguments) is not False


def _nested_exactly(levels: int) -> dict[str, Any]:
    table: dict[str, Any] = {"leaf": "x"}
    for _ in range(levels - 1):
        table = {"n": table}
    return table


def test_the_depth_limit_is_the_wires_exactly() -> None:
    """At the limit: accepted and carried; one deeper: refused, with the numbers."""
    assert ARGUMENTS_MAX_DEPTH == CONFIG_MAX_DEPTH - 3
    at_limit = _nested_exactly(ARGUMENTS_MAX_DEPTH)
    assert _accepted(at_limit) and _carried_everywhere(at_limit)
    deeper = _nested_exactly(ARGUMENTS_MAX_DEPTH + 1)
    assert not _carried_everywhere(deeper)
    with pytest.raises(AmqpError) as refused:
        check_arguments("queue 'q'", deeper)
    assert f"nest {ARGUMENTS_MAX_DEPTH + 1} " in refused.value.reply_text
    assert f"at most {ARGUMENTS_MAX_DEPTH}" in refused.value.reply_text


_NAMES = st.text(min_size=1, max_size=255).filter(lambda n: 0 < len(n.encode()) <= 255)


@settings(max_examples=300, deadline=None)
@given(_NAMES, st.sampled_from(["all", "configuration", "none"]))
def test_an_accepted_queue_name_has_a_stream_name(name: str, level: str) -> None:
    contract = ReplicationContract(ReplicateLevel.ALL, _format_1)
    try:
        contract.check_queue("/", name, {"qpid.replicate": level})
    except AmqpError as refused:
        size = len(name.encode())
        if refused.reply_code is ReplyCode.ACCESS_REFUSED:
            assert name.startswith("qpid.ha-")
            return
        assert level == "all" and size > QUEUE_NAME_MAX_BYTES
        assert f"{size} bytes" in refused.reply_text and "255" in refused.reply_text
        with pytest.raises((ValueError, TypeError)):  # what a backup's subscribe met
            marshal_method(commands.Basic.Consume(queue=QUEUE_STREAM_PREFIX + name), 1)
        return
    if level == "all":
        marshal_method(commands.Basic.Consume(queue=QUEUE_STREAM_PREFIX + name), 1)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_an_accepted_dead_letter_target_fits_a_batch(exchange: str, routing_key: str) -> None:
    arguments = {"x-dead-letter-exchange": exchange, "x-dead-letter-routing-key": routing_key}
    contract = ReplicationContract(ReplicateLevel.ALL)
    try:
        contract.check_queue("/", "dlq", arguments)
    except AmqpError as refused:
        assert refused.reply_code is ReplyCode.PRECONDITION_FAILED
        assert max(len(exchange.encode()), len(routing_key.encode())) > 255
        return
    batch = encode_batch([Enqueue(1, exchange, routing_key, b"", b"x")])
    assert decode_batch(batch)[0] == Enqueue(1, exchange, routing_key, b"", b"x")


def test_unreplicated_objects_are_not_limited_and_reserved_names_are_refused() -> None:
    contract = ReplicationContract(ReplicateLevel.ALL)
    deep = {"x": _nested_exactly(40)}
    contract.check_queue("/", "q" * 250, {"qpid.replicate": "none", **deep})
    none = ReplicationContract(ReplicateLevel.NONE)
    none.check_queue("/", "q" * 250, deep)
    none.check_exchange("/", "e", deep)
    for kind, check in (("queue", contract.check_queue), ("exchange", contract.check_exchange)):
        with pytest.raises(AmqpError) as refused:
            check("/", "qpid.ha-queue:x", {})
        assert refused.value.reply_code is ReplyCode.ACCESS_REFUSED
        assert f"{kind} name 'qpid.ha-queue:x'" in refused.value.reply_text


def test_a_vhost_asks_its_contract_for_clients_only() -> None:
    """A client's declare, bind and exchange-to-exchange bind are checked; what HA
    replication or store recovery creates (``replicated``) and what exists already are not."""
    vhost = VirtualHost()
    vhost.contract = ReplicationContract(ReplicateLevel.ALL, _format_1)
    deep = {"x": _nested_exactly(40)}
    for declare in (
        lambda: vhost.declare_queue("q1", arguments=deep),
        lambda: vhost.declare_exchange("e1", "direct", arguments=deep),
        lambda: vhost.declare_queue("q" * 242),
    ):
        with pytest.raises(AmqpError) as refused:
            declare()
        assert refused.value.reply_code is ReplyCode.PRECONDITION_FAILED
        assert "replication format 1 (member n3 speaks no higher)" in refused.value.reply_text
    assert "q1" not in vhost.queues and "e1" not in vhost.exchanges
    vhost.declare_queue("q", durable=True)
    vhost.declare_exchange("e", "direct")
    vhost.declare_exchange("e2", "headers")
    with pytest.raises(AmqpError):
        vhost.bind("q", "e", "k", deep)
    with pytest.raises(AmqpError):
        vhost.bind_exchange("e2", "e", "k", deep)
    assert not vhost.exchanges["e"].bindings
    # passive declares: existence first (404), whatever the name
    with pytest.raises(AmqpError) as missing:
        vhost.declare_queue("q" * 250, passive=True)
    assert missing.value.reply_code is ReplyCode.NOT_FOUND
    # replication and recovery are not a client's declare
    vhost.declare_queue("r1", arguments=deep, replicated=True)
    vhost.declare_exchange("r2", "direct", arguments=deep, replicated=True)
    vhost.bind("r1", "r2", "k", deep, replicated=True)
    vhost.bind_exchange("e2", "r2", "k", deep, replicated=True)
    assert vhost.declare_queue("r1", arguments=deep).name == "r1"  # exists: not asked


def test_floats_that_32_bits_do_not_hold_are_refused_with_the_value() -> None:
    assert _accepted({"f": 0.5})
    with pytest.raises(AmqpError) as refused:
        check_arguments("queue 'q'", {"f": 0.1})
    assert "0.1" in refused.value.reply_text and "32" in refused.value.reply_text
    with pytest.raises(AmqpError) as refused:
        check_arguments("queue 'q'", {"k" * 129: 1})
    assert "129 bytes" in refused.value.reply_text
    assert _accepted({"d": decimal.Decimal("1.25"), "k" * 128: 1})
