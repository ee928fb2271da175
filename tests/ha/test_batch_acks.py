"""A backup acknowledges a batch only once every event in it is applied and durable (issue
10's promise: a confirm goes out once every guarded backup holds the message, and a
persistent one is on its disk; docs/ha-design.md, "Transactions").

A batch of plain events that waits behind a transaction's staged part applies nothing and
writes nothing when it arrives: acknowledged then (as the link did before), the primary
confirmed messages that a promoted or restarted backup's store did not have. Sans I/O:
real subscriptions on a primary's queues, the real wire format, queue replicators sharing
one TxStaging and one BatchAcks, over a real Journal and MessageStore, or, for any
interleaving (hypothesis), over a disk model whose flushes come at any point.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Message, TxMark
from broker.core.vhost import VirtualHost
from broker.ha.queue_replicator import BatchAcks, QueueReplicator
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.tx_staging import TxStaging
from broker.ha.wire import Enqueue, decode_batch
from broker.store.journal import Journal, SyncPolicy
from broker.store.message_store import MessageStore
from broker.store.segment_files import list_segments, segment_path
from tests.ha.test_tx_staging import QUEUES, Link, workloads
from tests.store.test_backup_tx_records import recovered
from tests.store.test_journal import PERSISTENT


def _on_disk(directory: Path) -> dict[str, list[bytes]]:
    """What the backup's store recovers now (its only segment, as written so far)."""
    segments = list_segments(directory)
    if not segments:  # nothing written yet
        return {}
    [number] = segments
    return recovered(segment_path(directory, number).read_bytes())


async def _plain_behind_a_staged_transaction(directory: Path) -> None:
    primary, backup = VirtualHost(), VirtualHost()
    journal = Journal(directory, sync=SyncPolicy.WRITE)
    MessageStore(journal, backup).recover_into(journal.recover())
    journal.start()
    staging = TxStaging(journal.transaction)
    batch_acks = BatchAcks(journal.after_durable, lambda reason: None)
    replicators, subscriptions = {}, {}
    for name in ("q1", "q2"):
        primary.declare_queue(name, durable=True)
        replicators[name] = QueueReplicator(backup.declare_queue(name, durable=True), staging)
        subscriptions[name] = ReplicatingSubscription(
            primary.queues[name], None, replicators[name].ids(), max_batch_events=1
        )
    exchange = primary.exchange("")
    mark = TxMark()
    for name, body in (("q1", b"tx-0"), ("q2", b"tx-1")):
        message = Message("", name, PERSISTENT, body)
        message.tx = mark
        primary.publish(exchange, message)
    primary.publish(exchange, Message("", "q1", PERSISTENT, b"plain"))  # a confirmed publish

    acked: list[tuple[str, int]] = []
    carried: dict[tuple[str, int], list[bytes]] = {}

    def ack_of(name: str) -> Callable[[int], None]:
        def ack(tag: int) -> None:
            # Every message of every batch up to this one is in the backup's queue and
            # recovered from its disk (an ack covers the channel's earlier batches too).
            disk = _on_disk(journal.directory)
            for (queue, number), bodies in carried.items():
                if queue == name and number <= tag:
                    for body in bodies:
                        assert body in disk.get(queue, []), f"{body!r} acked, not on disk"
            acked.append((name, tag))

        return ack

    def deliver(name: str) -> None:
        while (batch := subscriptions[name].next_batch()) is not None:
            tag, body = batch
            events = decode_batch(body)
            carried[(name, tag)] = [e.body for e in events if isinstance(e, Enqueue)]
            appended = journal.appended
            replicators[name].apply(events)
            batch_acks.applied(replicators[name], ack_of(name), tag, journal.appended != appended)

    async def settle() -> None:
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        journal.after_durable(written.set_result)
        assert await written

    deliver("q1")  # the transaction's part on q1, then the plain message behind it
    assert [bodies for (q, _), bodies in carried.items()] == [[b"tx-0"], [b"plain"]]
    # Nothing applied, nothing written by the plain message's batch: the link acknowledged
    # it at once before (disk.appended unchanged, no ack waiting for the disk).
    assert journal.appended == 2  # the two queues' records only
    await settle()
    assert acked == [] and batch_acks.held == 2
    assert [e.message.body for e in backup.queues["q1"].snapshot()] == []

    deliver("q2")  # the transaction is whole: applied, written, then every batch acked
    await settle()
    assert sorted(acked) == sorted(carried)
    assert batch_acks.held == 0 and batch_acks.durable_waiting == 0
    assert _on_disk(journal.directory) == {"q1": [b"tx-0", b"plain"], "q2": [b"tx-1"]}
    assert await journal.close()


