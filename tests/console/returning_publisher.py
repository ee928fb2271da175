"""A client after its primary died, for the console's fail-over test
(tests/console/test_console_browser.py): it dials the members in turn (a backup refuses it
with 530) until one takes it, then publishes with confirms, as the drill does; the new
primary's timeline ends the client outage at its confirm."""

from __future__ import annotations

import threading

import pika

from common.polling import poll_until
from tests.agent.agent_cluster import Node


class ReturningPublisher(threading.Thread):
    """See the module docstring: ``confirmed_on`` the member that confirmed, or ``error``
    (re-raised by the test)."""

    def __init__(self, nodes: list[Node], queue: str) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.queue = queue
        self.confirmed_on: Node | None = None
        self.error: BaseException | None = None

    def attempt(self) -> bool:
        for node in self.nodes:
            parameters = pika.URLParameters(
                f"amqp://guest:guest@127.0.0.1:{node.port}/%2F?connection_attempts=1"
                "&socket_timeout=1&blocked_connection_timeout=5"
            )
            try:
                with pika.BlockingConnection(parameters) as connection:
                    channel = connection.channel()
                    channel.confirm_delivery()
                    channel.queue_declare(self.queue, durable=True)
                    channel.basic_publish("", self.queue, b"back")  # returns once confirmed
            except pika.exceptions.AMQPError:
                continue  # a backup (530), or the old primary's port
            self.confirmed_on = node
            return True
        return False

    def run(self) -> None:
        try:
            poll_until(self.attempt, 30, "a member confirming a publish", interval=0.05)
        except BaseException as exc:  # re-raised by the test
            self.error = exc
