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

Adding format 2 (the checklist is in docs/ha-design.md): raise
:data:`common.version.REPLICATION_FORMATS`, add its :class:`Codec` to :data:`CODECS`, and
branch on the link's format where the encoders differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.ha.names import FORMATS_PROPERTY
from broker.ha.redial import DialRefused
from broker.ha.wire import Event, decode_batch, decode_config_event, encode_config_event
from common.formats import FormatRange, choose, no_common_format, parse_range

__all__ = ["CODECS", "Codec", "NoCommonFormat", "announced", "codec_of", "link_format"]


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
    decode_batch: Callable[[bytes], list[Event]]


#: Every format this code can write and read, by number. Format 1: release 0.1.0's wire.
CODECS: Mapping[int, Codec] = {
    1: Codec(1, encode_config_event, decode_config_event, decode_batch),
}


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
