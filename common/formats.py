"""Format versions and their negotiation, sans-I/O (docs/ha-design.md, "Format versions").

Two formats can change from one release to the next, and each has a number:

- the **replication format**: what a primary sends a backup over the replication link (the
  configuration stream's events, the queue streams' batches);
- the **ZooKeeper format**: the records the agents keep in ZooKeeper (member, primary,
  in-sync, link hints, the epoch counter).

A program *speaks* a :class:`FormatRange` of each: every format from ``lowest`` to
``highest``. Two peers use the highest format both speak (:func:`choose`); none in common
is refused with one line naming both ranges (:func:`no_common_format`). The function is the
same on both sides of a link, so each side computes the other's choice without asking.

On the wire and in records a range is the text ``"LOW-HIGH"`` (``"1-1"``): :meth:`FormatRange.text`
and :func:`parse_range`, which raises ValueError naming the bad value.

Nothing here does I/O; :mod:`common.version` holds the ranges this code speaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FormatRange", "choose", "no_common_format", "parse_range"]

_RANGE = re.compile(r"([0-9]{1,6})-([0-9]{1,6})")


@dataclass(frozen=True, order=True)
class FormatRange:
    """The formats from ``lowest`` to ``highest`` (both included; 1 <= lowest <= highest)."""

    lowest: int
    highest: int

    def __post_init__(self) -> None:
        for value in (self.lowest, self.highest):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"a format is an integer >= 1, not {value!r}")
        if self.lowest > self.highest:
            raise ValueError(f"format range {self.lowest}-{self.highest}: lowest above highest")

    def __contains__(self, format_: object) -> bool:
        return isinstance(format_, int) and self.lowest <= format_ <= self.highest

    @property
    def text(self) -> str:
        """``"LOW-HIGH"``: the range as announced on the wire and in records."""
        return f"{self.lowest}-{self.highest}"

    def __str__(self) -> str:
        if self.lowest == self.highest:
            return f"format {self.lowest}"
        return f"formats {self.lowest}-{self.highest}"


def parse_range(value: object) -> FormatRange:
    """A range from its text ``"LOW-HIGH"`` (bytes from an AMQP field table too); ValueError
    naming the bad value otherwise."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    match = _RANGE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"bad format range {value!r}: expected LOW-HIGH, e.g. '1-1'")
    return FormatRange(int(match[1]), int(match[2]))


def choose(ours: FormatRange, theirs: FormatRange) -> int | None:
    """The highest format both ranges hold; None when they hold none in common.

    Symmetric (``choose(a, b) == choose(b, a)``), so both ends of a link agree on it."""
    highest = min(ours.highest, theirs.highest)
    return highest if highest >= max(ours.lowest, theirs.lowest) else None


def no_common_format(
    kind: str, ours: FormatRange, theirs: FormatRange | None, peer: str, me: str = "this broker"
) -> str:
    """The one line both sides log (and a primary's connection.close carries) when two
    programs cannot talk: ``kind`` "replication", ``peer`` who the other side is, ``me`` who
    this side is; ``theirs`` None for a peer that announced no range (a pre-release build)."""
    if theirs is None:
        return (
            f"no common {kind} format: {me} speaks {kind} {ours}, {peer} announced none"
            " (a build before release 0.1.0): upgrade it"
        )
    older = me if ours.highest < theirs.lowest else peer
    return (
        f"no common {kind} format: {me} speaks {kind} {ours}, {peer} {kind} {theirs}:"
        f" upgrade {older} (docs/deploy.md, 'Upgrading a cluster')"
    )
