"""AMQP 1.0 framing (part 2, section 2.3): protocol headers, frames, and a transfer cut
into frames of at most the peer's max-frame-size. Bytes only, no state.

A frame is ``size`` (4 bytes, the whole frame), ``doff`` (the data offset in 4-byte words,
at least 2), ``type`` (0: AMQP, 1: SASL), a type-specific 2 bytes (the channel), an
extended header (skipped), then the body: one performative and, for a transfer, the payload
after it. A frame of 8 bytes has no body: an empty frame, the idle-timeout heartbeat.

What runs once a message is done by hand, each checked against the codec by
``tests/amqp10/test_codec.py``: a client's usual transfer, flow and disposition are read
(:func:`read_transfer`, :func:`read_flow_or_disposition`; anything else goes to the codec,
which decodes and checks it) and the broker's deliveries written
(:func:`delivery_transfer`, :func:`delivery_frame`).
"""

from __future__ import annotations

import struct
from typing import Any

from broker.amqp10 import codec
from broker.amqp10.errors import Amqp10Error, Scope
from broker.amqp10.performatives import Accepted, Disposition, Flow, Transfer

#: The protocol headers: AMQP (id 0), TLS (2) and SASL (3), each version 1.0.0.
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
TLS_HEADER = b"AMQP\x02\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
HEADERS_1_0 = frozenset({AMQP_HEADER, TLS_HEADER, SASL_HEADER})

FRAME_AMQP = 0
FRAME_SASL = 1
#: The smallest max-frame-size a peer may set (part 2, section 2.7.1: MIN-MAX-FRAME-SIZE).
MIN_MAX_FRAME_SIZE = 512
#: An empty AMQP frame on channel 0: the heartbeat.
EMPTY_FRAME = b"\x00\x00\x00\x08\x02\x00\x00\x00"

#: A frame's first 8 bytes: size, data offset, type, channel.
FRAME_HEAD = struct.Struct(">IBBH")
_HEAD = FRAME_HEAD


def is_amqp10_header(header: bytes) -> bool:
    """Whether an 8-byte protocol header asks for AMQP 1.0 (any of its three layers)."""
    return header in HEADERS_1_0


def frame(channel: int, performative: Any, payload: bytes = b"", kind: int = FRAME_AMQP) -> bytes:
    """One frame carrying ``performative`` (and a transfer's ``payload``)."""
    body = codec.encode(performative)
    return _HEAD.pack(8 + len(body) + len(payload), 2, kind, channel) + body + payload


def read_frame(buf: bytearray, pos: int, limit: int) -> tuple[int, int, int, int] | None:
    """The frame at ``pos`` as (type, channel, body start, end), or None when it has not
    all arrived.

    :raises Amqp10Error: ``amqp:connection:framing-error`` for a frame larger than
        ``limit`` (our max-frame-size) or a data offset outside the frame.
    """
    if len(buf) - pos < 8:
        return None
    size, doff, kind, channel = _HEAD.unpack_from(buf, pos)
    if size > limit:
        raise Amqp10Error(
            "amqp:connection:framing-error",
            f"frame of {size} bytes exceeds max-frame-size {limit}",
            Scope.CONNECTION,
        )
    if size < 8 or doff < 2 or doff * 4 > size:
        raise Amqp10Error(
            "amqp:connection:framing-error",
            f"frame of {size} bytes with data offset {doff}",
            Scope.CONNECTION,
        )
    if len(buf) - pos < size:
        return None
    return kind, channel, pos + doff * 4, pos + size


