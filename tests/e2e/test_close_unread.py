"""A peer that reads nothing cannot keep a connection the broker is done with.

The shell closes a transport once its connection says so (close_timeout after a client's
connection.close or the broker's, a heartbeat timeout), and a closing transport waits for
its write buffer to drain: a client whose receive window stays shut (it reads nothing, its
process stopped) kept the socket, the connection and what it holds forever. Real qpidd, a
raw socket that reads nothing after its connection.close."""

from __future__ import annotations

import socket
from pathlib import Path

import pika
from pamqp import commands, frame

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.e2e.support import RawClient, connection_events


def test_a_client_that_closes_but_never_reads_is_hung_up_on(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        publisher = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = publisher.channel()
        channel.queue_declare("big")
        for _ in range(300):
            channel.basic_publish("", "big", bytes(100_000))
        publisher.close()
        with RawClient(broker) as client:
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.handshake()
            client.open_channel(1)
            client.send_method(1, commands.Basic.Consume(queue="big", no_ack=True))
            client.send(
                frame.marshal(
                    commands.Connection.Close(
                        reply_code=200, reply_text="bye", class_id=0, method_id=0
                    ),
                    0,
                )
            )
            # The client reads nothing more and keeps its socket open.
            poll_until(
                lambda: connection_events(broker, "connection_closed", client.local_port, 0),
                15,
                "the broker to drop the connection",
            )
    finally:
        broker.stop()
