"""Under a resource alarm an AMQP 1.0 publisher gets no credit, and gets it back when the
alarm clears (docs/amqp-1-0.md, "No credit under a resource alarm"): a real qpidd whose
memory alarm a pika publisher raises, a real Proton sender attached meanwhile."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pika
import pytest
from proton import Message
from proton.utils import BlockingConnection

from common.polling import poll_until
from tests.broker_process import BrokerProcess

MIB = 1024 * 1024


def _raised(broker: BrokerProcess) -> list[dict[str, Any]]:
    return [e for e in broker.events() if e["event"] == "resource_alarm_raised"]


def test_a_sender_attached_during_a_memory_alarm_gets_credit_once_it_clears(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "qpidd", ["--max-memory=150MB"]).start(timeout=40)
    filler: Any = None
    proton: Any = None
    try:
        filler = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = filler.channel()
        channel.queue_declare("a-big")
        body = b"m" * MIB

        def fill_until_raised() -> bool:
            channel.basic_publish("", "a-big", body)
            filler.process_data_events(time_limit=0)
            return bool(_raised(broker))

        poll_until(fill_until_raised, 60, "the memory alarm", interval=0)
        proton = BlockingConnection(
            f"amqp://guest:guest@127.0.0.1:{broker.port}", allowed_mechs="PLAIN", timeout=15
        )
        sender = proton.create_sender("a-big")  # attached while the alarm is raised
        # The broker's attach and its flow (of no credit) are in: a round trip on the same
        # connection (a receiver's attach) comes after them.
        proton.create_receiver("a-big", credit=0).close()
        assert sender.link.credit == 0
        # The alarm clears once the queue is purged (a 0-9-1 client on another connection:
        # the broker reads it, it is no publisher); the sender gets its credit.
        cleaner = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            cleaner.channel().queue_purge("a-big")
        finally:
            cleaner.close()
        proton.wait(lambda: sender.link.credit > 0, timeout=30, msg="credit after the alarm")
        sender.send(Message(body="after", durable=True), timeout=15)  # accepted
    finally:
        # the broker first: a client's close waits for the broker's answer, and a blocked
        # publisher's is never read while the alarm lasts (a failed assert above)
        broker.stop()
        for connection in (proton, filler):
            if connection is not None:
                with contextlib.suppress(Exception):  # the broker is gone: whatever it says
                    connection.close()


pytestmark = pytest.mark.timeout(120)
