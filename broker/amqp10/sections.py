"""An AMQP 1.0 message's sections (part 3, section 3.2): the bare message and its
annotations, as a transfer carries them, one encoded section after another.

:func:`parse_message` reads a transfer's payload into an :class:`AmqpMessage` (each section
at most once, in the specification's order, the body one or more ``data`` sections, one or
more ``amqp-sequence`` sections, or one ``amqp-value``); :meth:`AmqpMessage.encode` writes
it back. The body's bytes are also kept as they came (``body_raw``), so a body the broker
does not read goes out again unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.amqp10 import codec
from broker.amqp10.codec import DecodeError
from broker.amqp10.composite import Composite, Wrapper, composite


@composite
@dataclass(frozen=True, slots=True)
class Header(Composite):
    CODE, NAME = 0x70, "amqp:header:list"
    KINDS = ("bool", "ubyte", "uint", "bool", "uint")
    durable: bool = False
    priority: int = 4
    ttl: int | None = None
    first_acquirer: bool = False
    delivery_count: int = 0


@composite
@dataclass(frozen=True, slots=True)
class Properties(Composite):
    CODE, NAME = 0x73, "amqp:properties:list"
    KINDS = (
        "any", "binary", "string", "string", "string", "any", "symbol", "symbol",
        "timestamp", "timestamp", "string", "uint", "string",
    )  # fmt: skip
    message_id: Any = None
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: Any = None
    content_type: str | None = None
    content_encoding: str | None = None
    absolute_expiry_time: int | None = None
    creation_time: int | None = None
    group_id: str | None = None
    group_sequence: int | None = None
    reply_to_group_id: str | None = None


class DeliveryAnnotations(Wrapper):
    CODE, NAME, KIND = 0x71, "amqp:delivery-annotations:map", "map"


class MessageAnnotations(Wrapper):
    CODE, NAME, KIND = 0x72, "amqp:message-annotations:map", "map"


class ApplicationProperties(Wrapper):
    CODE, NAME, KIND = 0x74, "amqp:application-properties:map", "map"


class Data(Wrapper):
    CODE, NAME, KIND = 0x75, "amqp:data:binary", "binary"


class AmqpSequence(Wrapper):
    CODE, NAME, KIND = 0x76, "amqp:amqp-sequence:list", "list"


class AmqpValue(Wrapper):
    CODE, NAME, KIND = 0x77, "amqp:value:*", "any"


class Footer(Wrapper):
    CODE, NAME, KIND = 0x78, "amqp:footer:map", "map"


#: The order sections come in; the body (data, sequence, value) sits at BODY.
_ORDER = {
    Header: 0,
    DeliveryAnnotations: 1,
    MessageAnnotations: 2,
    Properties: 3,
    ApplicationProperties: 4,
    Data: 5,
    AmqpSequence: 5,
    AmqpValue: 5,
    Footer: 6,
}
BODY = 5


@dataclass(slots=True)
class AmqpMessage:
    """One message: its sections (None where absent) and its body sections."""

    header: Header | None = None
    delivery_annotations: dict[Any, Any] | None = None
    message_annotations: dict[Any, Any] | None = None
    properties: Properties | None = None
    application_properties: dict[Any, Any] | None = None
    #: The body sections: one or more Data, one or more AmqpSequence, or one AmqpValue.
    body: list[Data | AmqpSequence | AmqpValue] = field(default_factory=list)
    footer: dict[Any, Any] | None = None
    #: The body sections as they were encoded (b"" when built here).
    body_raw: bytes = b""

    @property
    def data(self) -> bytes | None:
        """The body when it is exactly one data section, else None."""
        if len(self.body) == 1 and isinstance(self.body[0], Data):
            return bytes(self.body[0].value)
        return None

    def encode(self) -> bytes:
        out = bytearray()
        for section in self._sections_before_body():
            codec.encode_into(out, section)
        if self.body_raw:
            out += self.body_raw
        else:
            for body in self.body:
                codec.encode_into(out, body)
        if self.footer is not None:
            codec.encode_into(out, Footer(self.footer))
        return bytes(out)

    def _sections_before_body(self) -> list[Any]:
        found: list[Any] = []
        if self.header is not None:
            found.append(self.header)
        if self.delivery_annotations is not None:
            found.append(DeliveryAnnotations(self.delivery_annotations))
        if self.message_annotations is not None:
            found.append(MessageAnnotations(self.message_annotations))
        if self.properties is not None:
            found.append(self.properties)
        if self.application_properties is not None:
            found.append(ApplicationProperties(self.application_properties))
        return found


def parse_message(payload: bytes) -> AmqpMessage:
    """The message a transfer carried.

    :raises DecodeError: not a sequence of sections, one out of order or twice, or a body
        mixing kinds.
    """
    message = AmqpMessage()
    pos = 0
    last = -1
    body_start = body_end = -1
    while pos < len(payload):
        start = pos
        section, pos = codec.decode(payload, pos)
        kind = type(section)
        order = _ORDER.get(kind)
        if order is None:
            raise DecodeError(f"not a message section: {type(section).__name__}")
        if order < last or (order == last and order != BODY):
            raise DecodeError(f"message section {section.NAME} out of order or repeated")
        last = order
        if order == BODY:
            if message.body and (type(message.body[0]) is not kind or kind is AmqpValue):
                raise DecodeError("a message body mixes section kinds or repeats amqp-value")
            message.body.append(section)
            if body_start < 0:
                body_start = start
            body_end = pos
        elif isinstance(section, Header):
            message.header = section
        elif isinstance(section, DeliveryAnnotations):
            message.delivery_annotations = section.value
        elif isinstance(section, MessageAnnotations):
            message.message_annotations = section.value
        elif isinstance(section, Properties):
            message.properties = section
        elif isinstance(section, ApplicationProperties):
            message.application_properties = section.value
        else:
            message.footer = section.value
    if body_start >= 0:
        message.body_raw = bytes(payload[body_start:body_end])
    return message
