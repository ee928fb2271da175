"""Compaction in small steps (issue 11): a pass over a large segment gives the event loop
turns all along and lets group commits (the publishers' confirms) through; a crash at any
step of it loses no confirmed message.

In process, with real files, the real Journal and MessageStore on a VirtualHost. The crash
is the store as it is on disk at a step: taken on the writer's thread, between two of its
writes (under ``fsync`` what is written there is synced: a power cut leaves the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.core.confirms import ConfirmHandle, PublisherConfirms
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.store.compaction import Steps
from broker.store.journal import Journal, SyncPolicy
from broker.store.message_store import MessageStore
from broker.store.records import HEADER, RECORD_HEADER, Kind
from broker.store.segment_files import list_segments, segment_path
from broker.store.store_files import read_store
from tests.store.small_disk import small_disk
from tests.store.test_journal import PERSISTENT, bodies, run


class StepJournal(Journal):
    """The real journal, counting the steps of its compaction passes and running
    ``at_step`` (if set) at each."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.steps = 0
        self.at_step: object = None

    async def compaction_pause(self) -> None:
        self.steps += 1
        if callable(self.at_step):
            await self.at_step()
        await super().compaction_pause()


def open_store(path: Path, segment_bytes: int) -> tuple[StepJournal, VirtualHost]:
    journal = StepJournal(path, sync=SyncPolicy.FSYNC, segment_bytes=segment_bytes)
    vhost = VirtualHost()
    MessageStore(journal, vhost).recover_into(journal.recover())
    return journal, vhost


def send(vhost: VirtualHost, queue: str, body: bytes, confirms: PublisherConfirms) -> ConfirmHandle:
    """Publish with a confirm; the handle is settled once the store has the message."""
    handle = confirms.publish()
    vhost.publish(vhost.exchange(""), Message("", queue, PERSISTENT, body, confirm=handle))
    handle.release()  # routing done
    return handle


async def durable(journal: Journal) -> None:
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    journal.after_durable(done.set_result)
    assert await done


def test_a_pass_over_a_large_segment_lets_the_loop_and_confirms_through(tmp_path: Path) -> None:
    """An 8 MiB segment of 1 KiB messages, 40% of them live: its pass (about 3 MiB of
    copies) gives the loop many turns, and a message published at its first step is
    confirmed before the pass ends (the old pass gave a turn every 4096 records)."""
    segment = 8 << 20

    async def scenario() -> tuple[int, int, int, bool]:
        journal, vhost = open_store(tmp_path, segment)
        journal.start()
        queue = vhost.declare_queue("q", durable=True)
        vhost.declare_queue("later", durable=True)
        confirms = PublisherConfirms()
        count = segment // 1100
        for i in range(count):
            send(vhost, "q", b"%d." % i + b"x" * 1000, confirms)
        queue.remove_positions({e.position for k, e in enumerate(queue.snapshot()) if k % 10 >= 4})
        await durable(journal)
        turns = 0
        passing = True

        async def ticker() -> None:
            nonlocal turns
            while passing:
                await asyncio.sleep(0)
                if journal.compacted_segments == 0 and journal.steps:
                    turns += 1

        during: list[ConfirmHandle] = []
        confirmed_during = False

        async def first_step() -> None:
            if not during:
                during.append(send(vhost, "later", b"during the pass", confirms))

        journal.at_step = first_step
        tick = asyncio.create_task(ticker())
        for i in range(count + 10):  # the next segment: the first becomes a candidate
            send(vhost, "later", b"%d." % i + b"y" * 1000, confirms)
        while journal.compacted_segments == 0:
            confirmed_during = confirmed_during or bool(during and during[0].settled)
            await asyncio.sleep(0)
        passing = False
        await tick
        assert await journal.close()
        return turns, journal.steps, count, bool(during) and confirmed_during

    turns, steps, count, confirmed_during = run(scenario())
    live = sum(1 for k in range(count) if k % 10 < 4)
    assert steps >= count // Steps().records  # about one step per 512 records looked at
    assert turns >= steps // 2  # the loop had turns all along (one a step, give or take)
    assert confirmed_during  # a group commit went out before the pass ended
    _journal, vhost = open_store(tmp_path, segment)
    kept = bodies(vhost)
    assert len(kept) == live and kept[0].startswith(b"0.")


