"""What a client may declare in an HA cluster: what the replication wire carries.

Primary side (and every cluster member, whose virtual hosts ask it before creating what a
client declared: :mod:`broker.core.declare_contract`). Issue 24's rule: *what the primary
accepts, the backups can apply*. A declare the wire cannot carry is refused up front, with a
reply code and a text naming the limit and the value, instead of being accepted on the
primary and stalling its replication (a declare-ok that never comes, confirms held forever).

**Which format's limits.** Each replication format carries a different range
(:mod:`broker.ha.link_format`: format 1, release 0.1.0's wire, names of at most 241 bytes
and arguments 29 deep; format 2, every name and every field table the AMQP codec accepts).
The contract holds the limits of the *lowest format the cluster may use*, the
:class:`Floor` its owner computes (:meth:`broker.ha.ha_broker.HaBroker.contract_floor`):
the lowest of this broker's highest format, the format of every backup link it admitted
(from connection.open, before its first stream), and the format of every member the
cluster manager reports from ZooKeeper (members that may join). A refusal names the
format and who holds it there (``... replication format 1 (backup amqp://h:p speaks no
higher) carries ...``). The other direction, a backup of a lower format dialling a primary
that already holds what that format cannot carry, is refused at connection.open
(:func:`first_uncarried`).

The limits come from the wire codecs themselves (a :class:`~broker.ha.link_format.Codec`),
so a new wire format changes them there and nowhere else:

- **Stream names**: format 1's backup consumes a level-``all`` queue's messages from
  ``qpid.ha-queue:<name>``, an AMQP short string (255 bytes), so such a queue's name may
  hold at most :data:`QUEUE_NAME_MAX_BYTES` bytes (241) there; format 2 names the queue in
  a consume argument: any name fits.
- **The configuration wire**: a replicated queue's, exchange's or binding's arguments
  travel in a field table whose nesting is bounded (the codec's ``config_max_depth``),
  and the arguments sit :data:`ARGUMENTS_LEVEL` levels into a snapshot, so they may nest
  that much less (format 1: :data:`ARGUMENTS_MAX_DEPTH`, 29; format 2: 64, the AMQP
  codec's own limit); a field name is at most ``config_max_key_bytes`` (128; 255); a float
  goes in ``float_bits`` (32: one that a 32-bit float cannot hold exactly would reach the
  backups changed; 64); and the arguments must come back equal from the real codec
  (:func:`carried`, the last word).
- **Batches** (:mod:`broker.ha.wire_batch`, the same in both formats): a dead-lettered
  message is replicated with the queue's ``x-dead-letter-exchange`` and
  ``x-dead-letter-routing-key`` as its exchange and routing key, short strings of at most
  :data:`~broker.ha.wire_batch.MAX_SHORT_STRING` bytes. Message properties and headers
  travel as the raw bytes the client sent and bodies as they came: whatever the AMQP codec
  accepted, a batch carries.
- **Reserved names**: ``qpid.ha-*`` (HA's own streams and properties) is refused with 403
  ACCESS_REFUSED for a new queue or exchange.

What is not replicated (level ``none``: ``qpid.replicate`` or the broker's default; a
binding whose queue or exchange is not replicated) is not limited here. Pure functions of
their arguments, the broker's default level and the floor; no I/O.

THREAD UNSAFE: a virtual host calls it on its loop.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from broker.core.errors import AmqpError, ReplyCode, access_refused
from broker.core.exchange import Binding, Exchange
from broker.core.field_tables import MAX_DEPTH, depth
from broker.core.vhost import VirtualHost
from broker.core.vhost_rules import VHOST
from broker.ha.link_format import CODECS, SHORT_STRING_MAX_BYTES, Codec
from broker.ha.names import QUEUE_STREAM_PREFIX, STREAM_PREFIX
from broker.ha.replicate_level import (
    ReplicateLevel,
    binding_replicated,
    exchange_replicated,
    level_of,
    queue_level,
)
from broker.ha.wire import MAX_SHORT_STRING
from common.formats import FormatRange, choose
from common.version import REPLICATION_FORMATS

__all__ = [
    "ARGUMENTS_LEVEL",
    "ARGUMENTS_MAX_DEPTH",
    "QUEUE_NAME_MAX_BYTES",
    "ContractFloor",
    "Floor",
    "ReplicationContract",
    "Uncarried",
    "arguments_max_depth",
    "carried",
    "check_arguments",
    "check_queue_name",
    "first_uncarried",
]

#: Format 1, release 0.1.0's wire: the lowest format this code speaks.
FORMAT_1 = CODECS[1]
#: Longest name of a queue replicated with level ``all`` in format 1: its stream name
#: ``qpid.ha-queue:<name>`` must fit a short string.
QUEUE_NAME_MAX_BYTES = FORMAT_1.queue_name_max_bytes
#: How deep a queue's arguments table sits in a snapshot event (the deepest place any
#: arguments travel): snapshot (0) -> "queues" list (1) -> queue (2) -> "arguments" (3).
ARGUMENTS_LEVEL = 3
#: The queue arguments that become a replicated message's exchange and routing key.
DEAD_LETTER_SHORT_STRINGS = ("x-dead-letter-exchange", "x-dead-letter-routing-key")

_F32 = struct.Struct(">f")


def arguments_max_depth(codec: Codec) -> int:
    """Deepest nesting of tables and arrays a replicated object's arguments may have in
    ``codec``'s format (counting the arguments table itself as 1): every value inside lands
    at most at the wire's depth."""
    return min(codec.config_max_depth - ARGUMENTS_LEVEL, MAX_DEPTH)


