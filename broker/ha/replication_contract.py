"""What a client may declare in an HA cluster: what the replication wire carries.

Primary side (and every cluster member, whose virtual hosts ask it before creating what a
client declared: :mod:`broker.core.declare_contract`). Issue 24's rule: *what the primary
accepts, the backups can apply*. A declare the wire cannot carry is refused up front, with a
reply code and a text naming the limit and the value, instead of being accepted on the
primary and stalling its replication (a declare-ok that never comes, confirms held forever).

The limits come from the wire codecs themselves, so a new wire format changes them there
and nowhere else:

- **Stream names** (:mod:`broker.ha.names`): a backup consumes a level-``all`` queue's
  messages from ``qpid.ha-queue:<name>``, an AMQP short string (255 bytes), so such a
  queue's name may hold at most :data:`QUEUE_NAME_MAX_BYTES` bytes (241).
- **The configuration wire** (:mod:`broker.ha.wire_config`): a replicated queue's,
  exchange's or binding's arguments travel in a field table whose nesting is bounded
  (:data:`~broker.ha.wire_config.MAX_DEPTH`), and the arguments sit
  :data:`ARGUMENTS_LEVEL` levels into a snapshot, so they may nest at most
  :data:`ARGUMENTS_MAX_DEPTH` tables or arrays deep; a field name is at most
  :data:`~broker.ha.wire_config.MAX_KEY_BYTES` bytes; a float goes as 32 bits (one that a
  32-bit float cannot hold exactly would reach the backups changed); and the arguments must
  come back equal from the real codec (:func:`carried`, the last word).
- **Batches** (:mod:`broker.ha.wire_batch`): a dead-lettered message is replicated with the
  queue's ``x-dead-letter-exchange`` and ``x-dead-letter-routing-key`` as its exchange and
  routing key, short strings of at most :data:`~broker.ha.wire_batch.MAX_SHORT_STRING`
  bytes. Message properties and headers travel as the raw bytes the client sent and bodies
  as they came: whatever the AMQP codec accepted, a batch carries.
- **Reserved names**: ``qpid.ha-*`` (HA's own streams and properties) is refused with 403
  ACCESS_REFUSED for a new queue or exchange.

What is not replicated (level ``none``: ``qpid.replicate`` or the broker's default; a
binding whose queue or exchange is not replicated) is not limited here. Pure functions of
their arguments and the broker's default level; no I/O.

THREAD UNSAFE: a virtual host calls it on its loop.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from broker.core.errors import AmqpError, ReplyCode, access_refused
from broker.core.exchange import Binding, Exchange
from broker.core.field_tables import MAX_DEPTH, depth
from broker.core.vhost_rules import VHOST
from broker.ha.names import QUEUE_STREAM_PREFIX, STREAM_PREFIX
from broker.ha.replicate_level import ReplicateLevel, binding_replicated, level_of
from broker.ha.wire import (
    CONFIG_MAX_DEPTH,
    CONFIG_MAX_KEY_BYTES,
    MAX_SHORT_STRING,
    decode_config_event,
    encode_config_event,
)

__all__ = [
    "ARGUMENTS_LEVEL",
    "ARGUMENTS_MAX_DEPTH",
    "QUEUE_NAME_MAX_BYTES",
    "ReplicationContract",
    "carried",
    "check_arguments",
    "check_queue_name",
]

#: An AMQP short string (a stream name is one) holds at most this many bytes.
SHORT_STRING_MAX_BYTES = 255
#: Longest name of a queue replicated with level ``all``: its stream name must fit.
QUEUE_NAME_MAX_BYTES = SHORT_STRING_MAX_BYTES - len(QUEUE_STREAM_PREFIX.encode())
#: How deep a queue's arguments table sits in a snapshot event (the deepest place any
#: arguments travel): snapshot (0) -> "queues" list (1) -> queue (2) -> "arguments" (3).
ARGUMENTS_LEVEL = 3
#: Deepest nesting of tables and arrays a replicated object's arguments may have (counting
#: the arguments table itself as 1): every value inside lands at most at the wire's depth.
ARGUMENTS_MAX_DEPTH = CONFIG_MAX_DEPTH - ARGUMENTS_LEVEL
#: The queue arguments that become a replicated message's exchange and routing key.
DEAD_LETTER_SHORT_STRINGS = ("x-dead-letter-exchange", "x-dead-letter-routing-key")

_F32 = struct.Struct(">f")


def _refused(what: str) -> AmqpError:
    return AmqpError(ReplyCode.PRECONDITION_FAILED, f"{what} (HA replication contract)")


def check_queue_name(name: str) -> None:
    """406 if a level-``all`` queue named ``name`` could not have a stream name."""
    size = len(name.encode("utf-8"))
    if size > QUEUE_NAME_MAX_BYTES:
        raise _refused(
            f"queue name is {size} bytes: a replicated queue's name may hold at most"
            f" {QUEUE_NAME_MAX_BYTES} bytes (its stream name '{QUEUE_STREAM_PREFIX}<name>'"
            f" is an AMQP short string of at most {SHORT_STRING_MAX_BYTES} bytes)"
        )


def _first_fault(value: Any) -> str | None:
    """The first value in ``value`` the wire could not carry unchanged (None: none), found
    without recursion (``value`` nests at most :data:`ARGUMENTS_MAX_DEPTH` deep)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                fault = _key_fault(key)
                if fault is not None:
                    return fault
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)
        else:
            fault = _scalar_fault(item)
            if fault is not None:
                return fault
    return None


