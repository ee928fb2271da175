"""The AMQP 1.0 codec: every value round-trips with its type; composites round-trip;
arbitrary bytes decode to a value or a DecodeError, never another exception.

Few examples each (``QUICK``): generating nested values is slow and make test is short."""

from __future__ import annotations

import contextlib
import struct
import uuid
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.amqp10 import codec
from broker.amqp10.codec import DecodeError
from broker.amqp10.framing import (
    decode_transfer,
    delivery_frame,
    delivery_transfer,
    first_transfer,
    frame_head,
    read_flow_or_disposition,
)
from broker.amqp10.performatives import (
    Accepted,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    Error,
    Flow,
    Modified,
    Open,
    Rejected,
    Released,
    SaslInit,
    SaslMechanisms,
    Source,
    Target,
    Transfer,
)
from broker.amqp10.sections import AmqpMessage, AmqpValue, Data, Header, Properties, parse_message
from broker.amqp10.types import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float,
    Int,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)


def ranged(kind: Any) -> st.SearchStrategy[Any]:
    return st.integers(kind.LOW, kind.HIGH).map(kind)


symbols = st.text(st.characters(max_codepoint=127), max_size=300).map(Symbol)
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    *(ranged(k) for k in (UByte, UShort, UInt, ULong, Byte, Short, Int, Timestamp)),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32, allow_nan=False).map(Float),
    st.floats(allow_nan=False),
    st.binary(min_size=4, max_size=4).map(Decimal32),
    st.binary(min_size=8, max_size=8).map(Decimal64),
    st.binary(min_size=16, max_size=16).map(Decimal128),
    st.characters(exclude_categories=["Cs"]).map(Char),
    st.uuids(),
    st.binary(max_size=300),
    texts,
    symbols,
)
keys = st.one_of(symbols, texts, ranged(ULong), st.integers(-(2**63), 2**63 - 1))
arrays = st.one_of(
    st.lists(symbols, max_size=5).map(lambda v: Array(0xA3, v)),
    st.lists(texts, max_size=5).map(lambda v: Array(0xA1, v)),
    st.lists(ranged(UInt), max_size=5).map(lambda v: Array(0x70, v)),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5).map(lambda v: Array(0x81, v)),
    st.lists(st.booleans(), max_size=5).map(lambda v: Array(0x56, v)),
    st.lists(st.uuids(), max_size=5).map(lambda v: Array(0x98, v)),
)
values = st.recursive(
    st.one_of(scalars, arrays),
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(keys, inner, max_size=6),
        st.builds(Described, st.integers(0x1000, 2**64 - 1).map(ULong), inner),
        st.builds(Described, symbols.filter(lambda s: not s.startswith("amqp:")), inner),
        st.lists(st.lists(ranged(UByte), max_size=3), max_size=3).map(lambda v: Array(0xC0, v)),
    ),
    max_leaves=12,
)


#: Examples per property in make test (its time budget); the properties, not the count,
#: are the point.
QUICK = settings(max_examples=40)


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same AMQP type all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Array):
        return a.code == b.code and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, Described):
        return same(a.descriptor, b.descriptor) and same(a.value, b.value)
    return bool(a == b)


@QUICK
@given(values)
def test_a_value_round_trips_with_its_type(value: Any) -> None:
    encoded = codec.encode(value)
    decoded, end = codec.decode(encoded)
    assert end == len(encoded)
    assert same(decoded, value), (value, decoded)


@QUICK
@given(st.lists(values, max_size=4))
def test_values_decode_one_after_another(items: list[Any]) -> None:
    data = b"".join(codec.encode(v) for v in items)
    assert all(map(same, codec.decode_all(data), items))


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        codec.decode_all(data)


@QUICK
@given(values, st.data())
def test_a_truncated_value_is_a_decode_error(value: Any, data: st.DataObject) -> None:
    encoded = codec.encode(value)
    if len(encoded) < 2:
        return
    cut = data.draw(st.integers(1, len(encoded) - 1))
    try:
        _decoded, end = codec.decode(encoded[:cut])
    except DecodeError:
        return
    assert end <= cut  # a shorter value may be complete (a compound's prefix is not)


