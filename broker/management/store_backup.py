"""``POST /api/store/backup``: a hot backup of this broker's store, streamed (``qpid-ha
backup``; the rules in :mod:`broker.store.hot_backup`).

Contract
========

- The answer (``application/octet-stream``) is the backup stream: one JSON header line,
  the sealed segments' bytes, one JSON trailer line with their SHA-256
  (:func:`~broker.store.hot_backup.encode_header`, :func:`~broker.store.hot_backup.encode_trailer`).
  Every message confirmed before the request was answered is in it.
- 404 without a store (no ``--data-dir``); 503 when the store's write at the point failed
  (a full disk: nothing is copied). A failure while streaming (the client gone, a read
  failed) aborts the connection: the stream has no trailer and the client refuses the copy.
- Needs the administrator or the cluster-manager role (a backup reads every message;
  :mod:`broker.security.roles`). Logs ``store_backup_started`` and ``store_backup_finished``
  or ``store_backup_failed``; the broker serves its clients meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.management.auth import current_user
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker
from broker.management.request_input import Body, read_json_object
from broker.store.hot_backup import BackupPoint, encode_header, encode_trailer
from broker.store.journal import Journal
from broker.store.segment_files import segment_path

__all__ = ["StoreBackupEndpoints", "take_snapshot"]

CHUNK = 1 << 20


@dataclass
class Snapshot:
    """The sealed segments, open: ``files`` maps a segment's number to (fd, size)."""

    point: BackupPoint
    files: dict[int, tuple[int, int]]

    def close(self) -> None:
        for fd, _size in self.files.values():
            os.close(fd)
        self.files = {}


async def take_snapshot(journal: Journal) -> Snapshot:
    """Seal the journal, wait for the write that puts the sealed segments on disk, open
    them, and let compaction go on. :raises ApiError: 503 when that write failed."""
    sealed = journal.seal()
    try:
        taken_at = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def done(ok: bool) -> None:
            if not written.done():
                written.set_result(ok)

        journal.after_durable(done, written=True)
        if not await written:
            raise ApiError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the store's write failed ({journal.failed}): no backup taken",
            )
        numbers = sorted(n for n in journal.ledger.segments if n <= sealed)
        files: dict[int, tuple[int, int]] = {}
        try:
            for number in numbers:
                fd = os.open(segment_path(journal.directory, number), os.O_RDONLY)
                files[number] = (fd, os.fstat(fd).st_size)
        except OSError as exc:
            for fd, _size in files.values():
                os.close(fd)
            raise ApiError(
                HTTPStatus.SERVICE_UNAVAILABLE, f"cannot open a segment: {exc}"
            ) from None
    finally:
        journal.release()
    return Snapshot(BackupPoint(sealed, taken_at, journal.sync.value), files)


def _read_chunk(fd: int, offset: int, size: int, digest: Any) -> bytes:
    data = os.pread(fd, size, offset)
    digest.update(data)
    return data


class StoreBackupEndpoints:
    """The hot backup handler, bound to one broker."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/api/store/backup", self.backup)]

    def _source(self) -> dict[str, Any]:
        broker: Any = self.broker
        ha = getattr(broker, "ha", None)
        data_dir = getattr(broker, "data_dir", None)
        return {
            "node": getattr(broker.options, "node_name", None),
            "address": f"{getattr(broker.options, 'interface', '')}:{broker.amqp_port}",
            "ha_state": getattr(broker, "ha_state", None),
            "broker_id": getattr(ha, "broker_id", None),
            "epoch": getattr(ha, "epoch", None),
            "store_id": getattr(data_dir, "store_id", None),
            "cluster_id": getattr(data_dir, "cluster_id", None),
        }

    async def backup(self, request: web.Request) -> web.StreamResponse:
        Body(await read_json_object(request), ())
        store = getattr(self.broker, "store", None)
        if store is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "this broker has no store (no --data-dir)")
        journal: Journal = store.journal
        started = time.monotonic()
        snapshot = await take_snapshot(journal)
        user = current_user.get()
        total = sum(size for _fd, size in snapshot.files.values())
        self.log.info(
            "store_backup_started",
            user=user,
            peer=request.remote,
            sealed_segment=snapshot.point.sealed_segment,
            segments=len(snapshot.files),
            bytes=total,
        )
        loop = asyncio.get_running_loop()
        sent = 0
        sizes = {n: size for n, (_fd, size) in snapshot.files.items()}
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        try:
            header = encode_header(snapshot.point, self._source(), sizes)
            await response.prepare(request)
            await response.write(header)
            digests: dict[int, str] = {}
            for number, (fd, size) in sorted(snapshot.files.items()):
                digest = hashlib.sha256()
                offset = 0
                while offset < size:
                    want = min(CHUNK, size - offset)
                    data = await loop.run_in_executor(None, _read_chunk, fd, offset, want, digest)
                    if len(data) != want:
                        raise OSError(f"segment {number} ended at {offset + len(data)} of {size}")
                    await response.write(data)
                    offset += want
                    sent += want
                digests[number] = digest.hexdigest()
            await response.write(encode_trailer(digests))
            await response.write_eof()
        except (OSError, asyncio.CancelledError) as exc:
            self.log.warning(
                "store_backup_failed",
                user=user,
                sealed_segment=snapshot.point.sealed_segment,
                bytes_sent=sent,
                reason=str(exc) or type(exc).__name__,
            )
            if isinstance(exc, asyncio.CancelledError):
                raise
            # Cut the connection: the stream must not look complete (no trailer follows).
            if request.transport is not None:
                request.transport.abort()
            return response
        finally:
            snapshot.close()
        self.log.info(
            "store_backup_finished",
            user=user,
            sealed_segment=snapshot.point.sealed_segment,
            segments=len(sizes),
            bytes=sent,
            seconds=round(time.monotonic() - started, 3),
        )
        return response