def transfer_frames(
    channel: int, transfer: Transfer, payload: bytes, max_frame_size: int
) -> tuple[bytes, int]:
    """A transfer of ``payload`` in as many frames as ``max_frame_size`` needs (``more`` on
    every frame but the last; the frames after the first carry only the handle), and how
    many frames that is."""
    first = first_transfer(transfer)
    if 8 + len(first) + len(payload) <= max_frame_size:
        return _HEAD.pack(
            8 + len(first) + len(payload), 2, FRAME_AMQP, channel
        ) + first + payload, 1
    out = bytearray()
    count = 0
    offset = 0
    head = Transfer(
        handle=transfer.handle,
        delivery_id=transfer.delivery_id,
        delivery_tag=transfer.delivery_tag,
        message_format=transfer.message_format,
        settled=transfer.settled,
        more=True,
    )
    middle = Transfer(handle=transfer.handle, more=True)
    performative = codec.encode(head)
    while True:
        room = max_frame_size - 8 - len(performative)
        if room <= 0:
            raise Amqp10Error(
                "amqp:frame-size-too-small",
                f"a transfer does not fit in frames of {max_frame_size} bytes",
                Scope.CONNECTION,
            )
        chunk = payload[offset : offset + room]
        offset += len(chunk)
        if offset >= len(payload):
            last = Transfer(
                handle=transfer.handle,
                settled=transfer.settled,
                state=transfer.state,
            )
            performative = codec.encode(last)
            if 8 + len(performative) + len(chunk) > max_frame_size:
                offset -= len(chunk)  # the closing performative is longer: one frame more
                performative = codec.encode(middle)
                continue
            out += _HEAD.pack(8 + len(performative) + len(chunk), 2, FRAME_AMQP, channel)
            out += performative + chunk
            return bytes(out), count + 1
        out += _HEAD.pack(8 + len(performative) + len(chunk), 2, FRAME_AMQP, channel)
        out += performative + chunk
        count += 1
        performative = codec.encode(middle)


#: The transfer performative's descriptor (smallulong 0x14): a transfer frame's body
#: starts with it.
TRANSFER_DESCRIPTOR = b"\x00\x53\x14"
_TRANSFER = TRANSFER_DESCRIPTOR
_UINT = struct.Struct(">I")
_TWO_UINTS = struct.Struct(">II")


def _uint(value: int) -> bytes:
    if value == 0:
        return b"\x43"  # uint0
    if value < 256:
        return b"\x52" + bytes((value,))  # smalluint
    return b"\x70" + _UINT.pack(value)


def first_transfer(transfer: Transfer) -> bytes:
    """The encoded performative of a delivery's first (or only) transfer frame: the
    broker's deliveries (handle, delivery-id, a tag of at most 255 bytes, message-format,
    settled, nothing after) framed by hand, the same value the codec's generic composite
    encoding gives (``tests/amqp10/test_codec.py`` checks); any other transfer goes
    through the codec."""
    tag = transfer.delivery_tag
    fmt = transfer.message_format
    if (
        transfer.delivery_id is None
        or tag is None
        or len(tag) > 255
        or fmt is None
        or transfer.more
        or transfer.rcv_settle_mode is not None
        or transfer.state is not None
        or transfer.resume
        or transfer.aborted
        or transfer.batchable
    ):
        return codec.encode(transfer)
    items = b"".join(
        (
            _uint(transfer.handle),
            _uint(transfer.delivery_id),
            b"\xa0" + bytes((len(tag),)) + tag,
            _uint(fmt),
            b"\x41" if transfer.settled else b"\x42",
        )
    )
    if len(items) < 255:
        return _TRANSFER + b"\xc0" + bytes((len(items) + 1, 5)) + items  # list8
    return _TRANSFER + b"\xd0" + _UINT.pack(len(items) + 4) + _UINT.pack(5) + items  # list32


def delivery_transfer(handle: int, delivery_id: int, settled: bool) -> bytes:
    """The encoded performative of one of the broker's deliveries: handle, delivery-id,
    the delivery-id as a 4-byte tag, message-format 0, settled; the bytes
    :func:`first_transfer` gives for that transfer (``tests/amqp10/test_codec.py``
    checks), without building it."""
    head = _SMALL_UINT[handle] if handle < 256 else _uint(handle)
    tag = _UINT.pack(delivery_id)
    did = _SMALL_UINT[delivery_id] if delivery_id < 256 else b"\x70" + tag
    items = b"".join((head, did, b"\xa0\x04", tag, b"\x43\x41" if settled else b"\x43\x42"))
    return _TRANSFER + b"\xc0" + bytes((len(items) + 1, 5)) + items


#: uint0 and the smalluints, each encoded.
_SMALL_UINT = [_uint(value) for value in range(256)]
#: What precedes a delivery-id of 256 or more (a uint) in :func:`delivery_transfer`'s
#: bytes, by handle (below 256): the descriptor, the list8's size and count, the handle.
_LONG_ID_HEAD = [_TRANSFER + b"\xc0" + bytes((len(h) + 14, 5)) + h + b"\x70" for h in _SMALL_UINT]


