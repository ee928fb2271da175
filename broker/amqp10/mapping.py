"""An AMQP 1.0 message as the broker stores it (a 0-9-1 message: content-header
properties and a body) and back: RabbitMQ 4's mapping (its "Inter-Protocol Property
Conversions" page), in the part that is implemented; ``docs/amqp-1-0.md`` has the table.

1.0 to 0-9-1 (:func:`to_properties`): ``header.durable`` -> ``delivery_mode`` 2 (else 1),
``priority``, ``ttl`` -> ``expiration`` (milliseconds as text); ``message-id`` and
``correlation-id`` as text when they are a short string, a ulong or a uuid
(``urn:uuid:...``), else (binary, or text over 255 bytes) in the ``x-message-id`` /
``x-correlation-id`` header; ``user-id``, ``reply-to``, ``content-type``,
``content-encoding``; ``creation-time`` -> ``timestamp`` (seconds); ``group-id`` ->
``app_id``; application properties -> headers (binary as a byte array; a double as the
0-9-1 float pamqp encodes, 32 bits); message annotations whose key starts with ``x-`` ->
headers. A body of one ``data`` section is the 0-9-1 body as is; any other body
(``amqp-value``, ``amqp-sequence``, several ``data``) is kept encoded, its sections as they
came, with ``type`` ``amqp-1.0``.

0-9-1 to 1.0 (:func:`to_message`): the reverse; a ``urn:uuid:`` id as a uuid; headers whose
key starts with ``x-`` (but ``x-message-id``/``x-correlation-id``) as message annotations,
the others as application properties (values that are tables or arrays are left out, as
1.0 allows no compound there); ``type`` as the annotation ``x-basic-type``; a body of
``type`` ``amqp-1.0`` as the sections it holds, any other as one ``data`` section.
"""

from __future__ import annotations

import datetime
import functools
import struct
import uuid
from decimal import Decimal
from typing import Any

from pamqp import commands

from broker.amqp10 import codec
from broker.amqp10.codec import DecodeError
from broker.amqp10.sections import AmqpMessage, Data, Header, Properties, parse_message
from broker.amqp10.types import Symbol, Timestamp, UInt
from broker.core import properties as basic_properties

#: The 0-9-1 ``type`` of a body that holds AMQP 1.0 sections (RabbitMQ's).
AMQP_1_0_TYPE = "amqp-1.0"
_UUID_PREFIX = "urn:uuid:"


def _short(value: str) -> bool:
    return len(value.encode()) < 256 and "\x00" not in value


def _id_text(value: Any) -> str | None:
    """A message or correlation id as a 0-9-1 short string, or None when it is not one."""
    if isinstance(value, uuid.UUID):
        return _UUID_PREFIX + str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and _short(value):
        return value
    return None


def _header_value(value: Any) -> Any:
    """An application property's value as a 0-9-1 field value."""
    if isinstance(value, Timestamp):
        return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return bytearray(value)  # a 0-9-1 byte array ('x'), as pamqp encodes one
    if isinstance(value, str | bool | int | float) or value is None:
        return str(value) if isinstance(value, Symbol) else value
    if isinstance(value, list):
        return [_header_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _header_value(v) for k, v in value.items()}
    return repr(value)


def to_properties(message: AmqpMessage) -> tuple[commands.Basic.Properties, bytes]:
    """The 0-9-1 properties and body of a 1.0 message (see the module docstring)."""
    props = commands.Basic.Properties()
    headers: dict[str, Any] = {}
    header = message.header
    props.delivery_mode = 2 if header is not None and header.durable else 1
    if header is not None:
        if header.priority != 4:
            props.priority = min(int(header.priority), 255)
        if header.ttl is not None:
            props.expiration = str(int(header.ttl))
    p = message.properties
    if p is not None:
        for field, key in (("message_id", "x-message-id"), ("correlation_id", "x-correlation-id")):
            value = getattr(p, field)
            if value is None:
                continue
            text = _id_text(value)
            if text is not None:
                setattr(props, field, text)
            else:
                headers[key] = _header_value(value)
        if p.user_id is not None:
            try:
                user = bytes(p.user_id).decode("utf-8")
            except UnicodeDecodeError:
                user = None
            if user is not None and _short(user):
                props.user_id = user
        if p.reply_to is not None and _short(p.reply_to):
            props.reply_to = p.reply_to
        if p.content_type is not None:
            props.content_type = str(p.content_type)
        if p.content_encoding is not None:
            props.content_encoding = str(p.content_encoding)
        if p.creation_time is not None:
            props.timestamp = datetime.datetime.fromtimestamp(
                int(p.creation_time) // 1000, datetime.UTC
            )
        if p.group_id is not None and _short(p.group_id):
            props.app_id = p.group_id
    for key, value in (message.application_properties or {}).items():
        if isinstance(key, str) and _short(key):
            headers[str(key)] = _header_value(value)
    for key, value in (message.message_annotations or {}).items():
        if isinstance(key, str) and key.startswith("x-") and _short(key):
            headers[str(key)] = _header_value(value)
    if headers:
        props.headers = headers
    body = message.data
    if body is None:
        body = message.body_raw or b"".join(codec.encode(section) for section in message.body)
        props.message_type = AMQP_1_0_TYPE
    return props, body


