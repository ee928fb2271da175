"""The broker's data directory, locked so two brokers never share it.

Like Qpid's ``--data-dir`` (``/var/lib/qpidd/lock``): the broker creates the directory if
needed and holds an exclusive ``flock`` on ``lock`` inside it for its whole life. A second
broker pointed at the same directory fails at start with a clear message. Durable state
(the HA epoch, the journal) lives here in later issues.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


class DataDirError(Exception):
    """The data directory cannot be used (message says why, naming the path)."""


class DataDir:
    """A locked data directory; :meth:`open` takes the lock, :meth:`close` releases it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock: IO[str] | None = None

    @property
    def lock_path(self) -> Path:
        return self.path / "lock"

    def open(self) -> DataDir:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            lock = open(self.lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held open
        except OSError as exc:
            raise DataDirError(f"cannot use data directory {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            lock.close()
            raise DataDirError(
                f"cannot lock {self.lock_path}: another qpidd is using this data directory"
            ) from exc
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock = lock
        return self

    def close(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