@st.composite
def workloads(draw: st.DrawFn) -> list[tuple[str, int]]:
    """Publishes (body size) and acknowledgements (of the n-th oldest message)."""
    return draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("publish"), st.integers(0, 300)),
                st.tuples(st.just("ack"), st.integers(0, 20)),
                st.tuples(st.just("turn"), st.just(0)),
            ),
            min_size=20,
            max_size=250,
        )
    )


def recovered_bodies(store: dict[str, bytes]) -> list[bytes]:
    """What a broker's start recovers from these files (read_store: a torn tail cut, and
    the empty files the loop created ahead of the writer removed)."""
    with tempfile.TemporaryDirectory() as directory:
        for name, data in store.items():
            (Path(directory) / name).write_bytes(data)
        state = read_store(Path(directory), cut_damaged=False, log_event=lambda *_a, **_k: None)
    return [state.messages[m.message_id].body for q in state.queues for m in q.messages]


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(1, 12), st.integers(64, 2048))
def test_a_crash_at_any_step_of_a_pass_keeps_every_confirmed_message(
    ops: list[tuple[str, int]], step_records: int, backlog: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        crashes, confirmed, acked, final = _run_workload(
            Path(directory), ops, step_records, backlog
        )
    for store, confirmed_then, acked_then in crashes:
        kept = recovered_bodies(store)
        assert set(confirmed_then) - set(acked_then) <= set(kept)
        assert kept == sorted(kept, key=lambda body: int(body.split(b".")[0]))  # in order
    assert set(confirmed) - set(acked) == set(final)


def _run_workload(
    path: Path, ops: list[tuple[str, int]], step_records: int, backlog: int
) -> tuple[
    list[tuple[dict[str, bytes], list[bytes], list[bytes]]], list[bytes], list[bytes], list[bytes]
]:
    crashes: list[tuple[dict[str, bytes], list[bytes], list[bytes]]] = []
    confirmed: list[bytes] = []
    acked: list[bytes] = []
    sent: list[tuple[ConfirmHandle, bytes]] = []

    async def scenario() -> None:
        journal, vhost = open_store(path, 2048)
        journal.compaction_steps = Steps(records=step_records, bytes=4096, backlog=backlog)
        journal.start()
        queue = vhost.declare_queue("q", durable=True)
        confirms = PublisherConfirms()

        def settle() -> None:
            while sent and sent[0][0].settled:
                confirmed.append(sent.pop(0)[1])

        def snapshot() -> dict[str, bytes]:
            # After settle(): every confirm taken so far was synced before it was settled,
            # so it is in these files. Newest first: a write under way may leave a torn
            # tail in the segment being written (recovery cuts it, and removes the empty
            # files the loop created after it); the older ones are whole by then.
            store = journal.directory
            taken = {}
            for number in reversed(list_segments(store)):
                try:
                    taken[segment_path(store, number).name] = segment_path(
                        store, number
                    ).read_bytes()
                except FileNotFoundError:
                    continue
            return taken

        async def crash() -> None:
            settle()
            store = snapshot()
            crashes.append((store, list(confirmed), list(acked)))

        journal.at_step = crash
        for number, (op, value) in enumerate(ops):
            if op == "publish":
                body = b"%d." % number + b"b" * value
                sent.append((send(vhost, "q", body, confirms), body))
            elif op == "ack":
                entries = queue.snapshot()
                if entries:
                    entry = entries[min(value, len(entries) - 1)]
                    acked.append(entry.message.body)
                    queue.remove_positions({entry.position})
            else:
                await asyncio.sleep(0.001)
                await crash()  # between passes too: after a segment was deleted
            settle()
        await durable(journal)
        while journal.compacting is not None and not journal.closing:
            await asyncio.sleep(0.001)
        settle()
        assert await journal.close()
        settle()

    run(scenario())
    _journal, vhost = open_store(path, 2048)
    return crashes, confirmed, acked, bodies(vhost)


@pytest.mark.parametrize("damage", ["live body", "dead length"])
def test_a_damaged_segment_is_kept_and_the_store_goes_on(tmp_path: Path, damage: str) -> None:
    """A live record whose checksum fails, or a dead one whose length runs past the end of
    the file: the pass stops, logs ``store_compaction_failed`` and keeps the segment (never
    deleted with live records unread); publishers are still confirmed."""

    async def scenario() -> tuple[bool, list[str]]:
        journal, vhost = open_store(tmp_path, 4096)
        failures: list[str] = []
        journal.log = Failures(failures)
        journal.start()
        queue = vhost.declare_queue("q", durable=True)
        confirms = PublisherConfirms()
        for i in range(20):
            send(vhost, "q", b"%d." % i + b"z" * 100, confirms)
        queue.remove_positions({e.position for e in queue.snapshot()[5:]})
        await durable(journal)
        first = segment_path(journal.directory, list_segments(journal.directory)[0])
        data = bytearray(first.read_bytes())
        target = b"2." if damage == "live body" else b"12."
        pos = HEADER.size
        while pos < len(data):
            length, _crc, kind = RECORD_HEADER.unpack_from(data, pos)
            end = pos + RECORD_HEADER.size + length
            if kind == Kind.MESSAGE and data[pos:end].find(target + b"z") > 0:
                if damage == "live body":
                    data[end - 1] ^= 0x55
                else:
                    RECORD_HEADER.pack_into(data, pos, 1 << 30, _crc, kind)
                break
            pos = end
        first.write_bytes(bytes(data))
        vhost.declare_queue("later", durable=True)
        for i in range(100):  # the next segments: the first becomes a candidate
            send(vhost, "later", b"%d." % i + b"y" * 100, confirms)
        last = send(vhost, "later", b"last", confirms)
        await durable(journal)
        for _ in range(1000):
            if journal.compacting is not None:
                break
            await durable(journal)
        # the pass reads on a thread of its own: wait (with a deadline) until it stopped
        deadline = time.monotonic() + 30
        while not failures and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await durable(journal)
        kept = first.exists() and journal.compacting == int(first.stem)
        assert await journal.close()
        return kept and last.settled, failures

    kept, failures = run(scenario())
    assert kept
    assert failures and (
        "checksum" in failures[0] if damage == "live body" else "past the end" in failures[0]
    )


class Failures:
    """The journal's log: keeps the errors of store_compaction_failed."""

    def __init__(self, into: list[str]) -> None:
        self.into = into

    def error(self, event: str, **fields: object) -> None:
        if event == "store_compaction_failed":
            self.into.append(str(fields["error"]))

    def info(self, event: str, **fields: object) -> None:
        pass

    warning = info


def test_a_full_disk_during_a_pass_loses_no_copy_and_the_pass_is_done_again(
    tmp_path: Path,
) -> None:
    """The disk fills at the first step of a pass: the copies' write fails, the segment
    stays (the ledger counts its records there again), and once space is back the pass
    runs again and deletes it; every message not acknowledged is recovered, in order."""
    with small_disk(tmp_path, "4m") as disk:
        filler = disk / "filler"

        async def scenario() -> tuple[list[str], int, list[bytes]]:
            journal, vhost = open_store(disk, 16384)
            failures: list[str] = []
            journal.log = Failures(failures)
            journal.compaction_steps = Steps(records=8, bytes=1024, backlog=1 << 20)
            journal.start()
            queue = vhost.declare_queue("q", durable=True)
            confirms = PublisherConfirms()
            for i in range(60):
                send(vhost, "q", b"%d." % i + b"k" * 500, confirms)
            kept = [e.message.body for k, e in enumerate(queue.snapshot()) if k % 4 == 0]
            queue.remove_positions({e.position for k, e in enumerate(queue.snapshot()) if k % 4})
            await durable(journal)

            async def fill() -> None:
                if not filler.exists():
                    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
                    with contextlib.suppress(OSError):
                        while True:
                            os.write(fd, b"\0" * 65536)
                    os.close(fd)

            journal.at_step = fill
            vhost.declare_queue("later", durable=True)
            for i in range(40):  # the next segments: the first becomes a candidate
                send(vhost, "later", b"%d." % i + b"y" * 500, confirms)
            for _ in range(1000):
                if failures:
                    break
                await asyncio.sleep(0.001)
            assert failures and journal.compacted_segments == 0
            journal.at_step = None
            filler.unlink()  # space is back
            for _ in range(1000):
                if journal.compacted_segments:
                    break
                send(vhost, "later", b"more", confirms)
                await durable(journal)
            compacted = journal.compacted_segments
            assert await journal.close()
            return failures, compacted, kept

        failures, compacted, kept = run(scenario())
        assert "could not be written" in failures[0]
        assert compacted >= 1
        _journal, vhost = open_store(disk, 16384)
        assert bodies(vhost) == kept
