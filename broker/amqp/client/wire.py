"""Wire details shared by the client's connection, channel and handshake.

Contract: :class:`Delivery` is what a consumer's callback (and basic.get) receives;
:func:`_decode_deliver` is the hot-path decoder of basic.deliver's arguments (raising
:class:`~broker.amqp.client.errors._ProtocolError` on malformed ones); the struct formats
and frame constants here are the only ones the client packs or unpacks by hand.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.client.errors import _ProtocolError
from broker.core.errors import ReplyCode

_FRAME_HEAD = struct.Struct(">BHI")
_U32 = struct.Struct(">I")
_QB = struct.Struct(">QB")
_ACK_FRAME = struct.Struct(">BHIIQBB")  # head, method id, tag, bits, frame end
_DELIVER = 0x003C003C
_ACK = 0x003C0050
_FRAME_END = framing.FRAME_END
_FRAME_METHOD = framing.FRAME_METHOD
_FRAME_HEADER = framing.FRAME_HEADER
_FRAME_BODY = framing.FRAME_BODY
_FRAME_HEARTBEAT = framing.FRAME_HEARTBEAT

# content kinds a channel may be assembling


class Delivery(NamedTuple):
    """One message from basic.deliver (or basic.get-ok, with an empty consumer tag).

    Immutable; a ``NamedTuple`` because it is built for every delivery on the hot path.
    ``properties_raw`` is the content header's property flags and list, undecoded.
    """

    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties_raw: bytes
    body: bytes
    consumer_tag: str


DeliveryCallback = Callable[[Delivery], None]
CancelCallback = Callable[[str], None]


def _decode_deliver(payload: bytes) -> tuple[str, int, bool, str, str]:
    """basic.deliver arguments: (consumer tag, delivery tag, redelivered, exchange, key)."""
    length = payload[4]
    pos = 5 + length
    consumer_tag = payload[5:pos].decode()
    delivery_tag, bits = _QB.unpack_from(payload, pos)
    pos += 9
    length = payload[pos]
    start = pos + 1
    pos = start + length
    exchange = payload[start:pos].decode()
    length = payload[pos]
    start = pos + 1
    pos = start + length
    routing_key = payload[start:pos].decode()
    if pos != len(payload):
        raise _ProtocolError(ReplyCode.SYNTAX_ERROR, "malformed basic.deliver arguments")
    return consumer_tag, delivery_tag, bool(bits & 1), exchange, routing_key


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value if value is not None else "")


def _method_frame(method: Method, channel: int) -> bytes:
    return framing.marshal_method(method, channel)
