"""AMQP 0-9-1 frames: the generic codec (pamqp) and a lean one for the hot path.

Every method frame the broker sends or receives goes through pamqp, except those that
carry the traffic: basic.publish and a consumer's basic.ack (decoded here), basic.deliver
(encoded here, with its content header and body frames, in one ``bytes``) and a publisher
confirm's basic.ack or basic.nack (encoded here). Each is tested against pamqp.
Content properties are never decoded on the hot path; they travel as the publisher's raw
bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import cast

from pamqp import commands, frame
from pamqp.base import Frame as Method

from broker.core.errors import AmqpError, ReplyCode
from broker.core.field_tables import check_depth

try:
    from broker.amqp import _wire as native_wire
except ImportError:  # not built (no C compiler): the Python encoder and parser
    native_wire = None  # type: ignore[assignment]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
#: Bytes of framing around a payload: type, channel, size before; the end octet after.
FRAME_OVERHEAD = 8

FRAME_MIN_SIZE = 4096

BASIC_CLASS = 60
PUBLISH_INDEX = 0x003C0028  # basic.publish (60, 40)

HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

#: pamqp commands whose ``validate()`` checks only names (and a ticket of 0) against rules
#: narrower than AMQP 0-9-1's: a pattern of ASCII letters, digits and ``-_.:@#,/+`` and
#: space, at most 127 characters for an exchange. A queue or exchange name is a short
#: string, any UTF-8 of at most 255 bytes (RabbitMQ accepts any; issue 24). pamqp runs those
#: checks when a method is made and again when it is encoded, so the broker could not answer
#: a declare of ``t.a=b`` nor return a message published to a 200-character exchange, and a
#: backup could not consume such a queue's stream. Their ``validate`` is replaced, once, at
#: import, by :func:`_names_as_short_strings`: pamqp's encoder still refuses a short string
#: over 255 bytes, and the broker checks names itself (the virtual host, the HA contract).
NAMED_COMMANDS: tuple[type[Method], ...] = (
    commands.Basic.Consume,
    commands.Basic.Deliver,
    commands.Basic.Get,
    commands.Basic.GetOk,
    commands.Basic.Publish,
    commands.Basic.Return,
    commands.Exchange.Bind,
    commands.Exchange.Declare,
    commands.Exchange.Delete,
    commands.Exchange.Unbind,
    commands.Queue.Bind,
    commands.Queue.Declare,
    commands.Queue.DeclareOk,
    commands.Queue.Delete,
    commands.Queue.Purge,
    commands.Queue.Unbind,
)


def _names_as_short_strings(self: Method) -> None:
    """Names are short strings: pamqp's encoder checks their length in bytes."""


for _command in NAMED_COMMANDS:
    _command.validate = _names_as_short_strings  # type: ignore[method-assign]

_FRAME_HEAD = struct.Struct(">BHI")
_METHOD_INDEX = struct.Struct(">I")
#: basic.ack's arguments after its method id: delivery-tag, then the ``multiple`` bit.
_ACK_ARGS = struct.Struct(">QB")
_ACK_INDEX = 0x003C0050  # basic.ack (60, 80)
_ACK_SIZE = 4 + _ACK_ARGS.size
_HEADER_HEAD = struct.Struct(">HHQ")
_DELIVER_TAIL = struct.Struct(">QB")
_CONTENT_HEAD = struct.Struct(">BHIHHQ")
#: basic.deliver's frame head with its method id (class 60, method 60).
_DELIVER_HEAD = struct.Struct(">BHII")
_DELIVER_INDEX = 0x003C003C
#: A frame's end octet, then the next frame's head: a content header's (with its class,
#: weight and body size) or a body frame's.
_END_CONTENT_HEAD = struct.Struct(">BBHIHHQ")
_END_BODY_HEAD = struct.Struct(">BBHI")
#: A whole basic.ack or basic.nack frame: head, method id, delivery-tag, bits, end octet.
_CONFIRM_FRAME = struct.Struct(">BHIIQBB")
_CONFIRM_SIZE = 4 + 8 + 1
_NACK_INDEX = 0x003C0078  # basic.nack (60, 120)


def marshal_method(method: Method, channel: int) -> bytes:
    """Encode a method frame through pamqp."""
    return frame.marshal(method, channel)


