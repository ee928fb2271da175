"""ha-queue-replication: the copy acknowledges a batch only once applied and on its disk.

The source's publisher confirms wait for a connected copy (its queue stream guards them), so
a confirm promises the copy has the message; on a copy with a store and a durable local
queue, that it has it on disk (as a cluster backup's acknowledgement does,
:class:`~broker.ha.queue_replicator.BatchAcks`). The copy is SIGKILLed the moment the last
confirm arrives: its store recovers every confirmed message. Before, the copy acknowledged
each batch as soon as it was applied, with the records still in its journal's write buffer.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pika
import pytest

from broker.store.journal import Journal
from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.ha.cluster import http
from tests.ha.test_remote_queue_replication import ARGS, replicate

PERSISTENT = pika.BasicProperties(delivery_mode=2)
MESSAGES = 300


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "created-by-replicate"])
def test_a_confirm_means_the_copy_has_the_message_on_its_disk(
    tmp_path: Path, declared: bool
) -> None:
    """The local queue declared durable by the operator first, or created by replicate
    itself: on a broker with a store that copy is durable too (a copy exists to keep)."""
    source = BrokerProcess(tmp_path / "source", args=ARGS).start()
    copy = BrokerProcess(
        tmp_path / "copy", args=[*ARGS, f"--data-dir={tmp_path / 'copy' / 'data'}"]
    ).start()
    try:
        if declared:
            local = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", copy.port))
            local.channel().queue_declare("orders", durable=True)  # the copy keeps it on disk
            local.close()
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", source.port))
        channel = connection.channel()
        channel.queue_declare("orders", durable=True)
        replicate(copy, "orders", source)

        def caught_up() -> bool:
            (status,) = http("GET", copy.mgmt_port, "/api/ha/replications")
            return bool(status["connected"] and status["caught_up"])

        poll_until(caught_up, 10, "the copy to catch up")
        channel.confirm_delivery()
        for i in range(MESSAGES):
            channel.basic_publish("", "orders", f"m{i}".encode(), PERSISTENT)
        copy.stop(signal.SIGKILL)  # at the last confirm: what it promised is on the disk
        connection.close()
        shutil.copytree(tmp_path / "copy" / "data", tmp_path / "copy-data")
        state = Journal(tmp_path / "copy-data").recover()
        stored = {
            q.record.name: [state.messages[m.message_id].body for m in q.messages]
            for q in state.queues
        }
        assert stored["orders"] == [f"m{i}".encode() for i in range(MESSAGES)]
    finally:
        copy.stop()
        source.stop()
