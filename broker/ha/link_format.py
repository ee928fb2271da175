"""The replication format of one link, sans-I/O (docs/ha-design.md, "Format versions").

Each side of a replication link announces the replication formats it speaks
(:data:`~broker.ha.names.FORMATS_PROPERTY`, ``"LOW-HIGH"``): the primary, any HA broker in
fact, in connection.start's server properties; a backup (or a stand-alone broker's queue
replica) in start-ok's client properties. Both compute the link's format with
:func:`link_format`, the highest format both speak (:func:`common.formats.choose`, the same
on both sides), and the primary encodes, the backup decodes, with that format's
:class:`Codec`.

No format in common, a bad announcement, or none at all (a build before release 0.1.0,
whose wire may lack events format 1 has: refused rather than guessed) raise
:class:`NoCommonFormat` with the one line both sides log (``ha_link_format_refused``); the
primary closes the link with connection.close 540 NOT_IMPLEMENTED carrying that line, the
backup backs off as after any refused dial (:mod:`broker.ha.redial`).

The formats (the checklist for the next one is in docs/ha-design.md):

- **1**, release 0.1.0's wire: configuration events by :mod:`broker.ha.wire_config`
  (pamqp's field tables: 32 levels, field names of 128 bytes, floats in 32 bits), a queue's
  stream named ``qpid.ha-queue:<name>`` (a short string: names of at most 241 bytes);
- **2**: configuration events by :mod:`broker.ha.wire_config2` (every field table the AMQP
  codec accepts), a queue's stream named ``qpid.ha-queue`` with the queue's name in the
  consume argument ``qpid.ha-queue`` (any name). Queue batches are format 1's, byte for
  byte (:mod:`broker.ha.wire_batch`): the publish path is the same in both.
- **3**: format 2 and the member lease (issue 26): the backup consumes
  :data:`~broker.ha.names.LEASE_STREAM` as well, the primary's lease requests, and answers
  each with basic.ack, its grant (:mod:`broker.ha.lease_stream`). A link of format 1 or 2
  has no lease: the agent's ZooKeeper lease alone governs, as before.
- **4**: format 3 and the cluster's users (issue 30, :mod:`broker.security.cluster_users`):
  the configuration stream carries a ``users`` event (every cluster user and permission)
  after the snapshot and after each change (with each vhost's limits), and the bindings to
  the standard exchanges (``amq.topic``, ...: :mod:`broker.ha.replicate_level`). A link of
  format 1 to 3 carries neither: such a backup, promoted, has its own users only and no
  binding to an ``amq.*`` exchange (release 0.1.0's backup keeps a leftover one at a
  snapshot, so it is never sent one). A snapshot on a format-4 link is preceded by its
  head (``snapshot-head``: the busiest queues' rows, issue 25). Format 4 is not released
  yet (CHANGELOG.md): what it carries grew without a new number.

What a format can carry is what a primary may accept from clients while a link of that
format may exist (:mod:`broker.ha.replication_contract`): the limits are read from the
:class:`Codec`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from broker.ha import wire_config, wire_config2
from broker.ha.names import FORMATS_PROPERTY, QUEUE_ARGUMENT, QUEUE_STREAM, QUEUE_STREAM_PREFIX
from broker.ha.redial import DialRefused
from broker.ha.wire import (
    CONFIG_MAX_DEPTH,
    CONFIG_MAX_KEY_BYTES,
    StreamEvent,
    decode_batch,
    decode_config_event,
    encode_config_event,
)
from broker.ha.wire_config import FORMAT_1, Grammar, decode_event_steps
from common.formats import FormatRange, choose, no_common_format, parse_range
from common.slices import Steps

#: The longest AMQP short string (a basic.consume's queue name), in bytes.
SHORT_STRING_MAX_BYTES = 255

__all__ = [
    "CODECS",
    "MEMBER_LEASE_FORMAT",
    "SHORT_STRING_MAX_BYTES",
    "Codec",
    "NoCommonFormat",
    "announced",
    "codec_of",
    "link_format",
]


class NoCommonFormat(DialRefused):
    """Two ends of a replication link speak no format in common; ``str()`` is the line."""


@dataclass(frozen=True)
class Codec:
    """How one replication format is written and read (the configuration stream's events,
    the queue streams' batches; a primary's batches are written by
    :class:`~broker.ha.replicating_subscription.ReplicatingSubscription`, told the format)."""

    format: int
    encode_config_event: Callable[[dict[str, Any]], bytes]
    decode_config_event: Callable[[bytes], dict[str, Any]]
    decode_batch: Callable[[bytes], list[StreamEvent]]
    #: Deepest nesting in a configuration event, the event at depth 0.
    config_max_depth: int
    #: Longest field name in a configuration event (bytes of UTF-8).
    config_max_key_bytes: int
    #: Floats in configuration events travel in this many bits (32: a double changes).
    float_bits: int
    #: Longest name of a queue this format can stream (bytes of UTF-8).
    queue_name_max_bytes: int
    #: Whether a queue's stream is the fixed :data:`~broker.ha.names.QUEUE_STREAM` with
    #: the name in an argument (format 2) rather than ``qpid.ha-queue:<name>`` (format 1).
    stream_name_argument: bool
    #: Whether the link carries the member lease (format 3: the lease stream).
    member_lease: bool = False
    #: Whether the configuration stream carries the cluster's users (format 4).
    cluster_users: bool = False
    #: Whether it carries bindings to the standard ``amq.*`` exchanges (format 4).
    standard_bindings: bool = False
    #: Whether a snapshot is preceded by its head, the busiest queues' rows, in an event of
    #: its own (``snapshot-head``, format 4: :func:`~broker.ha.config_objects.snapshot_head`).
    snapshot_head: bool = False
    #: :attr:`encode_config_event` in slices (a snapshot's thousands of objects).
    encode_config_steps: Callable[[dict[str, Any]], Steps[bytes]] = wire_config.encode_config_steps
    #: The rules its configuration events are decoded by.
    config_grammar: Grammar = FORMAT_1
    #: How :attr:`encode_config_steps` writes one row of a snapshot (None: no row is
    #: written ahead; format 1): a snapshot may carry rows encoded so when their objects
    #: were made (:mod:`broker.ha.snapshot_rows`), by this very function.
    encode_snapshot_row: Callable[[dict[str, Any]], bytes] | None = None

    def decode_config_steps(
        self, data: bytes, seen: Callable[[str, Any], None] | None = None
    ) -> Steps[dict[str, Any]]:
        """:attr:`decode_config_event` in slices (a snapshot's thousands of objects);
        ``seen(field, value)`` told each field and each array item as it is decoded
        (:func:`~broker.ha.wire_config.decode_event_steps`)."""
        return decode_event_steps(data, self.config_grammar, seen=seen)

    def queue_stream(self, queue: str) -> tuple[str, dict[str, Any]]:
        """The basic.consume queue name and the arguments naming ``queue``'s stream."""
        if self.stream_name_argument:
            return QUEUE_STREAM, {QUEUE_ARGUMENT: queue}
        return QUEUE_STREAM_PREFIX + queue, {}


#: Format 2: every name and field table a client may declare (wire_config2).
_FORMAT_2 = Codec(
    2,
    wire_config2.encode_config_event,
    wire_config2.decode_config_event,
    decode_batch,
    config_max_depth=wire_config2.MAX_DEPTH,
    config_max_key_bytes=wire_config2.MAX_KEY_BYTES,
    float_bits=64,
    queue_name_max_bytes=SHORT_STRING_MAX_BYTES,
    stream_name_argument=True,
    encode_config_steps=wire_config2.encode_config_steps,
    config_grammar=wire_config2.GRAMMAR,
    encode_snapshot_row=wire_config2.encode_snapshot_row,
)

#: Every format this code can write and read, by number (see the module docstring).
CODECS: Mapping[int, Codec] = {
    1: Codec(
        1,
        encode_config_event,
        decode_config_event,
        decode_batch,
        config_max_depth=CONFIG_MAX_DEPTH,
        config_max_key_bytes=CONFIG_MAX_KEY_BYTES,
        float_bits=32,
        queue_name_max_bytes=SHORT_STRING_MAX_BYTES - len(QUEUE_STREAM_PREFIX.encode()),
        stream_name_argument=False,
    ),
    2: _FORMAT_2,
    # Format 3 is format 2 and the member lease (the lease stream).
    3: replace(_FORMAT_2, format=3, member_lease=True),
    # Format 4 is format 3 and the cluster's users (a ``users`` configuration event)
    # and the bindings to the standard ``amq.*`` exchanges.
    4: replace(
        _FORMAT_2,
        format=4,
        member_lease=True,
        cluster_users=True,
        standard_bindings=True,
        snapshot_head=True,
    ),
}

#: The lowest format that carries the member lease.
MEMBER_LEASE_FORMAT = 3


def announced(properties: Mapping[str, Any]) -> FormatRange | None:
    """The range a peer announced in its connection properties (None: none announced);
    ValueError naming a bad value."""
    value = properties.get(FORMATS_PROPERTY)
    return None if value is None else parse_range(value)


def link_format(
    ours: FormatRange, properties: Mapping[str, Any], peer: str, me: str = "this broker"
) -> int:
    """The link's format: the highest both ``ours`` and the range in the peer's
    ``properties`` hold; :class:`NoCommonFormat` with the line to log otherwise."""
    try:
        theirs = announced(properties)
    except ValueError as exc:
        raise NoCommonFormat(f"no common replication format: {peer} announced {exc}") from None
    chosen = None if theirs is None else choose(ours, theirs)
    if chosen is None or chosen not in CODECS:
        raise NoCommonFormat(no_common_format("replication", ours, theirs, peer, me))
    return chosen


def codec_of(format_: int) -> Codec:
    """The codec of a format :func:`link_format` chose."""
    return CODECS[format_]
