"""Replication format 2 (issue 24): every name and every field table a client may declare
replicates; the contract holds the lowest format the cluster may use.

- sans-I/O codec: any field table the AMQP codec accepts, drawn as raw AMQP bytes of every
  field type (64-bit floats and NaN, decimals, timestamps in seconds and in milliseconds,
  byte arrays, void, long strings that are not UTF-8), field names of 0-255 bytes, nested
  up to the codec's 64 levels, decoded by the broker's own frame decoder: format 2's
  contract accepts it and format 2's codec brings it back equal in every event the
  primary's streams put it in; any name of 1-255 bytes has a format-2 stream;
- edges and refusals of the codec, named;
- the floor: a backup link admitted with format 1 (or a member the cluster manager reports)
  holds declares to format 1's limits, with a 406 naming it; the opposite direction, a
  format-1 backup dialling a primary that holds what format 1 cannot carry, is refused at
  connection.open with 540 naming the backup, its format and the object.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import math
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.amqp.framing import marshal_method, unmarshal_method
from broker.core.errors import AmqpError, ReplyCode
from broker.core.field_tables import MAX_DEPTH as AMQP_MAX_DEPTH
from broker.core.vhost import VirtualHost
from broker.ha import wire_config2
from broker.ha.config_objects import binding_config, exchange_config, queue_config
from broker.ha.link_format import CODECS
from broker.ha.names import FORMATS_PROPERTY, QUEUE_ARGUMENT, QUEUE_STREAM
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.replication_contract import (
    ContractFloor,
    Floor,
    ReplicationContract,
    Uncarried,
    arguments_max_depth,
    check_arguments,
    first_uncarried,
)
from common.formats import FormatRange
from tests.field_table_strategies import as_the_broker_decodes, long_bytes, raw_arguments, same
from tests.ha.test_ha_broker import ha_broker, open_connection

FORMAT_2 = Floor(2)
CODEC = CODECS[2]


def _carried_in_every_event(arguments: dict[str, Any]) -> bool | None:
    vhost = VirtualHost()
    try:
        queue = vhost.declare_queue("q", arguments=arguments)
        exchange = vhost.declare_exchange("e", "direct", arguments=arguments)
        binding = vhost.bind("q", "e", "k", arguments)
    except AmqpError:
        return None  # the virtual host's own rules (an x- argument's value)
    level = ReplicateLevel.ALL
    snapshot = {
        "type": "snapshot",
        "queues": [queue_config(queue, level)],
        "exchanges": [exchange_config(exchange)],
        "bindings": [binding_config(binding)],
    }
    back = CODEC.decode_config_event(CODEC.encode_config_event(snapshot))
    return all(
        same(back[kind][0]["arguments"], arguments) for kind in ("queues", "exchanges", "bindings")
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_arguments())
def test_every_field_table_the_amqp_codec_accepts_replicates_in_format_2(table: bytes) -> None:
    arguments = as_the_broker_decodes(table)
    if arguments is None:
        return
    check_arguments("queue 'q'", arguments, FORMAT_2)  # accepted: no 406
    assert _carried_in_every_event(arguments) is not False, arguments


def test_the_deepest_and_widest_the_codec_accepts_are_carried() -> None:
    deepest: Any = {"leaf": float("nan")}
    for _ in range(AMQP_MAX_DEPTH - 2):  # with the arguments table: 64 levels
        deepest = {"é" * 127: deepest}  # a 254-byte field name at every level
    arguments = {
        "k" * 255: deepest,
        "": [
            -0.0,
            math.inf,
            0.1,
            decimal.Decimal("-1.5"),
            decimal.Decimal(2**32 - 1).scaleb(-255),
            # milliseconds past 2106, as pamqp reads a timestamp's u64 there
            datetime.datetime.fromtimestamp(10413792000001 / 1000.0, tz=datetime.UTC),
            datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC),
            b"\xff\xfe",
            bytearray(b"\x00"),
            None,
            True,
            -(2**63),
        ],
    }
    assert arguments_max_depth(CODEC) == AMQP_MAX_DEPTH
    check_arguments("queue 'q'", arguments, FORMAT_2)
    assert _carried_in_every_event(arguments)
    with pytest.raises(AmqpError, match="not carried unchanged by replication format 2"):
        check_arguments("queue 'q'", {"b": b"utf-8"}, FORMAT_2)  # no client sends these


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"type": "t", "k" * 256: 1}, "256 bytes, more than 255"),
        ({"type": "t", "v": 2**63}, "does not fit in 64 bits"),
        ({"type": "t", "v": decimal.Decimal("NaN")}, "not finite"),
        ({"type": "t", "v": decimal.Decimal(1).scaleb(-256)}, "scale of 0-255"),
        ({"type": "t", "v": object()}, "type object cannot be carried"),
        ({"type": "t", "v": datetime.datetime(1969, 1, 1, tzinfo=datetime.UTC)}, "timestamp"),
        ({"type": 1}, "needs a str 'type'"),
    ],
)
def test_format_2_refuses_what_it_cannot_carry_exactly(event: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        wire_config2.encode_config_event(event)


def test_format_2_nests_to_the_codec_s_limit_in_a_snapshot_and_no_further() -> None:
    def nested(levels: int) -> Any:
        value: Any = 1
        for _ in range(levels):
            value = [value]
        return value

    at_limit = {"type": "t", "v": nested(wire_config2.MAX_DEPTH - 1)}
    assert wire_config2.decode_config_event(wire_config2.encode_config_event(at_limit)) == at_limit
    with pytest.raises(ValueError, match="nested more than 67 deep"):
        wire_config2.encode_config_event({"type": "t", "v": nested(wire_config2.MAX_DEPTH)})
    deeper = b"A" + struct.pack(">I", 5) + b"A" + struct.pack(">I", 0)
    for _ in range(wire_config2.MAX_DEPTH):
        deeper = b"A" + long_bytes(deeper)
    body = b"\x01v" + deeper
    with pytest.raises(ValueError, match="nested more than 67 deep"):
        wire_config2.decode_config_event(long_bytes(b"\x04typeS" + long_bytes(b"t") + body))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_format_2_decoder_raises_only_value_error(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        wire_config2.decode_config_event(data)


_NAMES = st.text(min_size=1, max_size=255).filter(lambda n: 0 < len(n.encode()) <= 255)


@settings(max_examples=200, deadline=None)
@given(_NAMES)
def test_any_name_of_1_to_255_bytes_has_a_format_2_stream(name: str) -> None:
    contract = ReplicationContract(ReplicateLevel.ALL, lambda: FORMAT_2)
    try:
        contract.check_queue("/", name, {})
    except AmqpError as refused:
        assert refused.reply_code is ReplyCode.ACCESS_REFUSED and name.startswith("qpid.ha-")
        return
    stream, arguments = CODEC.queue_stream(name)
    frame = marshal_method(commands.Basic.Consume(queue=stream, arguments=arguments), 1)
    consume: Any = unmarshal_method(frame[7:-1])
    assert consume.queue == QUEUE_STREAM and consume.arguments[QUEUE_ARGUMENT] == name
    event = {"type": "queue-declared", "queue": {"name": name, "arguments": {}}}
    assert CODEC.decode_config_event(CODEC.encode_config_event(event)) == event


# -- the floor -------------------------------------------------------------------------
def test_the_floor_is_the_lowest_format_of_a_link_or_a_member() -> None:
    floor = ContractFloor(FormatRange(1, 2))
    assert floor() == Floor(2)
    floor.link_admitted("c1", 1, "n3:5672")
    assert floor() == Floor(1, "backup n3:5672 speaks no higher")
    floor.link_released("c1")
    assert floor() == Floor(2)
    assert floor.members({"n1": FormatRange(1, 2), "n3": FormatRange(1, 1)}) == Floor(
        1, "member n3 speaks no higher"
    )
    floor.members({"n1": FormatRange(1, 2), "n9": FormatRange(99, 99)})  # refused at its link
    assert floor() == Floor(2)


def _promoted(tmp_path: Path) -> Any:
    ha, _ = ha_broker(tmp_path)
    asyncio.run(ha.promote(epoch=1))
    return ha


LINK = {"qpid.ha-backup": True, "qpid.ha-url": "n3:5672"}


def test_a_format_1_link_holds_declares_to_format_1_until_it_closes(tmp_path: Path) -> None:
    ha = _promoted(tmp_path)
    old = open_connection(ha, {**LINK, FORMATS_PROPERTY: "1-1"})
    old.expect(commands.Connection.OpenOk)
    with pytest.raises(AmqpError) as refused:
        ha.vhost.declare_queue("q" * 250, durable=True)
    assert refused.value.reply_code is ReplyCode.PRECONDITION_FAILED
    assert "replication format 1 (backup n3:5672 speaks no higher)" in refused.value.reply_text
    with pytest.raises(AmqpError, match="nest 40"):
        ha.vhost.declare_queue("deep", arguments={"x": _nested(39)})
    new = open_connection(ha, {**LINK, FORMATS_PROPERTY: "1-2"})
    new.expect(commands.Connection.OpenOk)
    old.conn.connection_lost()
    ha.vhost.declare_queue("q" * 250, durable=True)  # every link speaks 2 now
    ha.vhost.declare_queue("deep", arguments={"x": _nested(39)})


def _nested(levels: int) -> dict[str, Any]:
    table: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        table = {"x": table}
    return table


def test_a_format_1_backup_is_refused_by_a_primary_holding_what_format_1_cannot_carry(
    tmp_path: Path,
) -> None:
    ha = _promoted(tmp_path)
    ha.vhost.declare_queue("q" * 250, durable=True)
    close = open_connection(ha, {**LINK, FORMATS_PROPERTY: "1-1"}).expect(commands.Connection.Close)
    assert close.reply_code == ReplyCode.NOT_IMPLEMENTED
    assert close.reply_text.startswith(
        "NOT_IMPLEMENTED - no common replication format carries this primary's configuration:"
        " backup n3:5672 speaks replication format 1 at most: upgrade it; queue name is 250"
    )
    open_connection(ha, {**LINK, FORMATS_PROPERTY: "1-2"}).expect(commands.Connection.OpenOk)
    ha.vhost.delete_queue("q" * 250)
    ha.vhost.declare_exchange("x", "headers", arguments={"f": 0.1})
    close = open_connection(ha, {**LINK, FORMATS_PROPERTY: "1-1"}).expect(commands.Connection.Close)
    assert "arguments of exchange 'x': float 0.1 is not exactly a 32-bit float" in close.reply_text


def test_first_uncarried_names_the_object_and_skips_what_is_not_replicated() -> None:
    vhost = VirtualHost()
    vhost.declare_queue("n" * 250, arguments={"qpid.replicate": "none"})
    vhost.declare_queue("c" * 250, arguments={"qpid.replicate": "configuration"})
    assert first_uncarried([vhost], ReplicateLevel.ALL, 1) is None
    vhost.declare_queue("b", arguments={"qpid.replicate": "configuration"})
    vhost.declare_exchange("e", "direct")
    vhost.bind("b", "e", "k", {"x": _nested(35)})
    found = first_uncarried([vhost], ReplicateLevel.ALL, 1)
    assert found is not None and found.startswith("arguments of binding of queue 'b'")
    assert first_uncarried([vhost], ReplicateLevel.ALL, 2) is None


def test_a_scan_remembers_each_object_s_verdict_and_forgets_deleted_ones() -> None:
    """Each dial of a refused backup scans again: a look-up per object after the first, and
    a queue deleted and declared again under the same name is judged again."""
    vhost = VirtualHost()
    for i in range(100):
        vhost.declare_queue(f"q{i}", arguments={"x": {"y": 1}})
    scans = Uncarried()
    assert scans.first([vhost], ReplicateLevel.ALL, 1) is None
    vhost.delete_queue("q7")
    vhost.declare_queue("q7", arguments={"f": 0.1})  # format 1 carries no such float
    found = scans.first([vhost], ReplicateLevel.ALL, 1)
    assert found is not None and found.startswith("arguments of queue 'q7': float 0.1"), found
    vhost.delete_queue("q7")
    assert scans.first([vhost], ReplicateLevel.ALL, 1) is None
    assert scans.first([vhost], ReplicateLevel.ALL, 2) is None  # the widest: nothing to scan
