"""The lean hot-path codec agrees with pamqp, byte for byte where both encode."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from broker.amqp import framing
from broker.core import properties

short_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60
).filter(lambda s: len(s.encode()) <= 255)
names = st.from_regex(r"[a-zA-Z0-9\-_.:]{0,40}", fullmatch=True)
# pamqp leaves an empty string property unset, so property values are non-empty.
values = st.from_regex(r"[a-zA-Z0-9\-_.:]{1,40}", fullmatch=True)


@given(
    channel=st.integers(1, 65535),
    tag=names,
    delivery_tag=st.integers(1, 2**63 - 1),
    redelivered=st.booleans(),
    exchange=names,
    routing_key=short_text,
)
def test_deliver_method_matches_pamqp(
    channel: int,
    tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
) -> None:
    ours = framing.deliver_method(
        channel,
        framing.short_str_bytes(tag),
        delivery_tag,
        redelivered,
        framing.short_str_bytes(exchange) + framing.short_str_bytes(routing_key),
    )
    theirs = frame.marshal(
        commands.Basic.Deliver(
            consumer_tag=tag,
            delivery_tag=delivery_tag,
            redelivered=redelivered,
            exchange=exchange,
            routing_key=routing_key,
        ),
        channel,
    )
    assert ours == theirs


property_values = st.fixed_dictionaries(
    {},
    optional={
        "content_type": values,
        "content_encoding": values,
        "headers": st.dictionaries(values, st.integers(-(2**31), 2**31 - 1) | values, max_size=4),
        "delivery_mode": st.sampled_from([1, 2]),
        "priority": st.integers(0, 9),
        "correlation_id": values,
        "reply_to": values,
        "expiration": st.integers(0, 10**9).map(str),
        "message_id": values,
        "timestamp": st.integers(0, 2**31).map(lambda t: datetime.fromtimestamp(t, UTC)),
        "message_type": values,
        "user_id": values,
        "app_id": values,
    },
)


@settings(max_examples=200)
@given(
    channel=st.integers(1, 65535),
    props=property_values,
    payload=st.binary(max_size=20000),
    frame_max=st.sampled_from([4096, 8192, 131072]),
)
def test_content_frames_decode_with_pamqp(
    channel: int, props: dict[str, object], payload: bytes, frame_max: int
) -> None:
    pamqp_props = commands.Basic.Properties(**props)  # type: ignore[arg-type]
    raw = properties.encode(pamqp_props)
    data = framing.content_frames(channel, raw, payload, frame_max)
    pos = 0
    decoded: list[Any] = []
    while pos < len(data):
        used, ch, value = frame.unmarshal(data[pos:])
        assert ch == channel and used <= frame_max
        decoded.append(value)
        pos += used
    head = decoded[0]
    assert isinstance(head, header.ContentHeader)
    head_props: Any = head.properties
    assert head.body_size == len(payload)
    for name, expected_value in props.items():
        assert getattr(head_props, name) == expected_value
    bodies = decoded[1:]
    assert all(isinstance(b, body.ContentBody) for b in bodies)
    assert b"".join(b.value for b in bodies) == payload
    # the header we would send is the one pamqp sends for the same properties
    expected = frame.marshal(header.ContentHeader(0, len(payload), pamqp_props), channel)
    assert data.startswith(expected)


@settings(max_examples=200)
@given(
    channel=st.integers(0, 65535),
    tag=st.binary(max_size=256),
    delivery_tag=st.integers(0, 2**64 - 1),
    redelivered=st.booleans(),
    route=st.binary(max_size=512),
    raw=st.binary(max_size=300),
    payload=st.one_of(st.binary(max_size=20000), st.sampled_from([b"", b"x" * 65_536])),
    frame_max=st.sampled_from([9, 10, 4096, 4097, 8192, 131072]),
)
@example(0, b"", 0, False, b"", b"", b"", 4096)  # no body: no body frame
@example(1, b"\x01c", 1, True, b"\x00\x01q", b"\x00\x00", b"x" * 4088, 4096)  # one full frame
@example(1, b"\x01c", 1, False, b"\x00\x01q", b"\x00\x00", b"x" * 4089, 4096)  # one byte over
@example(1, b"\x01c", 1, False, b"\x00\x01q", b"\x00\x00", b"x" * 8176, 4096)  # two full
def test_deliver_frames_are_deliver_method_then_content_frames(
    channel: int,
    tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    route: bytes,
    raw: bytes,
    payload: bytes,
    frame_max: int,
) -> None:
    """One delivery built in one piece is byte for byte the method frame followed by the
    content frames, for any bytes given (the arguments are pre-encoded, never checked):
    by the Python encoder and by the native one where it is built (broker/amqp/_wire.c,
    also from a body in a memoryview or a bytearray)."""
    args = (channel, tag, delivery_tag, redelivered, route, raw)
    theirs = framing.deliver_method(
        channel, tag, delivery_tag, redelivered, route
    ) + framing.content_frames(channel, raw, payload, frame_max)
    assert framing._deliver_frames(*args, payload, frame_max) == theirs
    assert framing.deliver_frames(*args, payload, frame_max) == theirs
    if framing.deliver_frames is not framing._deliver_frames:
        assert framing.deliver_frames(*args, memoryview(payload), frame_max) == theirs
        assert framing.deliver_frames(*args, bytearray(payload), frame_max) == theirs


@settings(max_examples=200)
@given(
    channel=st.integers(0, 65535),
    delivery_tag=st.integers(0, 2**63 - 1),
    multiple=st.booleans(),
    ack=st.booleans(),
)
@example(0, 0, False, True)
@example(65535, 2**63 - 1, True, False)
def test_confirm_frame_matches_pamqp(
    channel: int, delivery_tag: int, multiple: bool, ack: bool
) -> None:
    """A publisher confirm built by hand is pamqp's basic.ack, or basic.nack with requeue
    unset, byte for byte."""
    method = (
        commands.Basic.Ack(delivery_tag=delivery_tag, multiple=multiple)
        if ack
        else commands.Basic.Nack(delivery_tag=delivery_tag, multiple=multiple, requeue=False)
    )
    assert framing.confirm_frame(channel, delivery_tag, multiple, ack) == frame.marshal(
        method, channel
    )


@given(props=property_values)
def test_scan_agrees_with_pamqp(props: dict[str, object]) -> None:
    raw = properties.encode(commands.Basic.Properties(**props))  # type: ignore[arg-type]
    scanned = properties.scan(raw)
    assert scanned.delivery_mode == (props.get("delivery_mode") or 0)
    assert scanned.expiration == props.get("expiration")
    assert scanned.has_headers == ("headers" in props)


@given(
    channel=st.integers(1, 65535),
    exchange=names,
    routing_key=short_text,
    mandatory=st.booleans(),
)
def test_publish_decoder_matches_pamqp(
    channel: int, exchange: str, routing_key: str, mandatory: bool
) -> None:
    data = frame.marshal(
        commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
        channel,
    )
    assert data == framing.marshal_publish(channel, exchange, routing_key, mandatory)
    payload = data[7:-1]
    assert framing.unmarshal_publish(payload) == (exchange, routing_key, mandatory, False)


@given(garbage=st.binary(max_size=64))
def test_scan_never_crashes_on_garbage(garbage: bytes) -> None:
    with contextlib.suppress(ValueError):
        properties.scan(garbage)


@settings(max_examples=200)
@given(tag=st.integers(0, 2**64 - 1), multiple=st.booleans(), other_bits=st.integers(0, 127))
def test_ack_decoder_matches_pamqp(tag: int, multiple: bool, other_bits: int) -> None:
    """basic.ack, decoded without pamqp on the hot path, reads as pamqp reads it; a tag of
    2**63 or more as the unsigned number the spec says it is (pamqp: a negative one)."""
    payload = framing._METHOD_INDEX.pack(framing._ACK_INDEX) + framing._ACK_ARGS.pack(
        tag, (other_bits << 1) | int(multiple)
    )
    ours = framing.unmarshal_method(payload)
    theirs = commands.Basic.Ack()
    theirs.unmarshal(payload[4:])
    assert type(ours) is commands.Basic.Ack
    assert (ours.delivery_tag, ours.multiple) == (tag, multiple)
    assert ours.delivery_tag % 2**64 == theirs.delivery_tag % 2**64
    assert ours.multiple == theirs.multiple


def test_messages_published_with_the_same_bytes_share_routing_key_and_properties() -> None:
    """A queue of many messages from one publisher holds one routing key string and one
    property block, not one of each a message (docs/memory-and-disk.md)."""
    payload = framing.marshal_publish(1, "", "orders.eu", False)[7:-1]
    first = framing.unmarshal_publish(bytes(bytearray(payload)))
    second = framing.unmarshal_publish(bytes(bytearray(payload)))
    assert first == ("", "orders.eu", False, False)
    assert second[1] is first[1]
    raw = properties.encode(commands.Basic.Properties(delivery_mode=2, content_type="text/x"))
    kept, scanned = properties.scan_shared(bytes(bytearray(raw)))
    again, _ = properties.scan_shared(bytes(bytearray(raw)))
    assert again is kept and kept == raw and scanned.delivery_mode == 2
    assert properties.scan_shared(bytes(bytearray(properties.EMPTY)))[0] is properties.EMPTY