def test_a_plain_message_behind_a_staged_transaction_is_acked_once_applied_and_durable() -> None:
    saved = TxMark._next_id
    try:
        with tempfile.TemporaryDirectory() as directory:
            asyncio.run(_plain_behind_a_staged_transaction(Path(directory)))
    finally:
        TxMark._next_id = saved


# -- any interleaving --------------------------------------------------------------------------


class ModelDisk:
    """The journal's ``after_durable`` contract: a callback runs once everything appended
    before it was registered is durable; :meth:`flush` makes the oldest so."""

    def __init__(self, applied: Callable[[], set[tuple[str, bytes]]]) -> None:
        self._applied = applied
        self.durable: set[tuple[str, bytes]] = set()
        self._callbacks: list[tuple[set[tuple[str, bytes]], Callable[[bool], None]]] = []

    def after_durable(self, callback: Callable[[bool], None]) -> None:
        self._callbacks.append((self._applied(), callback))

    def flush(self, count: int) -> None:
        for _ in range(min(count, len(self._callbacks))):
            applied, callback = self._callbacks.pop(0)
            self.durable |= applied
            callback(True)


@given(workloads, st.integers(1, 4), st.randoms(use_true_random=False), st.booleans())
@settings(max_examples=150, deadline=None)
def test_any_interleaving_acknowledges_only_applied_and_durable_messages_in_order(
    workload: list[tuple[str, list[str]]], batch_events: int, rnd: random.Random, cut: bool
) -> None:
    saved = TxMark._next_id
    try:
        _interleaving(workload, batch_events, rnd, cut)
    finally:
        TxMark._next_id = saved


def _interleaving(
    workload: list[tuple[str, list[str]]], batch_events: int, rnd: random.Random, cut: bool
) -> None:
    link = Link(max_batch_events=batch_events)
    for name in QUEUES:
        link.subscribe(name)
    for number, (kind, routes) in enumerate(workload):
        if kind == "tx":
            link.commit(number, routes)
        else:
            link.publish(routes[0], f"p{number}".encode())

    def applied() -> set[tuple[str, bytes]]:
        return {(name, body) for name in QUEUES for body in link.visible(name)}

    disk = ModelDisk(applied)
    batch_acks = BatchAcks(disk.after_durable, lambda reason: None)
    carried: dict[str, list[tuple[int, list[bytes]]]] = {name: [] for name in QUEUES}
    acked: dict[str, int] = {name: 0 for name in QUEUES}

    def ack_of(name: str) -> Callable[[int], None]:
        def ack(tag: int) -> None:
            assert tag > acked[name], "acknowledgements out of order"
            acked[name] = tag
            for number, bodies in carried[name]:
                if number <= tag:  # one multiple ack covers every earlier batch
                    for body in bodies:
                        assert (name, body) in disk.durable, f"{name} {body!r}: not durable"

        return ack

    queued: dict[str, list[tuple[int, bytes]]] = {name: [] for name in QUEUES}
    for name in QUEUES:
        sub = link.subs[name]
        while (batch := sub.next_batch()) is not None:
            queued[name].append(batch)
    order = [name for name in QUEUES for _ in queued[name]]
    rnd.shuffle(order)
    if cut:  # the primary dies: some batches never arrive
        order = order[: rnd.randrange(len(order) + 1)]
    for name in order:
        tag, body = queued[name].pop(0)
        events = decode_batch(body)
        carried[name].append((tag, [e.body for e in events if isinstance(e, Enqueue)]))
        before = applied()
        link.replicators[name].apply(events)
        batch_acks.applied(link.replicators[name], ack_of(name), tag, applied() != before)
        disk.flush(rnd.randrange(3))
    disk.flush(len(order) + 1)
    if not cut:  # everything arrived: everything applied, durable and acknowledged
        assert batch_acks.held == 0
        for name in QUEUES:
            assert acked[name] == (carried[name][-1][0] if carried[name] else 0)
            assert link.visible(name) == link.primary_bodies(name)