#: Format 1's :func:`arguments_max_depth` (29).
ARGUMENTS_MAX_DEPTH = arguments_max_depth(FORMAT_1)


@dataclass(frozen=True)
class Floor:
    """The lowest replication format the cluster may use now, and why: ``why`` names who
    holds it there (``backup amqp://h:p speaks no higher``), "" when it is this broker's own
    highest."""

    format: int
    why: str = ""

    @property
    def codec(self) -> Codec:
        """The format's codec (a test-only format no code writes: the highest that does)."""
        return CODECS.get(self.format) or CODECS[max(CODECS)]

    @property
    def words(self) -> str:
        """``replication format 1 (backup ... speaks no higher)``: who limits, in a refusal."""
        held = f" ({self.why})" if self.why else ""
        return f"replication format {self.format}{held}"


def _refused(what: str) -> AmqpError:
    return AmqpError(ReplyCode.PRECONDITION_FAILED, f"{what} (HA replication contract)")


def check_queue_name(name: str, floor: Floor | None = None) -> None:
    """406 if a level-``all`` queue named ``name`` could not be streamed in ``floor``'s
    format (None: format 1)."""
    floor = floor or Floor(1)
    limit = floor.codec.queue_name_max_bytes
    size = len(name.encode("utf-8"))
    if size > limit:
        raise _refused(
            f"queue name is {size} bytes: {floor.words} streams a replicated queue of at most"
            f" {limit} (its stream '{QUEUE_STREAM_PREFIX}<name>' is a short string of"
            f" {SHORT_STRING_MAX_BYTES})"
        )


#: Scalars every format carries exactly once :func:`_scalar_fault` passed them (no round
#: trip needed): the codec's encoding of each is fixed by its type and value.
_PLAIN = (bool, type(None), int, float, str)


def _first_fault(value: Any, codec: Codec) -> tuple[str | None, bool]:
    """The first value in ``value`` the wire could not carry unchanged (None: none), found
    without recursion (``value`` nests at most :data:`MAX_DEPTH` deep); and whether every
    scalar in it is plain (:data:`_PLAIN`: then the codec's round trip cannot differ)."""
    stack: list[Any] = [value]
    plain = True
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                fault = _key_fault(key, codec)
                if fault is not None:
                    return fault, plain
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)
        else:
            plain = plain and isinstance(item, _PLAIN)
            fault = _scalar_fault(item, codec)
            if fault is not None:
                return fault, plain
    return None, plain


def _key_fault(key: object, codec: Codec) -> str | None:
    if not isinstance(key, str):
        return f"field name {key!r:.60} is not a string"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return f"field name {key!r:.60} is not UTF-8"
    if size > codec.config_max_key_bytes:
        return (
            f"field name {key[:40]!r}... is {size} bytes: replication format {codec.format}"
            f" carries field names of at most {codec.config_max_key_bytes} bytes"
        )
    return None


def _scalar_fault(value: object, codec: Codec) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            return f"integer {value} does not fit in 64 bits"
        return None
    if isinstance(value, float):
        if codec.float_bits == 64:
            return None
        try:
            exact = _F32.unpack(_F32.pack(value))[0] == value
        except (OverflowError, struct.error):
            exact = False
        if not exact:
            return (
                f"float {value!r} is not exactly a 32-bit float: replication format"
                f" {codec.format} carries floats in 32 bits"
            )
        return None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"string {value!r:.60} is not UTF-8"
        return None
    return None  # decimals, timestamps, byte arrays: the codec's round trip decides


