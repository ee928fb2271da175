"""Hot backup of a running broker's store, and the checks of a backup before a restore.

A backup is a copy of the store's segments up to a *point*, taken while the broker serves
(seed 004, "Backups" and "Disaster Recovery"; ``qpid-ha backup`` and ``qpid-ha restore``,
docs/store.md):

- **The point.** :meth:`Journal.seal <broker.store.journal.Journal.seal>` closes the
  segment being written (appends go to a new one) and holds compaction's deletions; the
  backup then waits for the writer's next group commit (fsync under ``--store-sync
  fsync``). A publisher confirm goes out only after its record's write, and its record was
  appended before the confirm: so every message confirmed before the seal is in the sealed
  segments once that write is done (and more: what was appended, not yet confirmed).
- **Holding compaction.** From the seal until the backup has opened every sealed segment
  (one group commit), compaction deletes none. An open file keeps its bytes when
  compaction deletes its name afterwards, so the broker compacts as usual while the
  segments stream; the disk space of a segment deleted meanwhile comes back when the
  backup ends.
- **The stream** (``POST /api/store/backup``, :func:`encode_header`,
  :func:`encode_trailer`): one JSON line (the format, the point, the source broker and
  store, each segment's name and size), the segments' bytes one after the other, one JSON
  line with each segment's SHA-256 as the broker read it. A stream cut short (a broker
  stopped, a network failure) misses bytes or the trailer: the copy is refused.
- **The backup directory**: ``manifest.json`` (:class:`Manifest`, written last: a directory
  without it is an incomplete copy) and ``segments/*.seg``.
- **Checks** (:func:`check_segment`, :func:`recover_backup`): each segment's size and
  SHA-256 against the manifest, then the store's own recovery (every record's CRC-32C,
  nothing torn, every enqueued message's content present) over the segments, and what it
  recovers against the counts the manifest recorded.

No I/O here but :func:`take_restored_marker` (the broker's first start from a restored
store): the management handler (:mod:`broker.management.store_backup`) streams,
``qpid-ha`` (:mod:`qpid_ha_cli.store_backup`) writes and restores.

THREAD SAFE: pure functions and frozen values.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker.store.records import HEADER
from broker.store.recovery import CorruptStore, RecoveredState, Recovery

__all__ = [
    "FORMAT",
    "MANIFEST",
    "RESTORED",
    "SEGMENTS_DIR",
    "BackupError",
    "BackupPoint",
    "Contents",
    "Manifest",
    "SegmentEntry",
    "check_segment",
    "contents_of",
    "decode_header",
    "decode_trailer",
    "encode_header",
    "encode_trailer",
    "recover_backup",
    "segment_name",
    "segment_number",
    "take_restored_marker",
]

#: The backup format; a reader refuses another.
FORMAT = "qpid-store-backup/1"
#: In a backup directory: the manifest (written last) and the segments' directory.
MANIFEST = "manifest.json"
SEGMENTS_DIR = "segments"
#: In a restored data directory until its first broker has recovered it: where it came from.
RESTORED = "restored-from.json"

_SUFFIX = ".seg"
_MAX_LINE = 1 << 20  # a header or trailer line longer than this is not one


class BackupError(Exception):
    """A backup that cannot be used; the message is one line naming what is wrong."""


def segment_name(number: int) -> str:
    return f"{number:020d}{_SUFFIX}"


def segment_number(name: str) -> int:
    """The number of a segment file name; BackupError for a name that is not one."""
    stem = name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else ""
    if len(stem) != 20 or not stem.isdigit():
        raise BackupError(f"{name!r} is not a segment file name (20 digits and .seg)")
    return int(stem)


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    name: str
    size: int
    sha256: str = ""


@dataclass(frozen=True, slots=True)
class BackupPoint:
    """Where the backup stops: every message confirmed before ``taken_at`` is in it."""

    sealed_segment: int  # the last segment in the backup
    taken_at: str  # UTC, ISO-8601, when the segment was sealed
    sync: str  # the source's --store-sync (what "confirmed" meant there)


@dataclass(frozen=True, slots=True)
class Contents:
    """What recovery finds in the backup (checked again at restore)."""

    exchanges: int = 0
    queues: int = 0
    bindings: int = 0
    messages: int = 0
    records: int = 0


def contents_of(state: RecoveredState) -> Contents:
    return Contents(
        exchanges=len(state.exchanges),
        queues=len(state.queues),
        bindings=len(state.bindings) + len(state.exchange_bindings),
        messages=state.message_count,
        records=state.record_count,
    )


@dataclass(frozen=True, slots=True)
class Manifest:
    """A backup's ``manifest.json``: the point, the source, the segments, the contents.

    ``source`` names the broker and the store the copy was taken from: ``node``,
    ``broker_id`` and ``ha_state`` (a cluster member's), ``epoch``, ``store_id`` and
    ``cluster_id`` (null when the broker has none).
    """

    point: BackupPoint
    source: dict[str, Any]
    segments: tuple[SegmentEntry, ...]
    contents: Contents = field(default_factory=Contents)
    format: str = FORMAT

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def to_json(self) -> str:
        data = asdict(self)
        data["segments"] = [asdict(s) for s in self.segments]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """:raises BackupError: naming the first thing that is wrong."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BackupError(f"not JSON ({exc})") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        if not isinstance(data, dict):
            raise BackupError("not a JSON object")
        if data.get("format") != FORMAT:
            raise BackupError(f"format {data.get('format')!r}, expected {FORMAT!r}")
        try:
            point = BackupPoint(**data["point"])
            source = dict(data["source"])
            segments = tuple(SegmentEntry(**s) for s in data["segments"])
            contents = Contents(**data.get("contents", {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise BackupError(f"malformed manifest ({exc!s:.200})") from None
        if not isinstance(point.sealed_segment, int):
            raise BackupError(f"point.sealed_segment is not a number: {point.sealed_segment!r}")
        numbers = []
        for entry in segments:
            numbers.append(segment_number(entry.name))
            if not isinstance(entry.size, int) or entry.size < 0:
                raise BackupError(f"segment {entry.name}: bad size {entry.size!r}")
        if numbers != sorted(set(numbers)):
            raise BackupError("segments not listed once each, oldest first")
        if numbers and numbers[-1] != point.sealed_segment:
            raise BackupError(
                f"the last segment is {numbers[-1]}, the point says {point.sealed_segment}"
            )
        return cls(point, source, segments, contents)


# -- the stream ------------------------------------------------------------------------------
def encode_header(point: BackupPoint, source: dict[str, Any], sizes: dict[int, int]) -> bytes:
    """The stream's first line: format, point, source and each segment's name and size."""
    segments = [{"name": segment_name(n), "size": sizes[n]} for n in sorted(sizes)]
    line = {"format": FORMAT, "point": asdict(point), "source": source, "segments": segments}
    return json.dumps(line, sort_keys=True).encode() + b"\n"


def decode_header(line: bytes) -> Manifest:
    """The stream's first line as a manifest without checksums (BackupError if bad)."""
    if not line.endswith(b"\n") or len(line) > _MAX_LINE:
        raise BackupError("the stream does not start with a backup header line")
    return Manifest.from_json(line)


def encode_trailer(digests: dict[int, str]) -> bytes:
    """The stream's last line: each segment's SHA-256 as the broker read it."""
    line = {"complete": True, "sha256": {segment_name(n): d for n, d in sorted(digests.items())}}
    return json.dumps(line, sort_keys=True).encode() + b"\n"


def decode_trailer(line: bytes) -> dict[str, str]:
    if not line.endswith(b"\n"):
        raise BackupError("the stream ended before its trailer (the copy was cut short)")
    try:
        data = json.loads(line)
        digests = data["sha256"]
        complete = data["complete"] is True
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise BackupError("the stream's trailer is not one (the copy was cut short?)") from None
    if not complete or not isinstance(digests, dict):
        raise BackupError("the broker did not finish the copy")
    return {str(k): str(v) for k, v in digests.items()}


# -- the checks ------------------------------------------------------------------------------
def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_segment(entry: SegmentEntry, data: bytes) -> None:
    """A segment's bytes against its manifest entry. :raises BackupError:"""
    if len(data) != entry.size:
        raise BackupError(
            f"segment {entry.name} has {len(data)} bytes, the manifest says {entry.size}"
            " (truncated or altered copy)"
        )
    if entry.sha256 and sha256_hex(data) != entry.sha256:
        raise BackupError(f"segment {entry.name}: SHA-256 does not match the manifest")


def recover_backup(manifest: Manifest, segments: Iterable[tuple[str, bytes]]) -> RecoveredState:
    """Run the store's recovery over the backup's segments (name and bytes, oldest first)
    and check what it finds against the manifest. A sealed segment ends with a whole
    record: a torn tail here is damage. :raises BackupError:"""
    recovery = Recovery()
    listed = [s.name for s in manifest.segments]
    seen: list[str] = []
    try:
        for name, data in segments:
            seen.append(name)
            if len(data) < HEADER.size:
                raise BackupError(f"segment {name} is shorter than a segment header")
            recovery.add_segment(segment_number(name), data, last=name == listed[-1])
        state = recovery.state()
    except CorruptStore as exc:
        raise BackupError(f"recovery fails on the backup: {exc}") from None
    if seen != listed:
        raise BackupError(f"segments read {seen} are not the manifest's {listed}")
    torn = state.torn_tail
    if torn is not None:
        raise BackupError(
            f"segment {segment_name(torn.segment)} ends in a partial record at offset"
            f" {torn.offset} ({torn.reason})"
        )
    found = contents_of(state)
    if manifest.contents != Contents() and found != manifest.contents:
        raise BackupError(f"recovery finds {found}, the manifest recorded {manifest.contents}")
    return state


def take_restored_marker(data_dir: Path) -> dict[str, Any] | None:
    """At a broker's start, once its store is recovered: what ``qpid-ha restore`` wrote in
    ``data_dir/restored-from.json`` (the backup, its point and source), removing the file
    (from then on the store is this broker's own); None when there is none."""
    path = data_dir / RESTORED
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = {}
    with contextlib.suppress(OSError):
        path.unlink()
    return data if isinstance(data, dict) else {}
