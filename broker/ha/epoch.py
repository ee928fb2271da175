"""The highest fencing epoch this broker has seen, kept durably in ``<data-dir>/ha-epoch``.

Epochs fence off stale primaries (docs/ha-design.md, "Epoch"): promotion may carry an
epoch, backups refuse a primary with a lower one, and a primary that learns of a higher
one stops serving. For that to survive a restart the broker remembers the highest epoch it
has seen in the file ``ha-epoch`` of its data directory: the decimal number and a newline.

:meth:`EpochStore.observe` only ever raises the value, and writes it before it reports it:
a temporary file in the same directory, ``fsync``, ``rename`` over ``ha-epoch``, ``fsync``
of the directory. A crash at any point leaves either the old value or the new one. Without
a data directory the value lives in memory only (and starts at 0 on every run).

File I/O happens only in :meth:`EpochStore.load` and :meth:`EpochStore.observe` (and
:attr:`EpochStore.current`, which loads on first use); they block, so an event loop may run
them in a thread. THREAD UNSAFE: one owner calls them.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

__all__ = ["EPOCH_FILE", "MAX_EPOCH", "EpochError", "EpochStore"]

#: Name of the epoch file inside the data directory.
EPOCH_FILE = "ha-epoch"

#: The largest epoch: a signed 64-bit number, like the ZooKeeper counters epochs come from.
MAX_EPOCH = 2**63 - 1

_NUMBER = re.compile(r"[0-9]{1,19}")


class EpochError(Exception):
    """The epoch file cannot be read, holds no epoch, or cannot be written (names the file)."""


class EpochStore:
    """The highest epoch seen (0 to start with), durable when there is a data directory.

    The file is read on :meth:`load`, or on the first use of :attr:`current` or
    :meth:`observe`, so an instance never writes a value lower than one already on disk.
    """

    def __init__(self, data_dir: str | os.PathLike[str] | None, filename: str = EPOCH_FILE) -> None:
        self._dir = None if data_dir is None else Path(data_dir)
        self.filename = filename
        self._current = 0
        self._loaded = False

    @property
    def path(self) -> Path | None:
        """``<data_dir>/ha-epoch`` (or ``filename``), or None when the value is kept in
        memory only."""
        return None if self._dir is None else self._dir / self.filename

    @property
    def current(self) -> int:
        """The highest epoch seen so far (loads the file on first use).

        :raises EpochError: as :meth:`load` does.
        """
        if not self._loaded:
            self.load()
        return self._current

    def load(self) -> int:
        """Read the epoch file (absent: 0) and return the highest epoch seen.

        :raises EpochError: naming the file if it cannot be read or does not hold an epoch.
        """
        path = self.path
        if path is not None:
            on_disk = _read(path)
            self._current = max(self._current, on_disk)
        self._loaded = True
        return self._current

    def observe(self, epoch: int) -> bool:
        """Record ``epoch`` if it is higher than any seen before; True if it was.

        A higher epoch is written durably before this returns; if the write fails the
        remembered value is unchanged and :class:`EpochError` is raised.

        :raises ValueError: for a negative ``epoch`` (or one above :data:`MAX_EPOCH`).
        :raises TypeError: if ``epoch`` is not an int.
        :raises EpochError: if the file cannot be read or written.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise TypeError(f"epoch must be an int, not {type(epoch).__name__}")
        if not 0 <= epoch <= MAX_EPOCH:
            raise ValueError(f"invalid epoch {epoch}: must be from 0 to {MAX_EPOCH}")
        if epoch <= self.current:
            return False
        if self._dir is not None:
            _write(self._dir, epoch, self.filename)
        self._current = epoch
        return True

    def __repr__(self) -> str:
        where = "memory" if self.path is None else str(self.path)
        shown = str(self._current) if self._loaded else "not loaded"
        return f"<EpochStore {where}: {shown}>"


def _read(path: Path) -> int:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise EpochError(
            f"cannot read HA epoch file {path}: {exc.strerror or exc.__class__.__name__}"
        ) from exc
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        text = None
    if text is None or _NUMBER.fullmatch(text) is None or int(text) > MAX_EPOCH:
        shown = raw[:40]
        raise EpochError(
            f"HA epoch file {path} does not hold an epoch (a number from 0 to {MAX_EPOCH}):"
            f" {shown!r}" + ("..." if len(raw) > len(shown) else "")
        )
    return int(text)


def _write(directory: Path, epoch: int, filename: str = EPOCH_FILE) -> None:
    path = directory / filename
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{filename}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise EpochError(f"cannot write HA epoch file {path}: {exc.strerror}") from exc
    try:
        try:
            with os.fdopen(fd, "w", encoding="ascii") as file:
                file.write(f"{epoch}\n")
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, path)
        except BaseException:
            _remove(temp)
            raise
        _fsync_directory(directory)
    except OSError as exc:
        raise EpochError(f"cannot write HA epoch file {path}: {exc.strerror}") from exc


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