def carried(arguments: Mapping[str, Any], codec: Codec = FORMAT_1) -> str | None:
    """Why ``codec``'s configuration wire would not bring ``arguments`` back equal (None: it
    would): the real codec's round trip, with the arguments where a snapshot puts them."""
    event = {"type": "snapshot", "queues": [{"name": "q", "arguments": dict(arguments)}]}
    try:
        back = codec.decode_config_event(codec.encode_config_event(event))
    except (ValueError, TypeError, RecursionError) as exc:
        return f"not carried by replication format {codec.format}: {exc}"
    if not _equal(back["queues"][0]["arguments"], dict(arguments)):
        return f"not carried unchanged by replication format {codec.format}"
    return None


def _equal(a: Any, b: Any) -> bool:
    """``a == b``, but a NaN equal to a NaN (a client may send one; format 2 carries it)."""
    if a == b:
        return True
    if isinstance(a, float) and isinstance(b, float):
        return math.isnan(a) and math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return False


def check_arguments(what: str, arguments: Mapping[str, Any], floor: Floor | None = None) -> None:
    """406 naming ``what`` (e.g. ``queue 'q'``) if ``floor``'s format (None: format 1)
    cannot carry ``arguments`` unchanged."""
    if not arguments:
        return
    floor = floor or Floor(1)
    codec = floor.codec
    deepest = depth(dict(arguments))
    limit = arguments_max_depth(codec)
    if deepest > limit:
        more = " or more" if deepest > MAX_DEPTH else ""
        raise _refused(
            f"arguments of {what} nest {deepest}{more} tables or arrays deep:"
            f" {floor.words} carries at most {limit}"
        )
    fault, plain = _first_fault(dict(arguments), codec)
    if fault is None and not plain:  # decimals, timestamps, bytes...: the codec decides
        fault = carried(arguments, codec)
    if fault is not None:
        why = f" ({floor.why})" if floor.why else ""
        raise _refused(f"arguments of {what}: {fault}{why}")


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


def _binding_what(vhost: str, binding: Binding, exchange: Exchange) -> str:
    what = (
        f"binding of {binding.destination_type} '{binding.destination.name}' to exchange"
        f" '{exchange.name}'"
    )
    return what if vhost == VHOST else f"{what} in vhost '{vhost}'"


def _check_queue(what: str, name: str, level: ReplicateLevel, arguments: Any, floor: Floor) -> None:
    if level is ReplicateLevel.NONE:
        return
    if level is ReplicateLevel.ALL:
        check_queue_name(name, floor)
        _check_dead_letter(what, arguments)
    check_arguments(what, arguments, floor)


def _objects(vhosts: Iterable[VirtualHost]) -> Iterator[tuple[VirtualHost, object]]:
    """Every queue, exchange and binding in ``vhosts``, with its vhost."""
    for vhost in vhosts:
        for queue in vhost.queues.values():
            yield vhost, queue
        for exchange in vhost.exchanges.values():
            yield vhost, exchange
        for binding in vhost.bindings():
            yield vhost, binding


def _check_held(vhost: VirtualHost, obj: object, default: ReplicateLevel, floor: Floor) -> None:
    """406 if ``obj`` is replicated and ``floor``'s format cannot carry it."""
    if isinstance(obj, Binding):
        source = vhost.exchanges.get(obj.exchange)
        carried = floor.codec.standard_bindings
        if source is not None and binding_replicated(
            obj, default, exchange=source, standard_exchanges=carried
        ):
            check_arguments(_binding_what(vhost.name, obj, source), obj.arguments, floor)
    elif isinstance(obj, Exchange):
        if exchange_replicated(obj, default) is not ReplicateLevel.NONE:
            check_arguments(_where("exchange", obj.name, vhost.name), obj.arguments, floor)
    else:
        queue: Any = obj
        what = _where("queue", queue.name, vhost.name)
        level = queue_level(queue, default)
        _check_queue(what, queue.name, level, queue.arguments, floor)