#: A received 1.0 message as the broker stores it, and what the link checks of it: the
#: 0-9-1 content-header properties (encoded), the body, ``user-id`` and ``to`` (a plain
#: tuple: one is made a message).
Stored = tuple[bytes, bytes, str | None, str | None]

#: Sections before a data body up to this size are mapped through a cache.
_PREFIX_CACHED = 1024


def stored_form(payload: bytes) -> Stored:
    """:func:`to_properties` of a transfer's payload, encoded. A message whose body is one
    ``data`` section at its end (the usual case) is split there without decoding the body,
    and the sections before it, which most messages of a stream share, are mapped once
    per distinct value (a small cache); any other message is parsed whole. The split is
    the parse: AMQP values are self-delimiting, so sections that decode exactly up to a
    data section running to the end are the message's sections.

    :raises DecodeError: not a message. ``ValueError``, ``TypeError``, ``OverflowError``,
        ``struct.error``: a value 0-9-1 cannot carry.
    """
    size = len(payload)
    at = payload.find(_DATA)
    if (  # the usual body first: the first data section's start, a vbin32 to the end
        at != -1
        and at + 8 <= size
        and payload[at + 3] == 0xB0
        and _UINT.unpack_from(payload, at + 4)[0] == size - at - 8
    ):
        split: tuple[int, int] | None = at, at + 8
    else:
        split = _data_split(payload)
    if split is not None:
        start, body_at = split
        prefix = bytes(payload[:start])
        try:
            if len(prefix) <= _PREFIX_CACHED:
                raw, user, to = _cached_prefix(prefix)
            else:
                raw, user, to = _map_prefix(prefix)
            return raw, bytes(payload[body_at:]), user, to
        except DecodeError:
            pass  # a data section's bytes inside an earlier section: parse it whole
    message = parse_message(payload)
    props, body = to_properties(message)
    to = message.properties.to if message.properties is not None else None
    return basic_properties.encode(props), body, props.user_id, to


def _data_split(payload: bytes) -> tuple[int, int] | None:
    """Where a ``data`` section that runs to the end of ``payload`` starts, and where its
    bytes start; None if there is none."""
    size = len(payload)
    at = payload.find(_DATA)
    while at != -1 and at + 4 < size:
        code = payload[at + 3]
        if code == 0xA0 and payload[at + 4] == size - at - 5:
            return at, at + 5
        if (
            code == 0xB0
            and at + 8 <= size
            and int.from_bytes(payload[at + 4 : at + 8], "big") == size - at - 8
        ):
            return at, at + 8
        at = payload.find(_DATA, at + 1)
    return None


def _map_prefix(prefix: bytes) -> tuple[bytes, str | None, str | None]:
    """The encoded 0-9-1 properties, user-id and ``to`` of the sections before a data body."""
    message = parse_message(prefix)  # decoded alone: it must end exactly where the body starts
    if message.body or message.footer is not None:
        raise DecodeError("a body or footer before the trailing data section")
    message.body = [Data(b"")]
    props, _ = to_properties(message)
    to = message.properties.to if message.properties is not None else None
    return basic_properties.encode(props), props.user_id, to


_cached_prefix = functools.lru_cache(maxsize=256)(_map_prefix)


def _id_value(text: str) -> Any:
    if text.startswith(_UUID_PREFIX):
        try:
            return uuid.UUID(text[len(_UUID_PREFIX) :])
        except ValueError:
            return text
    return text


def _amqp_value(value: Any) -> Any:
    """A 0-9-1 header value as an AMQP 1.0 simple value (None: not carried)."""
    if isinstance(value, datetime.datetime):
        return Timestamp(int(value.timestamp() * 1000))
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict | list):
        return None
    return value


def to_message(raw_properties: bytes, body: bytes, delivery_count: int) -> bytes:
    """The 1.0 encoding (its sections) of a stored 0-9-1 message, for a delivery after
    ``delivery_count`` earlier ones: :func:`delivery_sections` and the body's bytes."""
    return delivery_sections(raw_properties, len(body), delivery_count) + body


