"""Hot backup without a broker: the manifest, the stream's framing and the checks of a
backup (sans-I/O, :mod:`broker.store.hot_backup`), the CLI's reading of a stream
(:func:`qpid_ha_cli.store_backup.receive_backup`, from bytes), and the journal's seal:
compaction deletes no sealed segment until the backup releases it (real files)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
from pathlib import Path

import pytest

from broker.management.store_backup import take_snapshot
from broker.security.roles import Permission, Role, allows, required_permission
from broker.store.hot_backup import (
    MANIFEST,
    BackupError,
    BackupPoint,
    Contents,
    Manifest,
    SegmentEntry,
    check_segment,
    contents_of,
    decode_header,
    encode_header,
    encode_trailer,
    recover_backup,
    segment_name,
    sha256_hex,
)
from broker.store.records import (
    Kind,
    QueueRecord,
    encode_message_with_enqueue,
    encode_queue,
    encode_queue_entry,
    segment_header,
)
from broker.store.segment_files import list_segments, segment_path
from qpid_ha_cli.backup_dir import check_backup, receive_backup
from tests.store.test_journal import open_store, publish

POINT = BackupPoint(2, "2026-11-25T02:00:00.000000Z", "fsync")
SOURCE = {"node": "n1", "store_id": None, "cluster_id": None, "epoch": None}


def two_segments() -> list[tuple[int, bytes]]:
    """A queue and three messages, one of them dequeued, in two segments."""
    first = segment_header(1, 1) + encode_queue(QueueRecord(1, "q", False, {}))
    for message_id in (2, 3):
        first += encode_message_with_enqueue(
            message_id, "", "q", b"", b"m%d" % message_id, 1, message_id, 0
        )
    second = segment_header(2, 4) + encode_message_with_enqueue(4, "", "q", b"", b"m4", 1, 4, 0)
    second += encode_queue_entry(Kind.DEQUEUE, 1, 2)
    return [(1, first), (2, second)]


def manifest_of(segments: list[tuple[int, bytes]], contents: Contents | None = None) -> Manifest:
    entries = tuple(SegmentEntry(segment_name(n), len(d), sha256_hex(d)) for n, d in segments)
    return Manifest(POINT, SOURCE, entries, contents or Contents())


def named(segments: list[tuple[int, bytes]]) -> list[tuple[str, bytes]]:
    return [(segment_name(n), d) for n, d in segments]


def test_the_manifest_round_trips_and_recovery_counts_what_the_backup_holds() -> None:
    segments = two_segments()
    state = recover_backup(manifest_of(segments), named(segments))
    assert contents_of(state) == Contents(exchanges=0, queues=1, bindings=0, messages=2, records=8)
    manifest = manifest_of(segments, contents_of(state))
    assert Manifest.from_json(manifest.to_json()) == manifest
    recover_backup(manifest, named(segments))  # the counts match


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda d: d.update(format="other/1"), "format 'other/1'"),
        (lambda d: d["segments"].reverse(), "oldest first"),
        (lambda d: d["segments"][0].update(name="x.seg"), "not a segment file name"),
        (lambda d: d["segments"][0].update(size=-1), "bad size"),
        (lambda d: d["point"].update(sealed_segment=7), "the point says 7"),
        (lambda d: d.pop("point"), "malformed manifest"),
    ],
)
def test_a_bad_manifest_is_named(change: object, error: str) -> None:
    data = json.loads(manifest_of(two_segments()).to_json())
    change(data)  # type: ignore[operator]
    with pytest.raises(BackupError, match=error):
        Manifest.from_json(json.dumps(data))
    with pytest.raises(BackupError, match="not JSON"):
        Manifest.from_json("{")


def test_a_segment_of_the_wrong_size_or_content_is_refused() -> None:
    (number, data), _ = two_segments()
    entry = SegmentEntry(segment_name(number), len(data), sha256_hex(data))
    check_segment(entry, data)
    with pytest.raises(BackupError, match="truncated or altered"):
        check_segment(entry, data[:-1])
    flipped = bytearray(data)
    flipped[40] ^= 1
    with pytest.raises(BackupError, match="SHA-256"):
        check_segment(entry, bytes(flipped))


def test_recovery_refuses_damage_a_torn_end_and_wrong_counts() -> None:
    segments = two_segments()
    manifest = manifest_of(segments)
    damaged = bytearray(segments[0][1])
    damaged[-3] ^= 0xFF  # inside the first segment's last record
    with pytest.raises(BackupError, match=r"recovery fails on the backup: segment 0+1\.seg"):
        recover_backup(manifest, [(segment_name(1), bytes(damaged)), named(segments)[1]])
    torn = segments[1][1][:-5]
    with pytest.raises(BackupError, match="ends in a partial record"):
        recover_backup(manifest, [named(segments)[0], (segment_name(2), torn)])
    with pytest.raises(BackupError, match="are not the manifest's"):
        recover_backup(manifest, named(segments)[:1])
    counted = manifest_of(segments, Contents(queues=1, messages=3, records=8))
    with pytest.raises(BackupError, match="the manifest recorded"):
        recover_backup(counted, named(segments))


def stream_of(segments: list[tuple[int, bytes]]) -> bytes:
    header = encode_header(POINT, SOURCE, {n: len(d) for n, d in segments})
    body = b"".join(d for _n, d in segments)
    return header + body + encode_trailer({n: sha256_hex(d) for n, d in segments})


def test_the_cli_writes_a_checked_backup_from_a_stream(tmp_path: Path) -> None:
    segments = two_segments()
    manifest, state = receive_backup(io.BytesIO(stream_of(segments)), tmp_path / "b")
    assert state.message_count == 2
    assert manifest.contents.messages == 2
    assert decode_header(stream_of(segments).split(b"\n")[0] + b"\n").segments[0].sha256 == ""
    assert check_backup(tmp_path / "b")[0] == manifest
    assert Manifest.from_json((tmp_path / "b" / MANIFEST).read_text()) == manifest


@pytest.mark.parametrize(
    ("cut", "error"),
    [
        (lambda s: s[:-1], "ended before its trailer"),
        (lambda s: s[: s.index(b"\n") + 30], "ended inside segment"),
        (lambda s: s[:10], "does not start with a backup header"),
        (lambda s: s + b"x", "goes on after its trailer"),
        (lambda s: s.replace(b'"complete": true', b'"complete": false'), "did not finish"),
    ],
)
def test_a_stream_cut_short_leaves_no_manifest(tmp_path: Path, cut: object, error: str) -> None:
    data = cut(stream_of(two_segments()))  # type: ignore[operator]
    with pytest.raises(BackupError, match=error):
        receive_backup(io.BytesIO(data), tmp_path / "b")
    assert not (tmp_path / "b" / MANIFEST).exists()


def test_a_segment_altered_in_transit_is_refused(tmp_path: Path) -> None:
    segments = two_segments()
    data = bytearray(stream_of(segments))
    data[data.index(b"\n") + 20] ^= 1  # the first segment's header: next id
    with pytest.raises(BackupError, match="SHA-256 differs from what the broker sent"):
        receive_backup(io.BytesIO(bytes(data)), tmp_path / "b")


def test_the_administrator_and_the_cluster_manager_may_back_up_monitoring_not() -> None:
    needed = required_permission("POST", "/api/store/backup")
    assert needed is Permission.BACKUP
    assert allows(frozenset({Role.ADMINISTRATOR}), needed)
    assert allows(frozenset({Role.CLUSTER_MANAGER}), needed)
    assert not allows(frozenset({Role.MONITORING}), needed)


def test_a_sealed_journal_deletes_no_segment_until_released(tmp_path: Path) -> None:
    async def churn(vhost: object, count: int) -> None:
        queue = vhost.queues["q"]  # type: ignore[attr-defined]
        for i in range(count):
            publish(vhost, b"%d" % i + b"." * 100)  # type: ignore[arg-type]
            queue.remove_positions({queue.last_position})  # consumed at once
            if i % 50 == 0:
                await asyncio.sleep(0.001)  # let the writer and compaction run

    async def scenario() -> tuple[list[int], list[int], list[int]]:
        journal, _store, vhost, _ = open_store(tmp_path, segment_bytes=8192)
        journal.start()
        vhost.declare_queue("q", durable=True)
        publish(vhost, b"the old one")
        await churn(vhost, 200)
        sealed = journal.seal()
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        journal.after_durable(written.set_result, written=True)
        assert await written
        # The segments the seal holds are the ledger's (what a backup opens,
        # take_snapshot): a file compacted just before the seal may still be on the disk,
        # its unlink queued behind a sync, and go at any time (a make test saw it once).
        at_seal = [n for n in journal.ledger.segments if n <= sealed]
        await churn(vhost, 600)  # compaction wants the old segments: they stay
        held = list_segments(journal.directory)
        journal.release()
        for _ in range(500):
            if min(journal.ledger.segments) > sealed:
                break
            await churn(vhost, 10)
        after = list(journal.ledger.segments)
        for _ in range(500):  # let compaction settle before closing (see the report)
            idle: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            journal.after_durable(idle.set_result, written=True)
            await idle
            if journal._compacting is None:
                break
        assert await journal.close()
        return at_seal, held, after

    at_seal, held, after = asyncio.run(scenario())
    assert len(at_seal) >= 2
    assert set(at_seal) <= set(held)
    assert min(after) > max(at_seal)  # released: compaction went on


def test_a_snapshot_keeps_its_segments_while_compaction_deletes_them(tmp_path: Path) -> None:
    """The broker's side of a backup: once the sealed segments are open, compaction deletes
    their files and the copy still reads them whole, recovery finding the old message."""

    async def scenario() -> tuple[list[tuple[str, bytes]], int, list[int]]:
        journal, _store, vhost, _ = open_store(tmp_path, segment_bytes=8192)
        journal.start()
        vhost.declare_queue("q", durable=True)
        publish(vhost, b"the old one")
        queue = vhost.queues["q"]
        for i in range(150):
            publish(vhost, b"%d" % i + b"." * 100)
            queue.remove_positions({queue.last_position})
            if i % 50 == 0:
                await asyncio.sleep(0.001)
        snapshot = await take_snapshot(journal)
        # compaction goes on: the sealed segments' files go (600 publishes at least, then
        # on until one is gone: compaction runs in the journal's thread, later under load)
        deadline = time.monotonic() + 60.0
        i = 0
        while True:
            publish(vhost, b"%d" % i + b"." * 100)
            queue.remove_positions({queue.last_position})
            i += 1
            if i % 50 == 0:
                await asyncio.sleep(0.001)
                if i >= 600 and (
                    any(not segment_path(journal.directory, n).exists() for n in snapshot.files)
                    or time.monotonic() > deadline
                ):
                    break
        gone = [n for n in snapshot.files if not segment_path(journal.directory, n).exists()]
        copy = [
            (segment_name(n), os.pread(fd, size, 0))
            for n, (fd, size) in sorted(snapshot.files.items())
        ]
        snapshot.close()
        for _ in range(500):  # let compaction settle before closing
            idle: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            journal.after_durable(idle.set_result, written=True)
            await idle
            if journal._compacting is None:
                break
        assert await journal.close()
        return copy, snapshot.point.sealed_segment, gone

    copy, sealed, gone = asyncio.run(scenario())
    assert gone  # compaction deleted sealed segments while the backup held them open
    assert int(copy[-1][0][:20]) == sealed
    entries = tuple(SegmentEntry(name, len(data), sha256_hex(data)) for name, data in copy)
    state = recover_backup(Manifest(POINT, SOURCE, entries), copy)
    assert [state.messages[m.message_id].body for m in state.queues[0].messages] == [b"the old one"]
