"""AMQP 1.0 transactions (the coordinator) with a real client, Qpid Proton's event API
(``Container.declare_transaction``, ``TransactionHandler``, as its tx_send and tx_recv
examples use them), against a real broker:

- a transactional send: nothing reaches the queue before the commit; committed, the
  three messages are there (read back with pika); a second transaction's two messages,
  aborted, never are;
- a transactional receive: three messages accepted in a transaction stay with the
  receiver until the commit, which removes them for good; two accepted in a transaction
  that is aborted come back to the queue (Proton releases them).
"""

from __future__ import annotations

from typing import Any

import pika
import pytest
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

from tests.amqp10.helpers import declare
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.xdist_group("amqp10_proton")


def url(broker: BrokerProcess) -> str:
    return f"amqp://guest:guest@127.0.0.1:{broker.port}"


def queue_bodies(broker: BrokerProcess, queue: str) -> list[bytes]:
    """The messages on ``queue`` (taken with basic.get and requeued: left as they are)."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        bodies: list[bytes] = []
        while True:
            method, _, body = channel.basic_get(queue)
            if method is None:
                return bodies
            bodies.append(body)
    finally:
        connection.close()  # the gets are requeued


class TxSend(MessagingHandler, TransactionHandler):
    """Sends t0..t2 in a transaction and commits; then t3, t4 in another and aborts.
    ``events`` says what happened, in order, with the queue's depth seen by pika
    before each commit."""

    def __init__(self, broker: BrokerProcess, queue: str) -> None:
        super().__init__()
        self.broker, self.queue = broker, queue
        self.events: list[Any] = []
        self.sent = 0
        self.txn: Any = None
        self.sender: Any = None
        self.connection: Any = None

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(url(self.broker), allowed_mechs="PLAIN")
        self.sender = event.container.create_sender(self.connection, self.queue)
        event.container.declare_transaction(self.connection, handler=self)
        self.timer = event.container.schedule(20, self)

    def on_timer_task(self, event: Any) -> None:
        self.connection.close()  # a hung exchange ends here; the asserts say what lacked

    def on_transaction_declared(self, event: Any) -> None:
        self.txn = event.transaction
        self.events.append("declared")
        self._send()

    def on_sendable(self, event: Any) -> None:
        self._send()

    def _send(self) -> None:
        batch = 3 if len(self.events) < 3 else 5
        while self.txn is not None and self.sender.credit and self.sent < batch:
            body = f"t{self.sent}".encode()
            self.txn.send(self.sender, Message(body=body, durable=True, inferred=True))
            self.sent += 1
        if self.txn is not None and self.sent == batch:
            txn, self.txn = self.txn, None
            self.events.append(("before", len(queue_bodies(self.broker, self.queue))))
            if batch == 3:
                txn.commit()
            else:
                txn.abort()

    def on_transaction_committed(self, event: Any) -> None:
        self.events.append("committed")
        event.container.declare_transaction(self.connection, handler=self)

    def on_transaction_aborted(self, event: Any) -> None:
        self.events.append("aborted")
        self.timer.cancel()
        self.connection.close()


class TxReceive(MessagingHandler, TransactionHandler):
    """Receives three messages and accepts them in a transaction, commits; then two in
    another, aborts."""

    def __init__(self, broker: BrokerProcess, queue: str) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.broker, self.queue = broker, queue
        self.events: list[Any] = []
        self.received: list[bytes] = []
        self.txn: Any = None
        self.receiver: Any = None
        self.connection: Any = None
        self.batch = 3

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(url(self.broker), allowed_mechs="PLAIN")
        self.receiver = event.container.create_receiver(self.connection, self.queue)
        event.container.declare_transaction(self.connection, handler=self)
        self.timer = event.container.schedule(20, self)

    def on_timer_task(self, event: Any) -> None:
        self.connection.close()

    def on_transaction_declared(self, event: Any) -> None:
        self.txn = event.transaction
        self.taken = 0
        self.receiver.flow(self.batch)

    def on_message(self, event: Any) -> None:
        self.received.append(bytes(event.message.body))
        assert self.txn is not None
        self.txn.accept(event.delivery)
        self.taken += 1
        if self.taken == self.batch:
            # accepted in the transaction, not yet committed: still the receiver's
            self.events.append(("held", len(queue_bodies(self.broker, self.queue))))
            if self.batch == 3:
                self.txn.commit()
            else:
                self.txn.abort()

    def on_transaction_committed(self, event: Any) -> None:
        self.events.append("committed")
        self.batch = 2
        event.container.declare_transaction(self.connection, handler=self)

    def on_transaction_aborted(self, event: Any) -> None:
        self.events.append("aborted")
        self.timer.cancel()
        self.connection.close()


def test_transactional_send_committed_and_aborted(broker: BrokerProcess) -> None:
    declare(broker, "tx-send")
    handler = TxSend(broker, "tx-send")
    Container(handler).run()
    assert handler.events == [
        "declared", ("before", 0), "committed", "declared", ("before", 3), "aborted",
    ]  # fmt: skip
    assert queue_bodies(broker, "tx-send") == [b"t0", b"t1", b"t2"]


def test_transactional_receive_committed_and_aborted(broker: BrokerProcess) -> None:
    declare(broker, "tx-recv")
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        for i in range(5):
            channel.basic_publish("", "tx-recv", f"r{i}".encode())
    finally:
        connection.close()
    handler = TxReceive(broker, "tx-recv")
    Container(handler).run()
    assert handler.events == [("held", 2), "committed", ("held", 0), "aborted"]
    assert handler.received == [b"r0", b"r1", b"r2", b"r3", b"r4"]
    assert queue_bodies(broker, "tx-recv") == [b"r3", b"r4"]  # aborted: back
