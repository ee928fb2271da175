"""Store format 2 (issue 24): what a client may declare, the store gives back exactly.

Release 0.1.0 wrote a declare's arguments with pamqp: after a restart a 64-bit float came
back as a 32-bit one and a field name past 128 bytes cut. Format 2's configuration records
hold them in the core's lossless codec (broker/core/field_table_codec.py):

- sans-I/O: every field table the AMQP codec accepts (raw AMQP bytes of every type, through
  the broker's frame decoder) and every JSON table the management API accepts come back
  equal from an exchange, queue, binding and exchange-binding record; 0.1.0's records still
  read as 0.1.0 read them; a record kind of a newer store format is refused naming it, even
  as the last record of the store (never cut as a torn tail);
- end to end (pika, a real broker, a real disk): a durable exchange, queue, binding and
  exchange binding with such arguments, and a queue declared through the management API,
  read back through the management API the same after a restart; the management API holds
  a declare to the same contract as AMQP (400 naming the limit, nothing created).
"""

from __future__ import annotations

import datetime
import decimal
import math
import struct
from pathlib import Path
from typing import Any

import pika
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import encode as pamqp_encode

from broker.core.errors import AmqpError
from broker.core.field_tables import MAX_DEPTH, check_arguments
from broker.store.record_decode import decode_payload
from broker.store.records import (
    RECORD_HEADER,
    BindingRecord,
    ExchangeBindingRecord,
    ExchangeRecord,
    FormatError,
    Kind,
    QueueRecord,
    encode_binding,
    encode_exchange,
    encode_exchange_binding,
    encode_queue,
    segment_header,
)
from broker.store.recovery import CorruptStore, Recovery
from tests.broker_process import BrokerProcess
from tests.field_table_strategies import as_the_broker_decodes, raw_arguments, same
from tests.ha.cluster import http


def _back(frame: bytes) -> Any:
    length, _crc, kind = RECORD_HEADER.unpack_from(frame)
    assert len(frame) == RECORD_HEADER.size + length
    return kind, decode_payload(kind, frame[RECORD_HEADER.size :])


def _round_trips(arguments: dict[str, Any]) -> None:
    """Each configuration record with ``arguments`` decodes to the same record."""
    records: list[tuple[Any, Any]] = [
        (encode_exchange, ExchangeRecord(1, "e", "headers", False, False, arguments, "v")),
        (encode_queue, QueueRecord(2, "q", False, arguments, "ab" * 16, "/")),
        (encode_binding, BindingRecord(3, "e", 2, "k", arguments)),
        (encode_exchange_binding, ExchangeBindingRecord(4, "e", "f", "k", arguments, "v")),
    ]
    for encode, record in records:
        kind, back = _back(encode(record))
        assert kind in (Kind.EXCHANGE_2, Kind.QUEUE_2, Kind.BINDING_2, Kind.EXCHANGE_BINDING_2)
        assert back._replace(arguments={}) == record._replace(arguments={})
        assert same(back.arguments, arguments), (back.arguments, arguments)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_arguments())
def test_every_field_table_the_amqp_codec_accepts_comes_back_from_the_store(table: bytes) -> None:
    arguments = as_the_broker_decodes(table)
    if arguments is None:  # the AMQP codec refuses it (nested past 64)
        return
    check_arguments("queue 'q'", arguments)  # the declare contract takes it
    _round_trips(arguments)


_JSON_KEYS = st.text(max_size=300).filter(lambda k: len(k.encode()) <= 255)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_JSON_KEYS, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(_JSON_KEYS, _JSON, max_size=4))
def test_every_table_the_management_api_accepts_comes_back_from_the_store(
    arguments: dict[str, Any],
) -> None:
    check_arguments("queue 'q'", arguments)
    _round_trips(arguments)


def test_the_widest_and_deepest_come_back() -> None:
    deepest: Any = {"leaf": float("nan")}
    for _ in range(MAX_DEPTH - 2):  # with the arguments table: 64 levels
        deepest = {"é" * 127: deepest}  # 254-byte field names at every level
    arguments = {
        "k" * 255: deepest,
        "values": [
            0.1,
            -0.0,
            math.inf,
            2**63 - 1,
            decimal.Decimal("-1.5"),
            datetime.datetime.fromtimestamp(10413792000001 / 1000.0, tz=datetime.UTC),
            b"\xff\xfe",
            bytearray(b"\x00"),
            None,
        ],
    }
    check_arguments("queue 'q'", arguments)
    _round_trips(arguments)


def _lists(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"deep": _lists(MAX_DEPTH)}, "nest more than 64 tables or arrays deep"),
        ({"k" * 256: 1}, "is 256 bytes, more than 255"),
        ({"i": 2**63}, "does not fit in 64 bits"),
        ({"s": "\udc80"}, "is not UTF-8"),
    ],
)
def test_the_contract_refuses_what_the_codec_cannot_carry(
    arguments: dict[str, Any], problem: str
) -> None:
    with pytest.raises(AmqpError, match=problem) as refused:
        check_arguments("queue 'q'", arguments)
    assert refused.value.reply_code == 406


def _v1_queue(object_id: int, name: str, table: dict[str, Any]) -> bytes:
    """A QUEUE record's payload as release 0.1.0 wrote it (pamqp's field table)."""
    raw = name.encode()
    return (
        struct.pack(">QB", object_id, 0) + bytes([len(raw)]) + raw + pamqp_encode.field_table(table)
    )