def delivery_sections(raw_properties: bytes, body_size: int, delivery_count: int) -> bytes:
    """What comes before a stored message's body bytes in its 1.0 encoding, for a
    delivery after ``delivery_count`` earlier ones: the header, the sections after it
    (annotations, properties, application properties) and, unless the body is 1.0
    sections kept encoded, the head of the ``data`` section of ``body_size`` bytes.

    Only the header depends on the delivery, and the rest on the 0-9-1 properties and
    the body's size, which most messages of a stream share: a first or early delivery's
    value is one lookup in a small cache; a delivery writes it and the body's bytes as
    they are (no copy of the body here)."""
    if delivery_count <= _COUNTS_CACHED:
        return _cached_sections(raw_properties, body_size, delivery_count)
    return _sections(raw_properties, body_size, delivery_count)


def _sections(raw_properties: bytes, body_size: int, delivery_count: int) -> bytes:
    header_key, before_body, amqp_body = _bare_sections(raw_properties)
    header = _header(*header_key, delivery_count)
    if amqp_body:
        return header + before_body
    return header + before_body + data_head(body_size)


_cached_sections = functools.lru_cache(maxsize=1024)(_sections)


#: Headers of deliveries up to this count come from a cache (the later ones are rare).
_COUNTS_CACHED = 8
_DATA = b"\x00\x53\x75"  # the data section's descriptor: smallulong 0x75
_UINT = struct.Struct(">I")


def data_head(size: int) -> bytes:
    """What precedes the ``size`` bytes of a ``data`` section (vbin8 or vbin32)."""
    if size < 256:
        return _DATA + b"\xa0" + bytes((size,))
    return _DATA + b"\xb0" + size.to_bytes(4, "big")


def _header(durable: bool, priority: int, ttl: int | None, delivery_count: int) -> bytes:
    """The encoded header section of a delivery after ``delivery_count`` earlier ones."""
    header = Header(
        durable=durable,
        priority=priority,
        ttl=None if ttl is None else UInt(ttl),
        first_acquirer=delivery_count == 0,
        delivery_count=UInt(delivery_count),
    )
    return codec.encode(header)


@functools.lru_cache(maxsize=1024)
def _bare_sections(
    raw_properties: bytes,
) -> tuple[tuple[bool, int, int | None], bytes, bool]:
    """What a stored message's 0-9-1 properties give its 1.0 form: the header's fields
    (durable, priority, ttl), the sections between the header and the body, encoded, and
    whether the body is 1.0 sections kept encoded (``type`` ``amqp-1.0``)."""
    props = basic_properties.decode(raw_properties)
    header_key = (
        props.delivery_mode == 2,
        int(props.priority) if props.priority is not None else 4,
        int(props.expiration) if props.expiration and props.expiration.isdigit() else None,
    )
    headers = dict(props.headers or {})
    message_id: Any = _id_value(props.message_id) if props.message_id else None
    correlation_id: Any = _id_value(props.correlation_id) if props.correlation_id else None
    if message_id is None and isinstance(headers.get("x-message-id"), bytearray | bytes | str):
        message_id = _amqp_value(headers.pop("x-message-id"))
    if correlation_id is None and isinstance(
        headers.get("x-correlation-id"), bytearray | bytes | str
    ):
        correlation_id = _amqp_value(headers.pop("x-correlation-id"))
    properties = Properties(
        message_id=message_id,
        user_id=props.user_id.encode() if props.user_id else None,
        reply_to=props.reply_to or None,
        correlation_id=correlation_id,
        content_type=Symbol(props.content_type) if props.content_type else None,
        content_encoding=Symbol(props.content_encoding) if props.content_encoding else None,
        creation_time=(
            Timestamp(int(props.timestamp.timestamp()) * 1000) if props.timestamp else None
        ),
        group_id=props.app_id or None,
    )
    annotations: dict[Any, Any] = {}
    application: dict[Any, Any] = {}
    for key, value in headers.items():
        converted = _amqp_value(value)
        if converted is None and value is not None:
            continue
        if key.startswith("x-"):
            annotations[Symbol(key)] = converted
        else:
            application[key] = converted
    amqp_body = props.message_type == AMQP_1_0_TYPE
    if props.message_type and not amqp_body:
        annotations[Symbol("x-basic-type")] = props.message_type
    message = AmqpMessage(
        message_annotations=annotations or None,
        properties=properties if properties != Properties() else None,
        application_properties=application or None,
    )
    return header_key, message.encode(), amqp_body