class Uncarried:
    """Finds the first replicated object a replication format cannot carry, remembering
    each object's verdict (an object's name, arguments and level never change), so the
    scan a backup's every dial asks for costs a look-up per object after the first."""

    def __init__(self) -> None:
        self._verdicts: dict[int, tuple[object, int, str | None]] = {}

    def first(
        self, vhosts: Iterable[VirtualHost], default: ReplicateLevel, format_: int
    ) -> str | None:
        """``<object>: <why>`` of the first replicated object in ``vhosts`` that format
        ``format_`` cannot carry (None: it carries all): a backup of that format could not
        apply this primary's configuration, so its link is refused."""
        if format_ >= REPLICATION_FORMATS.highest:
            return None  # the widest format this code writes: the contract held every declare
        floor, known, seen = Floor(format_), self._verdicts, {}
        found = None
        for vhost, obj in _objects(vhosts):
            entry = known.get(id(obj))
            if entry is not None and entry[0] is obj and entry[1] == format_:
                verdict = entry[2]
            else:
                try:
                    _check_held(vhost, obj, default, floor)
                    verdict = None
                except AmqpError as refused:
                    verdict = refused.reply_text.removesuffix(" (HA replication contract)")
            seen[id(obj)] = (obj, format_, verdict)
            if verdict is not None:
                found = verdict
                break
        # what was not seen again is gone (its id may be another object's next)
        self._verdicts = seen if found is None else {**known, **seen}
        return found


def first_uncarried(
    vhosts: Iterable[VirtualHost], default: ReplicateLevel, format_: int
) -> str | None:
    """:meth:`Uncarried.first` without a memory of earlier scans."""
    return Uncarried().first(vhosts, default, format_)


class ReplicationContract:
    """The :class:`~broker.core.declare_contract.DeclareContract` of an HA cluster member:
    refuses what its replication wire cannot carry (see the module docstring).

    ``default``: the broker's ``ha-replicate`` level, for objects without
    ``qpid.replicate``; ``floor``: the lowest format the cluster may use now (asked at each
    declare; None: this code's highest, for a broker that knows no other member)."""

    def __init__(self, default: ReplicateLevel, floor: Callable[[], Floor] | None = None) -> None:
        self.default = default
        self.floor = floor or (lambda: Floor(REPLICATION_FORMATS.highest))

    def check_queue(self, vhost: str, name: str, arguments: Mapping[str, Any]) -> None:
        _check_reserved("queue", name)
        what = _where("queue", name, vhost)
        level = level_of(arguments, self.default, owner=what)
        if level is not ReplicateLevel.NONE:
            _check_queue(what, name, level, arguments, self.floor())

    def check_exchange(self, vhost: str, name: str, arguments: Mapping[str, Any]) -> None:
        _check_reserved("exchange", name)
        what = _where("exchange", name, vhost)
        if level_of(arguments, self.default, owner=what) is not ReplicateLevel.NONE:
            check_arguments(what, arguments, self.floor())

    def check_binding(self, vhost: str, binding: Binding, exchange: Exchange) -> None:
        if binding_replicated(binding, self.default, exchange=exchange):
            what = _binding_what(vhost, binding, exchange)
            check_arguments(what, binding.arguments, self.floor())


class ContractFloor:
    """Which replication format's limits a cluster member's contract holds now (the
    :class:`Floor`): the lowest of this broker's highest format, every backup link it
    admitted (until the link's connection closes) and what the cluster manager last said of
    the members ZooKeeper lists (:meth:`members`).

    Safety rests on order, not timing: a link is counted from its admission at
    connection.open, before any stream, so a declare checked after it is held to its
    format; and a link admitted after a declare is refused when what the primary holds
    needs more than its format (:func:`first_uncarried`)."""

    def __init__(self, ours: FormatRange) -> None:
        #: The formats this broker speaks.
        self.ours = ours
        self._links: dict[object, tuple[int, str]] = {}
        self._members = Floor(ours.highest)

    def link_admitted(self, key: object, format_: int, backup: str) -> None:
        """A backup's link (``key``: its connection) was admitted with ``format_``."""
        self._links[key] = (format_, backup)

    def link_released(self, key: object) -> None:
        self._links.pop(key, None)

    def members(self, ranges: Mapping[str, FormatRange]) -> Floor:
        """The cluster manager read the member records: each member (node name) speaks its
        range. The floor is the lowest format a link of this broker's and a member's would
        use (a member of no common format is refused at its link instead); returned."""
        floor = Floor(self.ours.highest)
        for member, theirs in sorted(ranges.items()):
            chosen = choose(self.ours, theirs)
            if chosen is not None and chosen < floor.format:
                floor = Floor(chosen, f"member {member} speaks no higher")
        self._members = floor
        return floor

    @property
    def members_floor(self) -> Floor:
        """The floor the members last reported set (this broker's highest before any)."""
        return self._members

    def __call__(self) -> Floor:
        floor = self._members
        for format_, backup in self._links.values():
            if format_ < floor.format:
                floor = Floor(format_, f"backup {backup} speaks no higher")
        return floor
