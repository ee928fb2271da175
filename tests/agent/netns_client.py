"""An AMQP client (pika) for the network-namespace tests, run inside the client's namespace.

``python netns_client.py HOST QUEUE`` reads commands on stdin, one a line, and answers each
with one JSON line on stdout:

- ``publish N TIMEOUT``: N more numbered messages with publisher confirms, reconnecting to
  HOST:5672 (the virtual IP) until TIMEOUT seconds have passed; answers
  ``{"confirmed": [...], "reconnects": R, "broker": ID, "took": S}`` (every confirmed
  number so far, the broker id of the connection that confirmed the last one).
- ``drain TIMEOUT``: get every message of the queue; ``{"received": [...], "broker": ID}``.
- ``quit``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pika
import pika.exceptions

from common.polling import retry_until


def confirming_channel(connection: pika.BlockingConnection, queue: str) -> Any:
    """A channel of ``connection`` with the durable ``queue`` declared and publisher
    confirms on (also used by tests/agent/test_agent_failover.py)."""
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    return channel


class Client:
    def __init__(self, host: str, queue: str) -> None:
        self.params = pika.ConnectionParameters(
            host, 5672, connection_attempts=1, socket_timeout=2, blocked_connection_timeout=5
        )
        self.queue = queue
        self.sent = 0
        self.confirmed: list[int] = []
        self.reconnects = -1
        self.connection: pika.BlockingConnection | None = None
        self.channel: Any = None
        self.broker: str | None = None

    def _connect(self, deadline: float) -> None:
        def attempt() -> None:
            self.connection = pika.BlockingConnection(self.params)
            self.channel = confirming_channel(self.connection, self.queue)
            properties = getattr(self.connection._impl, "server_properties", None) or {}
            broker_id = properties.get("qpid.ha-broker-id")
            self.broker = None if broker_id is None else str(broker_id)
            self.reconnects += 1

        # 50 ms back-off between connection attempts. ValueError: pika's word for a socket
        # reset between the TCP connect and its getpeername() ("Expected connected socket"),
        # as when the old primary is SIGKILLed with this connection in its accept queue.
        retry_until(
            attempt, deadline, (pika.exceptions.AMQPError, OSError, ValueError), interval=0.05
        )

    def publish(self, count: int, timeout: float) -> dict[str, Any]:
        began = time.monotonic()
        deadline = began + timeout
        done = 0
        while done < count:
            if self.channel is None:
                self._connect(deadline)
            number = self.sent
            self.sent += 1
            try:
                self.channel.basic_publish(
                    "", self.queue, str(number).encode(), pika.BasicProperties(delivery_mode=2)
                )
            except (pika.exceptions.AMQPError, OSError):
                self.channel = None  # unconfirmed: may or may not be there
                continue
            self.confirmed.append(number)
            done += 1
        return {
            "confirmed": self.confirmed,
            "reconnects": self.reconnects,
            "broker": self.broker,
            "took": round(time.monotonic() - began, 3),
        }

    def drain(self, timeout: float) -> dict[str, Any]:
        if self.channel is None:
            self._connect(time.monotonic() + timeout)
        received: list[int] = []
        while True:
            method, _props, body = self.channel.basic_get(self.queue, auto_ack=True)
            if method is None:
                return {"received": received, "broker": self.broker}
            received.append(int(body))


def main() -> None:
    client = Client(sys.argv[1], sys.argv[2])
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "publish":
            answer = client.publish(int(words[1]), float(words[2]))
        elif words[0] == "drain":
            answer = client.drain(float(words[1]))
        else:
            answer = {"error": f"unknown command {words[0]!r}"}
        print(json.dumps(answer), flush=True)
    if client.connection is not None and client.connection.is_open:
        client.connection.close()


if __name__ == "__main__":
    main()
