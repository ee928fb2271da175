"""The broker's data directory, locked so two brokers never share it.

Like Qpid's ``--data-dir`` (``/var/lib/qpidd/lock``): the broker creates the directory if
needed and holds an exclusive ``flock`` on ``lock`` inside it for its whole life. A second
broker pointed at the same directory fails at start with a clear message. Durable state
(the HA epoch, the journal) lives here.

Store status (seed 002, "Persistent Cluster Restart"): ``empty`` for a new directory,
``clean`` when the previous broker stopped in order (it left the file ``clean-shutdown``,
removed again when the next broker opens the directory), ``dirty`` when it did not (killed,
crashed). The HA agent prefers a clean store to a dirty one when it must choose a broker
after a total failure.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

CLEAN_SHUTDOWN = "clean-shutdown"


class DataDirError(Exception):
    """The data directory cannot be used (message says why, naming the path)."""


class DataDir:
    """A locked data directory; :meth:`open` takes the lock, :meth:`close` releases it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock: IO[str] | None = None
        #: ``empty``, ``clean`` or ``dirty``: how the previous broker left this directory
        self.store_status = "empty"

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
        used = bool(lock.read().strip())  # the previous broker's pid: it ran here
        marker = self.path / CLEAN_SHUTDOWN
        if marker.exists():
            self.store_status = "clean"
            marker.unlink()
        elif used or any(p.name != "lock" for p in self.path.iterdir()):
            self.store_status = "dirty"
        else:
            self.store_status = "empty"
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock = lock
        return self

    def close(self, clean: bool = True) -> None:
        """Release the lock; ``clean``: the broker stopped in order (leave the marker)."""
        if self._lock is not None:
            if clean:
                with contextlib.suppress(OSError):  # a read-only or vanished directory
                    (self.path / CLEAN_SHUTDOWN).write_text("")
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