def delivery_frame(
    channel: int, handle: int, delivery_id: int, settled: bool, sections: bytes, body: bytes
) -> bytes:
    """One whole frame of one of the broker's deliveries: :func:`frame_head`,
    :func:`delivery_transfer`, then ``sections`` and ``body`` (the message's bytes, in
    two parts so the body is copied once, here), in one join."""
    if delivery_id < 256 or handle >= 256:
        performative = delivery_transfer(handle, delivery_id, settled)
    else:  # the usual case, without building the performative apart
        tag = _UINT.pack(delivery_id)
        size = 20 + len(_LONG_ID_HEAD[handle]) + len(sections) + len(body)
        return b"".join(
            (
                _HEAD.pack(size, 2, FRAME_AMQP, channel),
                _LONG_ID_HEAD[handle],
                tag,
                b"\xa0\x04",
                tag,
                b"\x43\x41" if settled else b"\x43\x42",
                sections,
                body,
            )
        )
    size = 8 + len(performative) + len(sections) + len(body)
    return b"".join((_HEAD.pack(size, 2, FRAME_AMQP, channel), performative, sections, body))


def delivery_tag(delivery_id: int) -> bytes:
    """The tag of the broker's delivery ``delivery_id``: its 4 bytes."""
    return _UINT.pack(delivery_id)


def frame_head(size: int, channel: int) -> bytes:
    """The 8-byte head of an AMQP frame of ``size`` bytes in all on ``channel``."""
    return _HEAD.pack(size, 2, FRAME_AMQP, channel)


#: What :func:`read_transfer` reads: handle, delivery-id, delivery-tag, message-format,
#: settled, more, and where the payload starts.
TransferFields = tuple[int, int | None, bytes | None, int | None, bool | None, bool, int]


def read_transfer(body: bytes) -> TransferFields | None:
    """A client's usual transfer performative (a list8 or list32 of at most handle,
    delivery-id, delivery-tag, message-format, settled, more; each in its plain
    encodings) read by hand, without building a :class:`Transfer`; None for any other,
    which the codec then decodes (and checks). ``tests/amqp10/test_codec.py`` checks it
    reads what the codec reads. One field after the other, no loop: it runs once a
    message."""
    unpack = _UINT.unpack_from
    try:
        head = body[:4]
        if head == b"\x00\x53\x14\xc0":  # list8 (Proton)
            end = 5 + body[4]
            count = body[5]
            pos = 6
        elif head == b"\x00\x53\x14\xd0":  # list32 (rhea)
            size, count = _TWO_UINTS.unpack_from(body, 4)
            end = 8 + size
            pos = 12
        else:
            return None
        if count > 6 or count < 1 or end > len(body):
            return None
        code = body[pos]  # handle: a uint, never null
        if code == 0x52:
            handle = body[pos + 1]
            pos += 2
        elif code == 0x43:
            handle = 0
            pos += 1
        elif code == 0x70:
            handle = unpack(body, pos + 1)[0]
            pos += 5
        else:
            return None
        delivery_id = fmt = None
        tag: bytes | None = None
        settled: bool | None = None
        more = False
        if count > 1:  # delivery-id: a uint or null
            code = body[pos]
            if code == 0x70:
                delivery_id = unpack(body, pos + 1)[0]
                pos += 5
            elif code == 0x52:
                delivery_id = body[pos + 1]
                pos += 2
            elif code == 0x43:
                delivery_id = 0
                pos += 1
            elif code == 0x40:
                pos += 1
            else:
                return None
        if count > 2:  # delivery-tag: binary (vbin8) or null
            code = body[pos]
            if code == 0xA0:
                size8 = body[pos + 1]
                tag = body[pos + 2 : pos + 2 + size8]
                pos += 2 + size8
            elif code == 0x40:
                pos += 1
            else:
                return None
        if count > 3:  # message-format: a uint or null
            code = body[pos]
            if code == 0x43:
                fmt = 0
                pos += 1
            elif code == 0x52:
                fmt = body[pos + 1]
                pos += 2
            elif code == 0x70:
                fmt = unpack(body, pos + 1)[0]
                pos += 5
            elif code == 0x40:
                pos += 1
            else:
                return None
        if count > 4:  # settled: a boolean or null
            code = body[pos]
            if code == 0x42:
                settled = False
            elif code == 0x41:
                settled = True
            elif code != 0x40:
                return None
            pos += 1
        if count > 5:  # more: a boolean or null (false)
            code = body[pos]
            if code == 0x41:
                more = True
            elif code != 0x42 and code != 0x40:
                return None
            pos += 1
        if pos != end:
            return None
        return handle, delivery_id, tag, fmt, settled, more, end
    except (IndexError, struct.error):
        return None


