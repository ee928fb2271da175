"""A backup directory of the store (``qpid-ha backup`` and ``qpid-ha restore``'s files, the
contract in :mod:`qpid_ha_cli.store_backup`): written from a broker's backup stream and
checked, checked again and copied into a data directory to start from.

The store's code (:mod:`broker.store`) is imported here, by those two verbs alone: the
commands import this module when they run, not at every ``qpid-ha`` start (an OCF monitor
runs one or two; tests/test_start_up.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from broker.store.data_dir import (
    EPOCH_FILE,
    JOURNAL_DIR,
    LOCK,
    DataDir,
    DataDirError,
    write_id_file,
)
from broker.store.hot_backup import (
    MANIFEST,
    RESTORED,
    SEGMENTS_DIR,
    BackupError,
    Manifest,
    SegmentEntry,
    check_segment,
    contents_of,
    decode_header,
    decode_trailer,
    recover_backup,
)
from broker.store.identity import BACKUP_PREFIX, parse_id
from broker.store.recovery import RecoveredState
from common.exit_status import CommandError, ExitStatus

__all__ = ["BackupError", "check_backup", "receive_backup", "restore_into"]

CHUNK = 1 << 20
_MAX_LINE = 1 << 20


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: Path, data: bytes) -> None:
    """``data`` to ``path`` whole or not at all: a temporary file, fsync, rename."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    partial.replace(path)
    _fsync(path.parent)


# -- backup ----------------------------------------------------------------------------------
def receive_backup(stream: BinaryIO, target: Path) -> tuple[Manifest, RecoveredState]:
    """Write the backup ``stream`` (a broker's answer) into ``target``, check it, and write
    its manifest last. :raises BackupError: the stream or the copy is bad."""
    header = decode_header(stream.readline(_MAX_LINE))
    segments = target / SEGMENTS_DIR
    segments.mkdir(parents=True, exist_ok=True)
    digests: dict[str, str] = {}
    for entry in header.segments:
        digest = hashlib.sha256()
        left = entry.size
        with open(segments / entry.name, "wb") as file:
            while left:
                data = stream.read(min(CHUNK, left))
                if not data:
                    raise BackupError(
                        f"the stream ended inside segment {entry.name} ({left} of"
                        f" {entry.size} bytes missing): the copy was cut short"
                    )
                digest.update(data)
                file.write(data)
                left -= len(data)
            file.flush()
            os.fsync(file.fileno())
        digests[entry.name] = digest.hexdigest()
    sent = decode_trailer(stream.readline(_MAX_LINE))
    if stream.read(1):
        raise BackupError("the stream goes on after its trailer")
    for name, hexdigest in digests.items():
        if sent.get(name) != hexdigest:
            raise BackupError(f"segment {name}: SHA-256 differs from what the broker sent")
    _fsync(segments)
    manifest = Manifest(
        header.point,
        header.source,
        tuple(SegmentEntry(e.name, e.size, digests[e.name]) for e in header.segments),
    )
    state = recover_backup(manifest, _segment_bytes(segments, manifest))
    manifest = Manifest(manifest.point, manifest.source, manifest.segments, contents_of(state))
    _write_durably(target / MANIFEST, manifest.to_json().encode())
    return manifest, state


def _segment_bytes(directory: Path, manifest: Manifest) -> Iterator[tuple[str, bytes]]:
    for entry in manifest.segments:
        path = directory / entry.name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise BackupError(f"cannot read {path}: {exc.strerror}") from None
        check_segment(entry, data)
        yield entry.name, data


# -- restore ---------------------------------------------------------------------------------
def check_backup(directory: Path) -> tuple[Manifest, RecoveredState]:
    """Read and check the backup in ``directory``. :raises BackupError: naming the problem."""
    path = directory / MANIFEST
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise BackupError(
            f"{path} is missing: not a backup, or a copy that did not finish"
        ) from None
    except OSError as exc:
        raise BackupError(f"cannot read {path}: {exc.strerror}") from None
    try:
        manifest = Manifest.from_json(text)
    except BackupError as exc:
        raise BackupError(f"{path}: {exc}") from None
    segments = directory / SEGMENTS_DIR
    listed = {e.name for e in manifest.segments}
    present = {p.name for p in segments.glob("*.seg")} if segments.is_dir() else set()
    missing = sorted(listed - present)
    if missing:
        raise BackupError(f"segment {missing[0]} of the manifest is missing from {segments}")
    extra = sorted(present - listed)
    if extra:
        raise BackupError(f"{segments / extra[0]} is not in the manifest")
    return manifest, recover_backup(manifest, _segment_bytes(segments, manifest))


def restore_into(
    backup_dir: Path, data_dir: Path, *, force: bool = False
) -> tuple[Manifest, RecoveredState, Path | None]:
    """Check the backup, then prepare ``data_dir`` from it, holding its lock; returns where
    what ``data_dir`` held went (``force``), or None. :raises BackupError: CommandError:"""
    manifest, state = check_backup(backup_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise CommandError(f"--data-dir {data_dir} is not a directory", ExitStatus.USAGE)
    held = sorted(
        p.name
        for p in (data_dir.iterdir() if data_dir.exists() else ())
        if p.name != LOCK and not p.name.startswith(BACKUP_PREFIX)
    )
    if held and not force:
        raise CommandError(
            f"--data-dir {data_dir} is not empty (it holds {', '.join(held[:3])}): restore"
            " into a new or empty directory, or add --force to move what it holds aside",
            ExitStatus.USAGE,
        )
    try:
        target = DataDir(data_dir).open()
    except DataDirError as exc:
        raise CommandError(str(exc), ExitStatus.USAGE) from None
    moved: Path | None = None
    try:
        if held:
            moved = target.move_store_aside(f"qpid-ha restore {backup_dir} --force")
        restoring = data_dir / (JOURNAL_DIR + ".restoring")
        if restoring.exists():
            shutil.rmtree(restoring)  # our own leftover of an interrupted restore
        restoring.mkdir()
        source_dir = backup_dir / SEGMENTS_DIR
        for entry in manifest.segments:
            shutil.copyfile(source_dir / entry.name, restoring / entry.name)
            _fsync(restoring / entry.name)
        _fsync(restoring)
        cluster_id = parse_id(str(manifest.source.get("cluster_id") or ""))
        if cluster_id is not None:
            target.set_cluster_id(cluster_id)
        epoch = manifest.source.get("epoch")
        if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > 0:
            write_id_file(data_dir, EPOCH_FILE, str(epoch))
        marker: dict[str, Any] = {
            "backup": str(backup_dir.resolve()),
            "point": manifest.point.taken_at,
            "sealed_segment": manifest.point.sealed_segment,
            "source_node": manifest.source.get("node"),
            "source_broker_id": manifest.source.get("broker_id"),
            "source_store_id": manifest.source.get("store_id"),
            "cluster_id": cluster_id,
            "epoch": epoch,
            "messages": manifest.contents.messages,
            "restored_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        }
        _write_durably(data_dir / RESTORED, json.dumps(marker, sort_keys=True).encode())
        restoring.rename(data_dir / JOURNAL_DIR)
        _fsync(data_dir)
    finally:
        target.close(clean=False)  # never clean: which messages were delivered is unknown
    return manifest, state, moved
