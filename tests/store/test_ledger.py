"""The ledger: what a running store counts live is what recovery finds live, and the
compaction rule (sans-I/O, plus a real directory for the comparison)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.store.journal import Journal, SyncPolicy
from broker.store.ledger import Ledger
from broker.store.message_store import MessageStore
from tests.store.queue_ops import apply_queue_op, history_step

PERSISTENT = bytes.fromhex("1000") + b"\x02"

operations = st.lists(history_step, max_size=60)


def live_counts(ledger: Ledger) -> dict[int, int]:
    return {n: use.live for n, use in ledger.segments.items() if use.live}


@settings(max_examples=15, deadline=None)
@given(operations)
def test_running_and_recovered_ledgers_agree(ops: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)

        async def scenario() -> dict[int, int]:
            journal = Journal(path, sync=SyncPolicy.WRITE)
            state = journal.recover()
            vhost = VirtualHost()
            MessageStore(journal, vhost).recover_into(state)
            journal.start()
            vhost.declare_exchange("fan", "fanout", durable=True)
            for name in ("a", "b"):
                vhost.declare_queue(name, durable=True)
                vhost.bind(name, "fan", "")
            for i, (op, name) in enumerate(ops):
                if op == "publish":
                    exchange = "fan" if name == "fan" else ""
                    message = Message(exchange, name, PERSISTENT, b"%d" % i)
                    vhost.publish(vhost.exchange(exchange), message)
                    continue
                apply_queue_op(vhost, op, name)
            counts = live_counts(journal.ledger)
            assert await journal.close()
            return counts

        running = asyncio.run(scenario())
        recovered = Journal(path).recover().ledger
        assert live_counts(recovered) == running


def test_compaction_candidate_is_the_oldest_mostly_dead_segment() -> None:
    ledger = Ledger()
    for segment in (1, 2, 3):
        ledger.opened(segment)
        ledger.written(segment, 10)
    ledger.message_written(100, 1)
    ledger.enqueued((7, 100), 1)
    for i in range(8):
        ledger.config_created(200 + i, 2)
    assert ledger.compaction_candidate(current=3) == 1  # 2 of 10 live
    assert ledger.compaction_candidate(current=1) is None  # never the one being written
    ledger.moved(8, (7, 100), 1, 3)  # ENQUEUE copied forward
    ledger.moved(7, (100,), 1, 3)  # MESSAGE copied forward
    assert ledger.segments[1].live == 0 and ledger.segments[3].live == 2
    ledger.removed(1)
    assert ledger.compaction_candidate(current=3) is None  # 8 of 10 live in segment 2
    ledger.dequeued((7, 100))
    assert ledger.segments[3].live == 0 and not ledger.has_message(100)