def decode_transfer(body: bytes) -> tuple[Transfer, int] | None:
    """:func:`read_transfer` as the :class:`Transfer` the codec decodes, and where its
    payload starts; None where that reads nothing."""
    found = read_transfer(body)
    if found is None:
        return None
    handle, delivery_id, tag, fmt, settled, more, end = found
    return Transfer(handle, delivery_id, tag, fmt, settled, more), end


#: The flow's and the disposition's descriptors (smallulong 0x13, 0x15).
_FLOW = b"\x00\x53\x13"
_DISPOSITION = b"\x00\x53\x15"
#: The accepted outcome as clients write it: a described list0 or an empty list8.
_ACCEPTED_LIST0 = b"\x00\x53\x24\x45"
_ACCEPTED_LIST8 = b"\x00\x53\x24\xc0\x01\x00"
_ACCEPTED = Accepted()
#: The fields read by hand, by kind: "u" a uint, "b" a boolean, "s" a delivery state
#: (accepted only); each may be null.
_FLOW_KINDS = "uuuuuuuubb"
_DISPOSITION_KINDS = "buubsb"


def _read_fields(body: bytes, kinds: str) -> tuple[list[Any], int] | None:
    """The fields of a performative list (after its 3-byte descriptor) whose fields are
    of ``kinds`` in their plain encodings (None for a null), and where the list ends;
    None for any other."""
    unpack = _UINT.unpack_from
    code = body[3]
    if code == 0xC0:
        end = 5 + body[4]
        count = body[5]
        pos = 6
    elif code == 0xD0:
        size, count = _TWO_UINTS.unpack_from(body, 4)
        end = 8 + size
        pos = 12
    elif code == 0x45:  # list0
        return [], 4
    else:
        return None
    if count > len(kinds) or end > len(body):
        return None
    values: list[Any] = []
    for index in range(count):
        code = body[pos]
        kind = kinds[index]
        if code == 0x40:
            values.append(None)
            pos += 1
        elif kind == "u":
            if code == 0x52:
                values.append(body[pos + 1])
                pos += 2
            elif code == 0x70:
                values.append(unpack(body, pos + 1)[0])
                pos += 5
            elif code == 0x43:
                values.append(0)
                pos += 1
            else:
                return None
        elif kind == "b":
            if code == 0x41 or code == 0x42:
                values.append(code == 0x41)
                pos += 1
            elif code == 0x56 and body[pos + 1] <= 1:
                values.append(body[pos + 1] == 1)
                pos += 2
            else:
                return None
        elif body[pos : pos + 4] == _ACCEPTED_LIST0:
            values.append(_ACCEPTED)
            pos += 4
        elif body[pos : pos + 6] == _ACCEPTED_LIST8:
            values.append(_ACCEPTED)
            pos += 6
        else:
            return None
    if pos != end:
        return None
    return values, end


def read_flow_or_disposition(body: bytes) -> tuple[Flow | Disposition, int] | None:
    """A client's flow or disposition (the usual ones: uint and boolean fields, no
    properties, the accepted outcome or none) read by hand, and where it ends; None for
    any other frame, which the codec then decodes (and checks). A consumer's client
    sends them about as often as it settles: the generic codec took tens of
    microseconds for each. ``tests/amqp10/test_codec.py`` checks it reads what the codec
    reads."""
    try:
        descriptor = body[:3]
        if descriptor == _FLOW:
            found = _read_fields(body, _FLOW_KINDS)
            if found is None:
                return None
            values, end = found
            values += [None] * (10 - len(values))
            if values[1] is None or values[2] is None or values[3] is None:
                return None  # a mandatory field missing: the codec says so
            flow = Flow(
                values[0], values[1], values[2], values[3], values[4], values[5],
                values[6], values[7], bool(values[8]), bool(values[9]),
            )  # fmt: skip
            return flow, end
        if descriptor == _DISPOSITION:
            found = _read_fields(body, _DISPOSITION_KINDS)
            if found is None:
                return None
            values, end = found
            values += [None] * (6 - len(values))
            if values[0] is None or values[1] is None:
                return None
            disposition = Disposition(
                values[0], values[1], values[2], bool(values[3]), values[4], bool(values[5])
            )
            return disposition, end
        return None
    except (IndexError, struct.error):
        return None
