"""Helpers of the queue tests: queues with an observer, dead-letter recorders, DLX hosts."""

from __future__ import annotations

from typing import Any

from broker.core.message import Entry, Message
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from tests.core.fakes import FakeClock, RecordingObserver, message

WALL = 1_700_000_000.0


class DeadLetters:
    """A queue's dead-letter callback that records (body, reason, position)."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, str, int]] = []

    def __call__(self, queue: Queue, entry: Entry, reason: str) -> None:
        self.calls.append((entry.message.body, reason, entry.position))

    @property
    def bodies(self) -> list[bytes]:
        return [body for body, _, _ in self.calls]

    @property
    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.calls]


def make_queue(
    clock: FakeClock | None = None,
    *,
    dead: DeadLetters | None = None,
    default_limit_bytes: int = 0,
    auto_delete: bool = False,
    **arguments: Any,
) -> tuple[Queue, RecordingObserver]:
    args = {k.replace("_", "-"): v for k, v in arguments.items()}
    if dead is not None:
        args.setdefault("x-dead-letter-exchange", "dlx")
    queue = Queue(
        "q",
        clock=clock or FakeClock(),
        arguments=args,
        dead_letter=dead,
        default_limit_bytes=default_limit_bytes,
        auto_delete=auto_delete,
    )
    observer = RecordingObserver()
    queue.observers.append(observer)
    return queue, observer


def fill(queue: Queue, *bodies: str) -> None:
    for body in bodies:
        assert queue.enqueue(message(body))


def ready(queue: Queue) -> list[bytes]:
    return [entry.message.body for entry in queue.entries()]


# -- dead-lettering through a virtual host -----------------------------------------------
def dlx_vhost(
    clock: FakeClock | None = None, dlx_type: str = "fanout"
) -> tuple[VirtualHost, Queue]:
    vhost = VirtualHost(clock=clock or FakeClock(), wall_clock=lambda: WALL)
    vhost.declare_exchange("dlx", dlx_type)
    dead = vhost.declare_queue("dead")
    vhost.bind("dead", "dlx", "" if dlx_type == "fanout" else "dl")
    return vhost, dead


def publish(vhost: VirtualHost, body: str, routing_key: str, exchange: str = "") -> None:
    vhost.publish(vhost.exchange(exchange), message(body, routing_key, exchange))


def only(queue: Queue) -> Message:
    (entry,) = queue.entries()
    return entry.message
