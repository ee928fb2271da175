"""The receiver's outcomes with a real client (Qpid Proton's event API) on a real broker:
``released`` and ``modified`` put the message back (it comes again with
``delivery-count`` >= 1), ``rejected`` and ``modified`` with ``undeliverable-here``
dead-letter it where the queue says (0-9-1's requeue and reject without requeue,
docs/amqp-1-0.md). The dead letters are read back with pika."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from proton import Delivery, Link, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.xdist_group("amqp10_proton")


class Outcomes(MessagingHandler):
    """Takes one message at a time; the first time it sees m0 it releases it, m1 it
    modifies it (delivery failed), m2 it rejects it, m3 it modifies it as undeliverable
    here; a message seen again is accepted. Closes after six deliveries (or 20 s)."""

    def __init__(self, url: str, address: str) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.address = url, address
        self.seen: list[tuple[str, int, bool]] = []
        self.connection: Any = None
        self.receiver: Any = None
        self.timer: Any = None

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url, allowed_mechs="PLAIN")
        self.receiver = event.container.create_receiver(self.connection, self.address)
        self.receiver.flow(1)
        self.timer = event.container.schedule(20, self)

    def on_timer_task(self, event: Any) -> None:
        self.connection.close()  # a hung exchange ends here; the asserts say what lacked

    def on_message(self, event: Any) -> None:
        message, delivery = event.message, event.delivery
        body = bytes(message.body).decode()
        again = any(seen == body for seen, _, _ in self.seen)
        self.seen.append((body, message.delivery_count, message.first_acquirer))
        if again:
            self.accept(delivery)
        elif body == "m0":
            self.release(delivery, delivered=False)  # released
        elif body == "m1":
            delivery.local.failed = True
            self.settle(delivery, Delivery.MODIFIED)
        elif body == "m2":
            self.reject(delivery)
        else:
            delivery.local.undeliverable = True
            self.settle(delivery, Delivery.MODIFIED)
        if len(self.seen) == 6:
            self.timer.cancel()
            self.connection.close()
        else:
            self.receiver.flow(1)


def test_released_modified_and_rejected_requeue_or_dead_letter(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        channel.queue_declare("o-dead")
        channel.queue_declare(
            "o-work",
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "o-dead"},
        )
        for i in range(4):
            channel.basic_publish("", "o-work", f"m{i}".encode())
        handler = Outcomes(f"amqp://guest:guest@127.0.0.1:{broker.port}", "o-work")
        Container(handler).run()
        # (a requeued message goes back to its place; whether it comes before the next
        # one depends on whether the client's flow or its disposition arrives first)
        by_body: dict[str, list[tuple[int, bool]]] = {}
        for body, count, first in handler.seen:
            by_body.setdefault(body, []).append((count, first))
        assert sorted(by_body) == ["m0", "m1", "m2", "m3"], handler.seen
        for requeued in ("m0", "m1"):  # released, modified: back, and said so
            (count0, first0), (count1, first1) = by_body[requeued]
            assert (count0, first0) == (0, True) and count1 >= 1 and first1 is False
        assert by_body["m2"] == by_body["m3"] == [(0, True)]
        dead: list[bytes] = []
        for _ in range(2):
            method, _props, body = channel.basic_get("o-dead", auto_ack=True)
            assert method is not None, dead
            dead.append(body)
        assert dead == [b"m2", b"m3"]
        assert channel.queue_declare("o-work", passive=True).method.message_count == 0
        channel.queue_delete("o-work")
        channel.queue_delete("o-dead")
    finally:
        connection.close()


class SettleSecond(LinkOption):
    """The sender asks for ``rcv-settle-mode`` second."""

    def apply(self, link: Any) -> None:
        link.rcv_settle_mode = Link.RCV_SECOND


class SecondSender(MessagingHandler):
    """Sends three messages with ``rcv-settle-mode`` second: each outcome comes
    unsettled, and the client settles it (MessagingHandler's auto-settle)."""

    def __init__(self, url: str, address: str) -> None:
        super().__init__()
        self.url, self.address = url, address
        self.accepted: list[bool] = []  # the broker had settled it?
        self.mode: Any = None
        self.sent = 0

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url, allowed_mechs="PLAIN")
        event.container.create_sender(self.connection, self.address, options=SettleSecond())
        self.timer = event.container.schedule(20, self)

    def on_timer_task(self, event: Any) -> None:
        self.connection.close()

    def on_sendable(self, event: Any) -> None:
        self.mode = event.sender.remote_rcv_settle_mode
        while event.sender.credit and self.sent < 3:
            event.sender.send(Message(body=b"s%d" % self.sent, inferred=True))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted.append(event.delivery.settled)  # remotely settled
        if len(self.accepted) == 3:
            self.timer.cancel()
            self.connection.close()


def test_rcv_settle_mode_second_outcomes_come_unsettled(broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        channel.queue_declare("o-second")
        handler = SecondSender(f"amqp://guest:guest@127.0.0.1:{broker.port}", "o-second")
        Container(handler).run()
        assert handler.mode == Link.RCV_SECOND
        assert handler.accepted == [False, False, False]
        bodies: list[bytes] = []
        for _ in range(3):
            method, _props, body = channel.basic_get("o-second", auto_ack=True)
            assert method is not None, bodies
            bodies.append(body)
        assert bodies == [b"s0", b"s1", b"s2"]
        channel.queue_delete("o-second")
    finally:
        connection.close()
