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

Identity (:mod:`broker.store.identity`): ``store-id`` (created at the first open),
``cluster-id`` (written by :meth:`DataDir.set_cluster_id`) and the shutdown-id, the content
of ``clean-shutdown`` when a clean all-stop wrote it. Every id file is written whole:
a temporary file, ``fsync``, ``rename``, ``fsync`` of the directory.

:meth:`DataDir.move_store_aside` moves a discarded store to ``_cluster.bak.NNNN`` (never
deletes it). :func:`inspect` reads a directory without taking its lock (``qpid-ha store
status``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from broker.store.identity import (
    BACKUP_PREFIX,
    CLUSTER_ID,
    STORE_ID,
    new_id,
    next_backup_name,
    parse_id,
)
from broker.store.segment_files import SEGMENT_SUFFIX, fsync_directory
from common.log import get_logger

CLEAN_SHUTDOWN = "clean-shutdown"
LOCK = "lock"
#: The HA epoch file (broker.ha.epoch.EPOCH_FILE; the store package does not import HA).
EPOCH_FILE = "ha-epoch"
#: The journal's directory (broker.store.journal.STORE_DIR) and the page files'.
JOURNAL_DIR = "store"
PAGING_DIR = "paging"


class DataDirError(Exception):
    """The data directory cannot be used (message says why, naming the path)."""


class DataDir:
    """A locked data directory; :meth:`open` takes the lock, :meth:`close` releases it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock: IO[str] | None = None
        #: ``empty``, ``clean`` or ``dirty``: how the previous broker left this directory
        self.store_status = "empty"
        #: This store's id (a UUID, file ``store-id``), set by :meth:`open`
        self.store_id = ""
        #: The cluster this store belongs to (file ``cluster-id``), None before it joins one
        self.cluster_id: str | None = None
        #: The clean all-stop the previous broker stopped in (None: not one)
        self.shutdown_id: str | None = None
        #: Written into ``clean-shutdown`` by a clean :meth:`close` (a clean all-stop's id)
        self.closing_shutdown_id: str | None = None

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK

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
        try:
            self._read_state(lock)
        except BaseException:
            lock.close()
            raise
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock = lock
        return self

    def _read_state(self, lock: IO[str]) -> None:
        lock.seek(0)
        used = bool(lock.read().strip())  # the previous broker's pid: it ran here
        marker = self.path / CLEAN_SHUTDOWN
        self.cluster_id = _read_id(self.path / CLUSTER_ID)
        store_id = _read_id(self.path / STORE_ID)
        if marker.exists():
            self.store_status = "clean"
            self.shutdown_id = _read_id(marker, empty_ok=True)
            marker.unlink()
        elif used or any(p.name != LOCK for p in self.path.iterdir()):
            self.store_status = "dirty"
        else:
            self.store_status = "empty"
        if store_id is None:
            store_id = new_id()
            write_id_file(self.path, STORE_ID, store_id)
        self.store_id = store_id

    def set_cluster_id(self, cluster_id: str) -> None:
        """Record (durably, before returning) the cluster this store belongs to."""
        if cluster_id != self.cluster_id:
            write_id_file(self.path, CLUSTER_ID, cluster_id)
            self.cluster_id = cluster_id

    def move_store_aside(self, reason: str, *, keep_epoch: bool = False) -> Path:
        """Move the store (journal, page files, identity files, the clean-shutdown marker,
        and the HA epoch unless ``keep_epoch``) to a new ``_cluster.bak.NNNN`` and start a new,
        empty store with a new store-id. Returns the directory it went to. Never deletes.

        Call it while the directory is open and before the journal is: the store's files
        must not be in use. ``reason`` is written to ``_cluster.bak.NNNN/reason`` and
        logged (``store_moved_aside``, with where it went).
        """
        if self._lock is None:
            raise DataDirError(f"{self.path} is not open: cannot move its store aside")
        try:
            old_store_id = self.store_id
            names = [p.name for p in self.path.iterdir()]
            target = self.path / next_backup_name(names)
            target.mkdir()
            for name in sorted(names):
                if name == LOCK or name.startswith(BACKUP_PREFIX):
                    continue
                if keep_epoch and name == EPOCH_FILE:
                    continue
                os.rename(self.path / name, target / name)
            (target / "reason").write_text(reason + "\n", encoding="utf-8")
            fsync_directory(target)
            fsync_directory(self.path)
            self.store_id = new_id()
            write_id_file(self.path, STORE_ID, self.store_id)
        except OSError as exc:
            raise DataDirError(
                f"cannot move the store in {self.path} aside: {exc.strerror or exc}"
            ) from exc
        self.store_status = "empty"
        old_cluster_id, self.cluster_id = self.cluster_id, None
        self.shutdown_id = None
        get_logger("store").warning(
            "store_moved_aside",
            reason=reason,
            moved_to=str(target),
            old_store_id=old_store_id,
            cluster_id=old_cluster_id,
            store_id=self.store_id,
        )
        return target

    def close(self, clean: bool = True) -> None:
        """Release the lock; ``clean``: the broker stopped in order (leave the marker, with
        :attr:`closing_shutdown_id` in it when a clean all-stop set one)."""
        if self._lock is not None:
            if clean:
                with contextlib.suppress(OSError):  # a read-only or vanished directory
                    write_id_file(self.path, CLEAN_SHUTDOWN, self.closing_shutdown_id or "")
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


# -- reading a data directory from outside (qpid-ha store) ---------------------------------
@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What :func:`inspect` reads of a data directory."""

    path: Path
    #: empty, clean, dirty, or "in use" while a broker holds the lock
    status: str
    #: the pid in ``lock`` when a broker holds it, else None
    in_use_by: int | None
    store_id: str | None
    cluster_id: str | None
    shutdown_id: str | None
    segments: int
    bytes: int
    moved_aside: tuple[str, ...]


def inspect(path: str | os.PathLike[str]) -> StoreInfo:
    """Read a data directory's status and ids without changing anything (a broker may be
    running on it: reading is safe, the files are replaced whole).

    :raises DataDirError: no such directory, or an id file that holds no id.
    """
    root = Path(path)
    if not root.is_dir():
        raise DataDirError(f"no data directory at {root}")
    try:
        names = sorted(p.name for p in root.iterdir())
        in_use_by = _lock_holder(root)
        segments = [p for p in (root / JOURNAL_DIR).glob(f"*{SEGMENT_SUFFIX}") if p.is_file()]
        size = sum(p.stat().st_size for p in segments)
        marker = root / CLEAN_SHUTDOWN
        if in_use_by is not None:
            status = "in use"
        elif marker.exists():
            status = "clean"
        elif any(n != LOCK and not n.startswith(BACKUP_PREFIX) for n in names) or (
            LOCK in names and (root / LOCK).read_text(encoding="utf-8").strip()
        ):
            status = "dirty"
        else:
            status = "empty"
        return StoreInfo(
            path=root,
            status=status,
            in_use_by=in_use_by,
            store_id=_read_id(root / STORE_ID),
            cluster_id=_read_id(root / CLUSTER_ID),
            shutdown_id=_read_id(marker, empty_ok=True) if marker.exists() else None,
            segments=len(segments),
            bytes=size,
            moved_aside=tuple(n for n in names if n.startswith(BACKUP_PREFIX)),
        )
    except OSError as exc:
        raise DataDirError(f"cannot read data directory {root}: {exc.strerror or exc}") from exc


def mark_clean(path: str | os.PathLike[str]) -> str:
    """Mark a stopped store clean with a new shutdown-id (the operator's manual recovery,
    seed 002) and return that id; holds the lock while it writes.

    :raises DataDirError: no such directory, or a broker holds its lock (naming its pid).
    """
    root = Path(path)
    if not root.is_dir():
        raise DataDirError(f"no data directory at {root}")
    lock_path = root / LOCK
    try:
        lock = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise DataDirError(f"cannot open {lock_path}: {exc.strerror}") from exc
    with lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            pid = lock.read().strip()
            raise DataDirError(
                f"{root} is in use by pid {pid or '?'}: stop that broker first"
            ) from None
        try:
            shutdown_id = new_id()
            write_id_file(root, CLEAN_SHUTDOWN, shutdown_id)
            return shutdown_id
        except OSError as exc:
            raise DataDirError(f"cannot mark {root} clean: {exc.strerror or exc}") from exc
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _lock_holder(root: Path) -> int | None:
    """The pid of the broker holding ``root``'s lock, or None when nobody holds it."""
    lock_path = root / LOCK
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 64).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# -- files written whole ------------------------------------------------------------------
def write_id_file(directory: Path, name: str, text: str) -> None:
    """Write ``text`` (and a newline, unless empty) to ``directory/name`` whole: a
    temporary file, fsync, rename, fsync of the directory."""
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(f"{text}\n" if text else "")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, directory / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_directory(directory)


def _read_id(path: Path, *, empty_ok: bool = False) -> str | None:
    """The id in ``path``; None if there is no such file (or it is empty and ``empty_ok``).

    :raises DataDirError: the file holds something else than an id.
    """
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataDirError(f"cannot read {path}: {exc.strerror}") from exc
    if empty_ok and not text.strip():
        return None
    parsed = parse_id(text)
    if parsed is None:
        raise DataDirError(f"{path} does not hold an id (a UUID): {text[:40]!r}")
    return parsed