def test_a_record_of_release_0_1_0_still_reads_as_0_1_0_read_it() -> None:
    payload = _v1_queue(9, "old", {"f": 0.5, "n": [1, "s", {"t": True}]})
    assert decode_payload(Kind.QUEUE, payload) == QueueRecord(
        9, "old", False, {"f": 0.5, "n": [1, "s", {"t": True}]}
    )


def _frame(kind: int, payload: bytes) -> bytes:
    return RECORD_HEADER.pack(len(payload), crc32c(payload, crc32c(bytes([kind]))), kind) + payload


def test_a_record_of_a_newer_store_format_is_refused_never_cut() -> None:
    with pytest.raises(FormatError, match=r"record kind 19 is of a store format newer .*1-2"):
        decode_payload(19, b"\x00" * 8)
    segment = segment_header(1, 1) + encode_queue(QueueRecord(1, "q", False, {})) + _frame(19, b"?")
    recovery = Recovery(native=False)
    with pytest.raises(CorruptStore, match="written by a newer release of qpidd"):
        recovery.add_segment(1, segment, last=True)


# -- end to end ---------------------------------------------------------------------------
def _arguments() -> dict[str, Any]:
    """What pika sends (it has no floats: 64-bit ones come through the management API here,
    and through the frame decoder above): a 200-byte field name, 64 levels with the table,
    decimals, a timestamp, a byte array, void, a 64-bit integer."""
    nested: Any = {"leaf": 2**63 - 1}
    for _ in range(MAX_DEPTH - 2):
        nested = {"n": nested}
    return {
        "f" * 200: "long name",
        "deep": nested,
        "list": [1, -(2**40), "s", decimal.Decimal("1.25"), None, True],
        "when": datetime.datetime(2030, 1, 2, 3, 4, 5),
        "raw": b"\x00\xff",
        "x-match": "any",
    }


def _views(port: int) -> dict[str, Any]:
    return {
        "queue": http("GET", port, "/api/queues/%2F/q.args")["arguments"],
        "api": http("GET", port, "/api/queues/%2F/api.args")["arguments"],
        "exchange": http("GET", port, "/api/exchanges/%2F/x.args")["arguments"],
        "bindings": sorted(
            (b["source"], b["destination"], b["routing_key"], repr(b["arguments"]))
            for b in http("GET", port, "/api/bindings")
            if b["source"] == "x.args"
        ),
    }


def test_declared_arguments_come_back_exactly_after_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", args=[f"--data-dir={tmp_path / 'data'}"])
    broker.start()
    try:
        arguments = _arguments()
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = connection.channel()
        channel.exchange_declare("x.args", "headers", durable=True, arguments=arguments)
        channel.exchange_declare("x.dest", "fanout", durable=True)
        channel.queue_declare("q.args", durable=True, arguments=arguments)
        channel.queue_bind("q.args", "x.args", "k", arguments=arguments)
        channel.exchange_bind("x.dest", "x.args", "k", arguments=arguments)
        connection.close()
        api = {"f" * 255: 0.1, "deep": arguments["deep"], "big": 2**63 - 1}
        created = http(
            "PUT", broker.mgmt_port, "/api/queues/%2F/api.args", {"durable": True, "arguments": api}
        )
        assert "http_status" not in created, created
        before = _views(broker.mgmt_port)
        assert before["queue"]["f" * 200] == "long name" and before["api"]["f" * 255] == 0.1
        assert before["api"] == api
        assert len(before["bindings"]) == 2

        # the management API: the AMQP codec's contract, 400 naming the limit
        refusals: list[tuple[dict[str, Any], str]] = [
            ({"deep": _lists(MAX_DEPTH)}, "nest more than 64 tables or arrays deep"),
            ({"k" * 256: 1}, "is 256 bytes, more than 255"),
            ({"i": 2**64}, "does not fit in 64 bits"),
        ]
        for refused, problem in refusals:
            bodies: list[tuple[str, dict[str, Any]]] = [
                ("/api/queues/%2F/api.refused", {"durable": True, "arguments": refused}),
                ("/api/exchanges/%2F/x.refused", {"type": "topic", "arguments": refused}),
            ]
            for path, body in bodies:
                answer = http("PUT", broker.mgmt_port, path, body)
                assert answer["http_status"] == 400 and problem in answer["reason"], answer
                assert http("GET", broker.mgmt_port, path)["http_status"] == 404

        broker.stop()
        broker.start()
        assert _views(broker.mgmt_port) == before
    finally:
        broker.stop()

    # a record of a newer store format: one line, never cut, even when told to cut damage
    newest = max((tmp_path / "data" / "store").glob("*.seg"))
    with newest.open("ab") as segment:
        segment.write(_frame(19, b"?"))
    size = newest.stat().st_size
    newer = BrokerProcess(
        tmp_path / "c", args=[f"--data-dir={tmp_path / 'data'}", "--store-cut-damaged=yes"]
    )
    with pytest.raises(RuntimeError, match="exited with"):
        newer.start()
    [line] = (tmp_path / "c" / "stderr").read_text().splitlines()
    assert "is not damaged" in line and "record kind 19 is of a store format newer" in line, line
    assert newest.stat().st_size == size