def unmarshal_method(payload: bytes) -> Method:
    """Decode a method frame payload through pamqp.

    Unknown methods are COMMAND_INVALID (503); malformed arguments SYNTAX_ERROR (502).
    """
    if len(payload) < 4:
        raise AmqpError(ReplyCode.FRAME_ERROR, "method frame shorter than its method id")
    (index,) = _METHOD_INDEX.unpack_from(payload, 0)
    if index == _ACK_INDEX and len(payload) == _ACK_SIZE:
        # One per delivery: built directly, without pamqp's field-by-field decoder.
        ack = commands.Basic.Ack.__new__(commands.Basic.Ack)
        ack.delivery_tag, bits = _ACK_ARGS.unpack_from(payload, 4)
        ack.multiple = bool(bits & 1)
        return ack
    cls = cast("type[Method] | None", commands.INDEX_MAPPING.get(index))
    if cls is None:
        raise AmqpError(
            ReplyCode.COMMAND_INVALID,
            f"unknown method class {index >> 16} method {index & 0xFFFF}",
        )
    method: Method = cls.__new__(cls)
    try:
        method.unmarshal(payload[4:])
        for name in cls.__slots__:  # field tables: bound their nesting (fuzzing: 500 deep)
            value = getattr(method, name, None)
            if isinstance(value, dict):
                check_depth(value, name)
    except RecursionError:
        raise AmqpError(
            ReplyCode.SYNTAX_ERROR,
            f"malformed {cls.name} arguments: field tables nested too deep",
            index >> 16,
            index & 0xFFFF,
        ) from None
    except (struct.error, ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
        raise AmqpError(
            ReplyCode.SYNTAX_ERROR,
            f"malformed {cls.name} arguments: {exc}",
            index >> 16,
            index & 0xFFFF,
        ) from exc
    return method


def _short_str(payload: bytes, pos: int) -> tuple[str, int]:
    length = payload[pos]
    end = pos + 1 + length
    if end > len(payload):
        raise IndexError("short string overruns the frame")
    return payload[pos + 1 : end].decode("utf-8"), end


#: basic.publish payloads decoded before (a publisher sends the same few over and over):
#: the messages of a queue share one routing key string instead of one each.
DECODED_PUBLISHES: dict[bytes, tuple[str, str, bool, bool]] = {}
_DECODED_LIMIT = 4096
_DECODED_MAX_KEY = 128


def unmarshal_publish(payload: bytes) -> tuple[str, str, bool, bool]:
    """Decode a basic.publish payload: (exchange, routing key, mandatory, immediate)."""
    cached = DECODED_PUBLISHES.get(payload)
    if cached is not None:
        return cached
    result = _unmarshal_publish(payload)
    if len(payload) <= _DECODED_MAX_KEY:
        if len(DECODED_PUBLISHES) >= _DECODED_LIMIT:
            DECODED_PUBLISHES.clear()
        DECODED_PUBLISHES[payload] = result
    return result


def _unmarshal_publish(payload: bytes) -> tuple[str, str, bool, bool]:
    try:
        exchange, pos = _short_str(payload, 6)  # method id (4) + reserved-1 (2)
        routing_key, pos = _short_str(payload, pos)
        bits = payload[pos]
        if pos + 1 != len(payload):
            raise ValueError("trailing bytes after basic.publish arguments")
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise AmqpError(
            ReplyCode.SYNTAX_ERROR, f"malformed Basic.Publish arguments: {exc}", 60, 40
        ) from exc
    return exchange, routing_key, bool(bits & 1), bool(bits & 2)


def marshal_publish(channel: int, exchange: str, routing_key: str, mandatory: bool) -> bytes:
    """Encode a basic.publish method frame (for tests and the benchmark peer)."""
    ex = exchange.encode()
    rk = routing_key.encode()
    payload = (
        _METHOD_INDEX.pack(PUBLISH_INDEX)
        + b"\x00\x00"
        + bytes((len(ex),))
        + ex
        + bytes((len(rk),))
        + rk
        + bytes((1 if mandatory else 0,))
    )
    return _FRAME_HEAD.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def unmarshal_content_header(payload: bytes) -> tuple[int, bytes]:
    """Decode a content header payload: (body size, raw properties)."""
    if len(payload) < 14:
        raise AmqpError(ReplyCode.FRAME_ERROR, "content header frame truncated")
    class_id, weight, body_size = _HEADER_HEAD.unpack_from(payload, 0)
    if class_id != BASIC_CLASS:
        raise AmqpError(
            ReplyCode.FRAME_ERROR, f"content header for class {class_id}, expected basic (60)"
        )
    if weight != 0:
        raise AmqpError(ReplyCode.FRAME_ERROR, "content header weight must be zero")
    return body_size, payload[12:]


def content_frames(channel: int, properties_raw: bytes, body: bytes, frame_max: int) -> bytes:
    """Content header frame plus as many body frames as ``frame_max`` needs."""
    size = len(body)
    head = _CONTENT_HEAD.pack(FRAME_HEADER, channel, 12 + len(properties_raw), BASIC_CLASS, 0, size)
    parts = [head, properties_raw, FRAME_END_BYTE]
    if size:
        chunk = frame_max - FRAME_OVERHEAD
        if size <= chunk:
            parts += [_FRAME_HEAD.pack(FRAME_BODY, channel, size), body, FRAME_END_BYTE]
        else:
            for start in range(0, size, chunk):
                piece = body[start : start + chunk]
                parts += [_FRAME_HEAD.pack(FRAME_BODY, channel, len(piece)), piece, FRAME_END_BYTE]
    return b"".join(parts)


def short_str_bytes(text: str) -> bytes:
    """A short string as encoded on the wire (length octet plus UTF-8), max 255 bytes."""
    raw = text.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"short string longer than 255 bytes: {text[:40]!r}...")
    return bytes((len(raw),)) + raw