def _key_fault(key: object) -> str | None:
    if not isinstance(key, str):
        return f"field name {key!r:.60} is not a string"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return f"field name {key!r:.60} is not UTF-8"
    if size > CONFIG_MAX_KEY_BYTES:
        return (
            f"field name {key[:40]!r}... is {size} bytes: the replication wire carries"
            f" field names of at most {CONFIG_MAX_KEY_BYTES} bytes"
        )
    return None


def _scalar_fault(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            return f"integer {value} does not fit in 64 bits"
        return None
    if isinstance(value, float):
        try:
            exact = _F32.unpack(_F32.pack(value))[0] == value
        except (OverflowError, struct.error):
            exact = False
        if not exact:
            return (
                f"float {value!r} is not exactly a 32-bit float: the replication wire"
                " carries floats in 32 bits"
            )
        return None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"string {value!r:.60} is not UTF-8"
        return None
    return None  # decimals, timestamps, byte arrays: the codec's round trip decides


def carried(arguments: Mapping[str, Any]) -> str | None:
    """Why the configuration wire would not bring ``arguments`` back equal (None: it
    would): the real codec's round trip, with the arguments where a snapshot puts them."""
    event = {"type": "snapshot", "queues": [{"name": "q", "arguments": dict(arguments)}]}
    try:
        back = decode_config_event(encode_config_event(event))
    except (ValueError, TypeError, RecursionError) as exc:
        return f"not carried by the replication wire: {exc}"
    if back["queues"][0]["arguments"] != dict(arguments):
        return "not carried unchanged by the replication wire"
    return None


def check_arguments(what: str, arguments: Mapping[str, Any]) -> None:
    """406 naming ``what`` (e.g. ``queue 'q'``) if the configuration wire cannot carry
    ``arguments`` unchanged."""
    if not arguments:
        return
    deepest = depth(dict(arguments))
    if deepest > ARGUMENTS_MAX_DEPTH:
        more = " or more" if deepest > MAX_DEPTH else ""
        raise _refused(
            f"arguments of {what} nest {deepest}{more} tables or arrays deep: the"
            f" replication wire carries at most {ARGUMENTS_MAX_DEPTH}"
        )
    fault = _first_fault(dict(arguments))
    if fault is None:
        fault = carried(arguments)
    if fault is not None:
        raise _refused(f"arguments of {what}: {fault}")


def _check_dead_letter(what: str, arguments: Mapping[str, Any]) -> None:
    for name in DEAD_LETTER_SHORT_STRINGS:
        value = arguments.get(name)
        if isinstance(value, str) and len(value.encode("utf-8")) > MAX_SHORT_STRING:
            raise _refused(
                f"argument '{name}' of {what} is {len(value.encode('utf-8'))} bytes: a"
                f" dead-lettered message's exchange and routing key are short strings of at"
                f" most {MAX_SHORT_STRING} bytes"
            )


def _check_reserved(kind: str, name: str) -> None:
    if name.startswith(STREAM_PREFIX):
        raise access_refused(
            f"{kind} name '{name}' contains reserved prefix '{STREAM_PREFIX}*' (HA replication)"
        )


def _where(kind: str, name: str, vhost: str) -> str:
    return f"{kind} '{name}'" if vhost == VHOST else f"{kind} '{name}' in vhost '{vhost}'"


class ReplicationContract:
    """The :class:`~broker.core.declare_contract.DeclareContract` of an HA cluster member:
    refuses what its replication wire cannot carry (see the module docstring).

    ``default``: the broker's ``ha-replicate`` level, for objects without
    ``qpid.replicate``."""

    def __init__(self, default: ReplicateLevel) -> None:
        self.default = default

    def check_queue(self, vhost: str, name: str, arguments: Mapping[str, Any]) -> None:
        _check_reserved("queue", name)
        what = _where("queue", name, vhost)
        level = level_of(arguments, self.default, owner=what)
        if level is ReplicateLevel.NONE:
            return
        if level is ReplicateLevel.ALL:
            check_queue_name(name)
            _check_dead_letter(what, arguments)
        check_arguments(what, arguments)

    def check_exchange(self, vhost: str, name: str, arguments: Mapping[str, Any]) -> None:
        _check_reserved("exchange", name)
        what = _where("exchange", name, vhost)
        if level_of(arguments, self.default, owner=what) is not ReplicateLevel.NONE:
            check_arguments(what, arguments)

    def check_binding(self, vhost: str, binding: Binding, exchange: Exchange) -> None:
        if not binding_replicated(binding, self.default, exchange=exchange):
            return
        what = (
            f"binding of {binding.destination_type} '{binding.destination.name}' to exchange"
            f" '{exchange.name}'"
        )
        check_arguments(what if vhost == VHOST else f"{what} in vhost '{vhost}'", binding.arguments)