def test_the_smallest_encodings_are_chosen() -> None:
    assert codec.encode(UInt(0)) == b"\x43"
    assert codec.encode(UInt(7)) == b"\x52\x07"
    assert codec.encode(ULong(0)) == b"\x44"
    assert codec.encode([]) == b"\x45"
    assert codec.encode("a" * 255)[:2] == b"\xa1\xff"
    assert codec.encode("a" * 256)[:5] == b"\xb1\x00\x00\x01\x00"
    assert codec.encode(Symbol("PLAIN")) == b"\xa3\x05PLAIN"


@pytest.mark.parametrize(
    "bad",
    [
        b"\x56\x02",  # a boolean byte that is neither 0 nor 1
        b"\xc0\x05\xff\x40",  # a list claiming more elements than bytes
        b"\xc1\x03\x01\x40\x40",  # a map of an odd count
        b"\xc0\x00",  # a list too small for its count
        b"\xa1\x02\xff\xfe",  # a string that is not UTF-8
        b"\xa3\x01\xe9",  # a symbol that is not ASCII
        b"\xf0\x00\x00\x00\x09\xff\xff\xff\xff\x40",  # 4 billion nulls in 9 bytes
        b"\x0f",  # an unknown format code
        b"\x00" * 100,  # descriptors nested past the bound
    ],
)
def test_malformed_input_is_a_decode_error(bad: bytes) -> None:
    with pytest.raises(DecodeError):
        codec.decode(bad)


uints = st.integers(0, 2**32 - 1)
performatives = st.one_of(
    st.builds(
        Open,
        container_id=texts,
        hostname=st.none() | texts,
        max_frame_size=uints,
        channel_max=st.integers(0, 65535),
        idle_time_out=st.none() | uints,
        offered_capabilities=st.none() | st.lists(symbols, min_size=1, max_size=3).map(tuple),
        properties=st.none() | st.dictionaries(symbols, scalars, max_size=3),
    ),
    st.builds(
        Begin,
        remote_channel=st.none() | st.integers(0, 65535),
        next_outgoing_id=uints,
        incoming_window=uints,
        outgoing_window=uints,
    ),
    st.builds(
        Attach,
        name=texts,
        handle=uints,
        role=st.booleans(),
        snd_settle_mode=st.integers(0, 2),
        rcv_settle_mode=st.integers(0, 1),
        source=st.none() | st.builds(Source, address=st.none() | texts, dynamic=st.booleans()),
        target=st.none() | st.builds(Target, address=st.none() | texts),
        initial_delivery_count=st.none() | uints,
        max_message_size=st.none() | st.integers(0, 2**64 - 1),
    ),
    st.builds(
        Flow,
        next_incoming_id=st.none() | uints,
        incoming_window=uints,
        next_outgoing_id=uints,
        outgoing_window=uints,
        handle=st.none() | uints,
        delivery_count=st.none() | uints,
        link_credit=st.none() | uints,
        drain=st.booleans(),
        echo=st.booleans(),
    ),
    st.builds(
        Transfer,
        handle=uints,
        delivery_id=st.none() | uints,
        delivery_tag=st.none() | st.binary(max_size=32),
        settled=st.none() | st.booleans(),
        more=st.booleans(),
        aborted=st.booleans(),
    ),
    st.builds(
        Disposition,
        role=st.booleans(),
        first=uints,
        last=st.none() | uints,
        settled=st.booleans(),
        state=st.one_of(
            st.none(),
            st.just(Accepted()),
            st.builds(Rejected, st.builds(Error, condition=symbols, description=texts)),
            st.builds(Modified, delivery_failed=st.booleans(), undeliverable_here=st.booleans()),
        ),
    ),
    st.builds(Detach, handle=uints, closed=st.booleans()),
    st.builds(Close, error=st.none() | st.builds(Error, condition=symbols)),
    st.builds(SaslMechanisms, sasl_server_mechanisms=st.lists(symbols, min_size=1).map(tuple)),
    st.builds(SaslInit, mechanism=symbols, initial_response=st.none() | st.binary()),
)


@given(performatives)
def test_a_performative_round_trips(performative: Any) -> None:
    decoded, _end = codec.decode(codec.encode(performative))
    assert decoded == performative


def test_a_missing_mandatory_field_is_a_decode_error() -> None:
    without_handle = codec.encode(Described(ULong(0x12), ["link"]))
    with pytest.raises(DecodeError, match="mandatory field handle"):
        codec.decode(without_handle)


def test_a_field_of_the_wrong_type_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="expected UInt"):
        codec.decode(codec.encode(Described(ULong(0x12), ["link", "not a handle", False])))


