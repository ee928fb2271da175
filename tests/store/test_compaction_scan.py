"""A compaction pass copies exactly the records the ledger says are live in its segment: the
pass's scan (one dict get a record, broker/store/compaction.py) against
:meth:`Ledger.is_live` record by record, over random publish/consume/purge/delete
histories, with reads and steps cut small so records straddle reads and steps."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings

from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.store import compaction
from broker.store.compaction import CompactionPass, Steps, leading_ids
from broker.store.journal import Journal, SyncPolicy
from broker.store.message_store import MessageStore
from broker.store.records import iter_records
from broker.store.segment_files import list_segments, segment_path
from tests.store.queue_ops import apply_queue_op
from tests.store.test_ledger import PERSISTENT, operations


@settings(max_examples=20, deadline=None)
@given(operations)
def test_a_pass_copies_exactly_the_live_records(ops: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(compaction, "READ_BYTES", 97)  # records straddle reads
        path = Path(tmp)

        async def scenario() -> tuple[
            list[tuple[int, tuple[int, ...]]], list[tuple[int, tuple[int, ...]]]
        ]:
            journal = Journal(path, sync=SyncPolicy.WRITE, segment_bytes=2048)
            state = journal.recover()
            vhost = VirtualHost()
            MessageStore(journal, vhost).recover_into(state)
            patch.setattr(journal, "_maybe_compact", lambda: None)  # the test runs the pass
            journal.compaction_steps = Steps(records=3, bytes=300, backlog=1 << 20)
            journal.start()
            vhost.declare_exchange("fan", "fanout", durable=True)
            for name in ("a", "b"):
                vhost.declare_queue(name, durable=True)
                vhost.bind(name, "fan", "")
            for i, (op, name) in enumerate(ops):
                if op == "publish":
                    exchange = "fan" if name == "fan" else ""
                    message = Message(exchange, name, PERSISTENT, b"%d" % i * 40)
                    vhost.publish(vhost.exchange(exchange), message)
                    continue
                apply_queue_op(vhost, op, name)
            written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            journal.after_durable(written.set_result, written=True)
            assert await written
            first = list_segments(journal.directory)[0]
            ledger = journal.ledger
            data = segment_path(journal.directory, first).read_bytes()
            live = []
            for record in iter_records(data):
                assert isinstance(record, tuple)
                pos, _size, kind, _payload = record
                ids = leading_ids(data, pos, kind)
                if ledger.is_live(first, kind, ids):
                    live.append((kind, ids))
            pass_ = CompactionPass(journal, first, segment_path(journal.directory, first))
            assert await pass_.run(journal._reader)
            copied = [(kind, ids) for kind, ids, _segment in pass_.moves]
            assert await journal.close()
            return live, copied

        live, copied = asyncio.run(scenario())
        assert copied == live
