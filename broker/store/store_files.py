"""Reading the store's segment files at start (blocking, before the event loop serves).

:func:`read_store` lists the segments, has :class:`~broker.store.recovery.Recovery` (sans-I/O)
read them, cuts a torn tail off the newest one (logging the segment and the offset; newer
files that hold no segment header yet, created ahead of the journal's writer, go) and,
with ``cut_damaged`` (``--store-cut-damaged``), moves a damaged segment and every later one
aside. The journal (:mod:`broker.store.journal`) writes the files afterwards.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable
from pathlib import Path

from broker.store.data_dir import DataDirError
from broker.store.records import HEADER
from broker.store.recovery import CorruptStore, NewerStore, RecoveredState, Recovery, TornTail
from broker.store.segment_files import fsync_directory, list_segments, map_segment, segment_path

__all__ = ["StoreError", "read_store"]

LogEvent = Callable[..., None]


class StoreError(DataDirError):
    """The store cannot be opened (the message names the file and what is wrong)."""


def read_store(directory: Path, *, cut_damaged: bool, log_event: LogEvent) -> RecoveredState:
    """Read the store under ``directory`` (created if missing). Raises
    :class:`CorruptStore` or :class:`StoreError`.

    ``cut_damaged`` (the way out of a damaged store): keep what precedes the first damaged
    record; move the damaged segment and every later one to ``store.damaged.NNNN`` beside
    the store (never deleted), and log where. ``log_event(level, event, **fields)``.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        numbers = list_segments(directory)
        ahead = _ahead_of_the_writer(directory, numbers)
    except OSError as exc:
        raise StoreError(f"cannot read store {directory}: {exc.strerror}") from exc
    try:
        state = _read(directory, numbers[: len(numbers) - len(ahead)])
    except CorruptStore as exc:
        if not cut_damaged or exc.offset < 0 or isinstance(exc, NewerStore):
            raise
        _move_damaged(directory, numbers, exc, log_event)  # the ones ahead go aside too
        ahead = []
        state = _read(directory, list_segments(directory))
    for number, size in ahead:
        path = segment_path(directory, number)
        log_event(
            "warning",
            "store_torn_tail",
            segment=str(path),
            offset=0,
            cut_bytes=size,
            reason=AHEAD,
        )
        path.unlink()
    if ahead:
        fsync_directory(directory)
    torn = state.torn_tail
    if torn is not None:
        path = segment_path(directory, torn.segment)
        log_event(
            "warning",
            "store_torn_tail",
            segment=str(path),
            offset=torn.offset,
            cut_bytes=path.stat().st_size - torn.offset,
            reason=torn.reason,
        )
        if torn.offset < HEADER.size:
            path.unlink()
        else:
            with open(path, "r+b") as file:
                file.truncate(torn.offset)
                os.fsync(file.fileno())
    elif ahead:  # what a crash leaves, as a torn tail is (the store is dirty)
        state.torn_tail = TornTail(ahead[0][0], 0, AHEAD)
    return state


#: Why a segment ahead of the writer (see :func:`_ahead_of_the_writer`) is removed.
AHEAD = "no segment header yet: created ahead of the writer"


def _ahead_of_the_writer(directory: Path, numbers: list[int]) -> list[tuple[int, int]]:
    """(number, size) of the newest segments, oldest first, that hold less than a segment
    header, when an older one is there: nothing in them was written yet when the broker
    stopped. The journal creates a segment's file when it hands the segment's first records
    to its writer thread, which may still be writing older segments then (it writes the
    segments in order, and under ``fsync`` syncs each one before it writes the next). A
    crash can so leave empty files after the segment being written, whose tail may be
    torn: they are removed, and the torn tail is looked for in the newest segment that has
    a header (the oldest of such files, with no older one, is a torn tail as before)."""
    ahead: list[tuple[int, int]] = []
    for number in reversed(numbers[1:]):
        size = segment_path(directory, number).stat().st_size
        if size >= HEADER.size:
            break
        ahead.append((number, size))
    ahead.reverse()
    return ahead


def _read(directory: Path, numbers: list[int]) -> RecoveredState:
    recovery = Recovery()
    for i, number in enumerate(numbers):
        path = segment_path(directory, number)
        try:
            data = map_segment(path)
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror}") from exc
        try:
            recovery.add_segment(number, data, last=i == len(numbers) - 1)
        finally:
            if isinstance(data, mmap.mmap):
                with contextlib.suppress(BufferError):  # a view still held: GC closes it
                    data.close()
    return recovery.state()


def _move_damaged(
    directory: Path, numbers: list[int], damage: CorruptStore, log_event: LogEvent
) -> None:
    """Move the damaged segment and the later ones aside; keep the damaged segment's
    records before the damage (a copy of the whole file goes aside too)."""
    parent = directory.parent
    taken = [int(p.name.rsplit(".", 1)[1]) for p in parent.glob("store.damaged.[0-9]*")]
    aside = parent / f"store.damaged.{max(taken, default=0) + 1:04d}"
    aside.mkdir()
    moved: list[str] = []
    for number in numbers:
        if number < damage.segment:
            continue
        path = segment_path(directory, number)
        if number == damage.segment and damage.offset >= HEADER.size:
            target = aside / path.name
            target.write_bytes(path.read_bytes())
            with open(path, "r+b") as file:
                file.truncate(damage.offset)
                os.fsync(file.fileno())
        else:
            path.rename(aside / path.name)
        moved.append(path.name)
    fsync_directory(directory)
    fsync_directory(parent)
    log_event(
        "warning",
        "store_cut_at_damage",
        segment=damage.segment,
        offset=damage.offset,
        reason=damage.reason,
        moved_to=str(aside),
        segments=moved,
    )