@QUICK
@given(
    st.builds(Header, durable=st.booleans(), priority=st.integers(0, 255).map(UByte)),
    st.builds(Properties, message_id=st.none() | texts | st.uuids(), to=st.none() | texts),
    st.none() | st.dictionaries(texts, scalars, max_size=4),
    st.one_of(
        st.lists(st.binary(max_size=100).map(Data), min_size=1, max_size=3),
        values.map(lambda v: [AmqpValue(v)]),
    ),
)
def test_a_message_round_trips(
    header: Header, properties: Properties, application: Any, body: list[Any]
) -> None:
    message = AmqpMessage(
        header=header, properties=properties, application_properties=application, body=body
    )
    parsed = parse_message(message.encode())
    assert parsed.header == header and parsed.properties == properties
    assert parsed.application_properties == application
    assert parsed.body == body
    assert parsed.encode() == message.encode()


def test_sections_out_of_order_are_a_decode_error() -> None:
    body = codec.encode(Data(b"x"))
    with pytest.raises(DecodeError, match="out of order"):
        parse_message(body + codec.encode(Header()))
    with pytest.raises(DecodeError, match="mixes"):
        parse_message(body + codec.encode(AmqpValue("x")))


def test_uuid_and_symbol_keys() -> None:
    value = {Symbol("x-opt"): uuid.UUID(int=5), "k": [Symbol("a")]}
    decoded, _ = codec.decode(codec.encode(value))
    assert same(decoded, value)


@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=300),
    st.sampled_from([0, 1, 2**32 - 1]),
    st.booleans(),
)
def test_a_delivery_transfer_framed_by_hand_is_the_codecs(
    handle: int, delivery_id: int, tag: bytes, fmt: int, settled: bool
) -> None:
    transfer = Transfer(
        handle=handle, delivery_id=delivery_id, delivery_tag=tag, message_format=fmt,
        settled=settled,
    )  # fmt: skip
    encoded = first_transfer(transfer)
    assert codec.decode(encoded) == (transfer, len(encoded))


@given(
    st.integers(0, 2**32 - 1),
    st.none() | st.integers(0, 2**32 - 1),
    st.none() | st.binary(max_size=40),
    st.none() | st.integers(0, 2**32 - 1),
    st.none() | st.booleans(),
    st.booleans(),
    st.binary(max_size=20),
)
def test_a_transfer_read_by_hand_is_the_codecs(
    handle: int, delivery_id: int | None, tag: bytes | None, fmt: int | None,
    settled: bool | None, more: bool, payload: bytes,
) -> None:  # fmt: skip
    transfer = Transfer(
        handle=handle, delivery_id=delivery_id, delivery_tag=tag, message_format=fmt,
        settled=settled, more=more,
    )  # fmt: skip
    body = codec.encode(transfer) + payload
    found = decode_transfer(body)
    assert found is None or found == codec.decode(body)
    if fmt is not None or tag is not None:  # the common shapes are read by hand
        assert found is not None
    if body[3] == 0xC0:  # the same list as a list32, as rhea writes it
        size, count = body[4], body[5]
        items = body[6 : 5 + size]
        wide = b"\x00\x53\x14\xd0" + struct.pack(">II", len(items) + 4, count) + items
        wide += body[5 + size :]
        assert codec.decode(wide) == (transfer, len(wide) - len(payload))
        found = decode_transfer(wide)
        assert found is None or found == codec.decode(wide)
        if fmt is not None or tag is not None:
            assert found is not None


@given(st.binary(max_size=60), st.sampled_from([b"\xc0", b"\xd0"]))
def test_a_transfer_read_by_hand_never_raises(data: bytes, code: bytes) -> None:
    decode_transfer(b"\x00\x53\x14" + code + data)


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.booleans())
def test_a_delivery_framed_by_hand_is_the_codecs(
    handle: int, delivery_id: int, settled: bool
) -> None:
    transfer = Transfer(
        handle=handle, delivery_id=delivery_id, delivery_tag=struct.pack(">I", delivery_id),
        message_format=0, settled=settled,
    )  # fmt: skip
    assert delivery_transfer(handle, delivery_id, settled) == first_transfer(transfer)
    assert codec.decode(delivery_transfer(handle, delivery_id, settled))[0] == transfer