_ROUTE_CACHE: dict[tuple[str, str], bytes] = {}
_ROUTE_CACHE_LIMIT = 4096


def encoded_route(exchange: str, routing_key: str) -> bytes:
    """Exchange and routing key as two short strings (remembered for frequent pairs)."""
    key = (exchange, routing_key)
    route = _ROUTE_CACHE.get(key)
    if route is None:
        route = short_str_bytes(exchange) + short_str_bytes(routing_key)
        if len(_ROUTE_CACHE) >= _ROUTE_CACHE_LIMIT:
            _ROUTE_CACHE.clear()
        _ROUTE_CACHE[key] = route
    return route


def deliver_method(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange_and_key: bytes,
) -> bytes:
    """A basic.deliver method frame.

    ``consumer_tag`` and ``exchange_and_key`` are pre-encoded short strings (see
    :func:`short_str_bytes`), cached by the caller per consumer and per message.
    """
    size = 4 + len(consumer_tag) + 9 + len(exchange_and_key)
    return b"".join(
        (
            _FRAME_HEAD.pack(FRAME_METHOD, channel, size),
            b"\x00\x3c\x00\x3c",
            consumer_tag,
            _DELIVER_TAIL.pack(delivery_tag, 1 if redelivered else 0),
            exchange_and_key,
            FRAME_END_BYTE,
        )
    )


def _deliver_frames(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange_and_key: bytes,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """A whole delivery in one ``bytes``: the :func:`deliver_method` frame followed by the
    :func:`content_frames`, the same bytes, built with one copy of the body. The reference
    of broker/amqp/_wire.c's (:data:`deliver_frames`), and its fallback."""
    size = len(body)
    head = _DELIVER_HEAD.pack(
        FRAME_METHOD, channel, 4 + len(consumer_tag) + 9 + len(exchange_and_key), _DELIVER_INDEX
    )
    content_head = _END_CONTENT_HEAD.pack(
        FRAME_END, FRAME_HEADER, channel, 12 + len(properties_raw), BASIC_CLASS, 0, size
    )
    tail = _DELIVER_TAIL.pack(delivery_tag, 1 if redelivered else 0)
    chunk = frame_max - FRAME_OVERHEAD
    if 0 < size <= chunk:  # one body frame: the common case
        return b"".join(
            (
                head,
                consumer_tag,
                tail,
                exchange_and_key,
                content_head,
                properties_raw,
                _END_BODY_HEAD.pack(FRAME_END, FRAME_BODY, channel, size),
                body,
                FRAME_END_BYTE,
            )
        )
    parts = [head, consumer_tag, tail, exchange_and_key, content_head, properties_raw]
    for start in range(0, size, chunk):
        piece = body[start : start + chunk]
        parts += [_END_BODY_HEAD.pack(FRAME_END, FRAME_BODY, channel, len(piece)), piece]
    parts.append(FRAME_END_BYTE)
    return b"".join(parts)


#: A whole delivery in one ``bytes`` (:func:`_deliver_frames`): natively where
#: broker/amqp/_wire.c is built (about a fifth of the time: no ``struct`` packing, one
#: copy into one buffer), chosen once here.
deliver_frames = _deliver_frames if native_wire is None else native_wire.deliver_frames

#: (data, pos, max payload, decoded) -> (channel, method end, whole end, arguments, raw
#: properties, body) or None: broker/amqp/_wire.c's ``scan_publish``.
PublishScanner = Callable[
    [bytes, int, int, dict[bytes, tuple[str, str, bool, bool]]],
    tuple[int, int, int, tuple[str, str, bool, bool], bytes, bytes] | None,
]

#: A whole publish's frames checked and split in one call where broker/amqp/_wire.c is
#: built (its ``scan_publish``: the method's arguments looked up in
#: :data:`DECODED_PUBLISHES`); None elsewhere, and the parser takes them one at a time.
scan_publish: PublishScanner | None = None if native_wire is None else native_wire.scan_publish


def confirm_frame(channel: int, delivery_tag: int, multiple: bool, ack: bool) -> bytes:
    """A publisher confirm: basic.ack, or basic.nack with ``requeue`` unset (``ack``
    False), as pamqp encodes them (``delivery_tag`` below 2**63)."""
    return _CONFIRM_FRAME.pack(
        FRAME_METHOD,
        channel,
        _CONFIRM_SIZE,
        _ACK_INDEX if ack else _NACK_INDEX,
        delivery_tag,
        1 if multiple else 0,
        FRAME_END,
    )
