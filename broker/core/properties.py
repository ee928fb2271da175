"""Basic-class message properties, kept as the bytes the publisher sent.

The broker forwards properties unchanged, so a message keeps the raw property bytes of its
content header (flag words followed by the property list) and decodes them only when a rule
needs a value: ``scan`` checks the layout and pulls out the few fields routing and expiry
read (cheap, on every publish); ``decode``/``encode`` go through pamqp for the rare paths
(headers exchange, dead-lettering) that need everything.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pamqp import commands

from broker.core.field_tables import check_depth

# Property flag bits, most significant first, in property-list order.
FLAG_CONTENT_TYPE = 1 << 15
FLAG_CONTENT_ENCODING = 1 << 14
FLAG_HEADERS = 1 << 13
FLAG_DELIVERY_MODE = 1 << 12
FLAG_PRIORITY = 1 << 11
FLAG_CORRELATION_ID = 1 << 10
FLAG_REPLY_TO = 1 << 9
FLAG_EXPIRATION = 1 << 8
FLAG_MESSAGE_ID = 1 << 7
FLAG_TIMESTAMP = 1 << 6
FLAG_TYPE = 1 << 5
FLAG_USER_ID = 1 << 4
FLAG_APP_ID = 1 << 3
FLAG_CLUSTER_ID = 1 << 2

_SHORTSTR_FLAGS = (
    FLAG_CONTENT_TYPE
    | FLAG_CONTENT_ENCODING
    | FLAG_CORRELATION_ID
    | FLAG_REPLY_TO
    | FLAG_EXPIRATION
    | FLAG_MESSAGE_ID
    | FLAG_TYPE
    | FLAG_USER_ID
    | FLAG_APP_ID
    | FLAG_CLUSTER_ID
)
_OCTET_FLAGS = FLAG_DELIVERY_MODE | FLAG_PRIORITY

#: The ``reply_to`` of a direct reply-to request (broker.core.direct_reply).
DIRECT_REPLY_TO = b"amq.rabbitmq.reply-to"

#: Raw properties with no property set: one flag word of zero.
EMPTY = b"\x00\x00"

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class ScannedProperties:
    """The fields the broker itself reads from a message's properties."""

    delivery_mode: int
    expiration: str | None
    has_headers: bool
    user_id: str | None = None
    priority: int = 0
    #: ``reply_to`` is ``amq.rabbitmq.reply-to`` (direct reply-to: the broker rewrites it).
    direct_reply_to: bool = False


_PLAIN = ScannedProperties(delivery_mode=0, expiration=None, has_headers=False)


_SCAN_CACHE: dict[bytes, tuple[bytes, ScannedProperties]] = {}
_SCAN_CACHE_LIMIT = 4096
_SCAN_CACHE_MAX_KEY = 96
_PLAIN_SHARED = (EMPTY, _PLAIN)


def scan(raw: bytes) -> ScannedProperties:
    """Check the layout of raw property bytes and return the fields the broker reads.

    Publishers tend to send the same few property blocks over and over, so results for
    short blocks are remembered. Raises ``ValueError`` when the bytes do not hold a
    well-formed property list.
    """
    return scan_shared(raw)[1]


def scan_shared(raw: bytes) -> tuple[bytes, ScannedProperties]:
    """:func:`scan`, and bytes equal to ``raw`` that a message may keep instead: for a
    short block seen before, the one object every message with these properties shares
    (a queue of a million messages published with the same properties holds one copy)."""
    if raw == EMPTY:
        return _PLAIN_SHARED
    cached = _SCAN_CACHE.get(raw)
    if cached is not None:
        return cached
    result = (raw, _scan(raw))
    if len(raw) <= _SCAN_CACHE_MAX_KEY:
        if len(_SCAN_CACHE) >= _SCAN_CACHE_LIMIT:
            _SCAN_CACHE.clear()
        _SCAN_CACHE[raw] = result
    return result


def _scan(raw: bytes) -> ScannedProperties:
    if len(raw) < 2:
        raise ValueError("content header properties truncated")
    (flags,) = _U16.unpack_from(raw, 0)
    if flags & 1:
        raise ValueError("content header has more than one property flag word")
    pos = 2
    end = len(raw)
    delivery_mode = 0
    expiration: str | None = None
    user_id: str | None = None
    priority = 0
    direct_reply_to = False
    bit = 1 << 15
    while bit > 2:
        if flags & bit:
            if bit & _SHORTSTR_FLAGS:
                if pos >= end:
                    raise ValueError("content header properties truncated")
                length = raw[pos]
                if pos + 1 + length > end:
                    raise ValueError("content header short string overruns the frame")
                if bit == FLAG_EXPIRATION:
                    expiration = raw[pos + 1 : pos + 1 + length].decode("utf-8", "replace")
                elif bit == FLAG_USER_ID:
                    user_id = raw[pos + 1 : pos + 1 + length].decode("utf-8", "replace")
                elif bit == FLAG_REPLY_TO:
                    direct_reply_to = raw[pos + 1 : pos + 1 + length] == DIRECT_REPLY_TO
                pos += 1 + length
            elif bit & _OCTET_FLAGS:
                if pos >= end:
                    raise ValueError("content header properties truncated")
                if bit == FLAG_DELIVERY_MODE:
                    delivery_mode = raw[pos]
                else:
                    priority = raw[pos]
                pos += 1
            elif bit == FLAG_HEADERS:
                if pos + 4 > end:
                    raise ValueError("content header properties truncated")
                (length,) = _U32.unpack_from(raw, pos)
                pos += 4 + length
                if pos > end:
                    raise ValueError("content header table overruns the frame")
            else:  # timestamp
                pos += 8
                if pos > end:
                    raise ValueError("content header properties truncated")
        bit >>= 1
    if flags & 0b11:
        raise ValueError("content header sets reserved property flags")
    if pos != end:
        raise ValueError("content header has trailing bytes after its properties")
    return ScannedProperties(
        delivery_mode, expiration, bool(flags & FLAG_HEADERS), user_id, priority, direct_reply_to
    )


def decode(raw: bytes) -> commands.Basic.Properties:
    """Decode every property (pamqp). Raises ``ValueError`` on malformed bytes."""
    props = commands.Basic.Properties()
    if raw == EMPTY:
        return props
    try:
        (flags,) = _U16.unpack_from(raw, 0)
        props.unmarshal(flags, raw[2:])
        check_depth(props.headers, "headers")
    except RecursionError:
        raise ValueError("malformed message properties: headers nested too deep") from None
    except (struct.error, ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed message properties: {exc}") from exc
    return props


def encode(props: commands.Basic.Properties) -> bytes:
    """Encode properties to raw bytes (flag word plus property list)."""
    return bytes(props.marshal())


def headers_of(raw: bytes) -> dict[str, Any]:
    """The application headers table, or an empty dict."""
    if raw == EMPTY:
        return {}
    (flags,) = _U16.unpack_from(raw, 0)
    if not flags & FLAG_HEADERS:
        return {}
    return dict(decode(raw).headers or {})


def parse_expiration(expiration: str | None) -> int | None:
    """Per-message TTL in milliseconds from the ``expiration`` property, None when unset.

    Raises ``ValueError`` for a value that is not a non-negative integer (RabbitMQ refuses
    such a publish with PRECONDITION_FAILED).
    """
    if expiration is None:
        return None
    text = expiration.strip()
    if not text.isdigit():
        raise ValueError(f"invalid expiration {expiration!r}: expected milliseconds")
    return int(text)