@given(
    st.integers(0, 2**16 - 1),
    st.integers(0, 300) | st.integers(0, 2**32 - 1),
    st.integers(0, 300) | st.integers(0, 2**32 - 1),
    st.booleans(),
    st.binary(max_size=20),
    st.binary(max_size=300),
)
@example(0, 255, 256, False, b"", b"")
@example(65535, 256, 255, True, b"s", b"b")
def test_a_delivery_frame_is_its_head_transfer_and_message(
    channel: int, handle: int, delivery_id: int, settled: bool, sections: bytes, body: bytes
) -> None:
    performative = delivery_transfer(handle, delivery_id, settled)
    size = 8 + len(performative) + len(sections) + len(body)
    expected = frame_head(size, channel) + performative + sections + body
    assert delivery_frame(channel, handle, delivery_id, settled, sections, body) == expected


some_uint = st.sampled_from([0, 1, 255, 256, 2**31, 2**32 - 1]) | st.integers(0, 2**32 - 1)
maybe_uint = st.none() | some_uint
states = st.sampled_from([None, Accepted(), Released(), Rejected(), Modified(delivery_failed=True)])


def _as_list32(body: bytes) -> bytes | None:
    """The same performative with its list8 written as a list32 (None: not a list8)."""
    if body[3] != 0xC0:
        return None
    size, count = body[4], body[5]
    items = body[6 : 5 + size]
    return body[:3] + b"\xd0" + struct.pack(">II", len(items) + 4, count) + items


@given(
    maybe_uint, some_uint, some_uint,
    some_uint, maybe_uint, maybe_uint, maybe_uint, maybe_uint, st.booleans(),
    st.booleans(), st.none() | st.just({"k": 1}),
)  # fmt: skip
@example(None, 0, 0, 0, None, None, None, None, False, False, None)
@example(2**32 - 1, 2**32 - 1, 2**32 - 1, 2**32 - 1, 1, 2**32 - 1, 256, 0, True, True, None)
def test_a_flow_read_by_hand_is_the_codecs(
    next_incoming_id: int | None, incoming_window: int, next_outgoing_id: int,
    outgoing_window: int, handle: int | None, delivery_count: int | None,
    link_credit: int | None, available: int | None, drain: bool, echo: bool,
    properties: dict[str, int] | None,
) -> None:  # fmt: skip
    flow = Flow(
        next_incoming_id, incoming_window, next_outgoing_id, outgoing_window, handle,
        delivery_count, link_credit, available, drain, echo, properties,
    )  # fmt: skip
    body = codec.encode(flow)
    found = read_flow_or_disposition(body)
    assert found is None or found == codec.decode(body)
    if properties is None:  # the usual flows are read by hand
        assert found == (flow, len(body))
    wide = _as_list32(body)
    if wide is not None:
        found = read_flow_or_disposition(wide)
        assert found is None or found == codec.decode(wide)
        if properties is None:
            assert found is not None


@given(st.booleans(), some_uint, maybe_uint, st.booleans(), states,
       st.booleans())  # fmt: skip
@example(True, 0, None, False, None, False)
@example(True, 2**32 - 1, 2**32 - 1, True, Accepted(), True)
def test_a_disposition_read_by_hand_is_the_codecs(
    role: bool, first: int, last: int | None, settled: bool, state: Any, batchable: bool
) -> None:
    disposition = Disposition(role, first, last, settled, state, batchable)
    body = codec.encode(disposition)
    found = read_flow_or_disposition(body)
    assert found is None or found == codec.decode(body)
    if state is None or isinstance(state, Accepted):  # the usual ones are read by hand
        assert found == (disposition, len(body))
    wide = _as_list32(body)
    if wide is not None:
        found = read_flow_or_disposition(wide)
        assert found is None or found == codec.decode(wide)


@given(
    st.sampled_from([b"\x00\x53\x13", b"\x00\x53\x15"]),
    st.sampled_from([b"\xc0", b"\xd0", b"\x45"]),
    st.binary(max_size=60),
)
@example(b"\x00\x53\x15", b"\xc0", b"\x04\x02\x41\x43\x40")
@example(b"\x00\x53\x15", b"\xc0", b"\x07\x05\x41\x43\x40\x41\x00\x53\x24\x45")
def test_a_flow_or_disposition_read_by_hand_never_raises(
    descriptor: bytes, code: bytes, data: bytes
) -> None:
    body = descriptor + code + data
    found = read_flow_or_disposition(body)
    if found is not None:  # what is read by hand is what the codec reads
        assert found == codec.decode(body)
