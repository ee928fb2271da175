"""Under a resource alarm an AMQP 1.0 publisher gets no credit, and gets it back when the
alarm clears (docs/amqp-1-0.md, "No credit under a resource alarm"): a real qpidd whose
memory alarm a pika publisher raises, a real Proton sender attached meanwhile."""

from __future__ import annotations

import contextlib
import threading
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
    filling: threading.Thread | None = None
    stop_filling = threading.Event()
    try:
        filler = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = filler.channel()
        channel.queue_declare("a-big")
        body = b"m" * MIB

        def fill() -> None:
            # On a thread of its own: once the alarm is raised the broker stops reading this
            # connection, and the publish being written then (1 MiB, more than the socket's
            # buffers) blocks until the alarm clears; the test reads the broker's log.
            with contextlib.suppress(Exception):  # the broker stopped at the test's end
                while not stop_filling.is_set():
                    channel.basic_publish("", "a-big", body)

        filling = threading.Thread(target=fill, name="filler", daemon=True)
        filling.start()
        poll_until(lambda: bool(_raised(broker)), 60, "the memory alarm")
        stop_filling.set()  # the publish blocked now is the filler's last
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
        stop_filling.set()
        broker.stop()
        if filling is not None:
            filling.join(30)  # its blocked write fails once the broker is gone
        for connection in (proton, filler):
            if connection is not None:
                with contextlib.suppress(Exception):  # the broker is gone: whatever it says
                    connection.close()


pytestmark = pytest.mark.timeout(120)
