"""Dead-lettering, sans-I/O: the copy of a dropped message that goes to its queue's
dead-letter exchange, with RabbitMQ's ``x-death`` headers, and its cycle rule.

:class:`DeadLetters`, owned by the virtual host, routes the copy through the host's
exchanges (given as plain callables: it never imports the host).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from broker.core import properties
from broker.core.exchange import Exchange
from broker.core.message import Entry, Message
from broker.core.queue import REASON_REJECTED, Queue

#: Dead letters of dead letters (a DLX whose queues dead-letter again) stop this deep.
MAX_DEPTH = 8


def is_cycle(queue_name: str, deaths: list[Any]) -> bool:
    """RabbitMQ's rule: ``x-death`` (newest first) shows the message died in the queue
    before, and none of the deaths since, that one included, was a rejection."""
    for death in deaths:
        if not isinstance(death, dict) or death.get("reason") == REASON_REJECTED:
            return False
        if death.get("queue") == queue_name:
            return True
    return False


def dead_letter_copy(
    original: Message,
    queue_name: str,
    reason: str,
    dlx_name: str,
    routing_key: str,
    wall_time: float,
) -> tuple[Message, list[Any]]:
    """The message to publish to ``dlx_name`` for ``original`` dropped from ``queue_name``
    (``x-death`` updated, newest first; per-message TTL removed), and its deaths."""
    try:
        props = properties.decode(original.properties_raw)
    except ValueError:  # undecodable properties: dead-letter with x-death alone
        props = properties.decode(properties.EMPTY)
    headers: dict[str, Any] = dict(props.headers or {})
    previous = headers.get("x-death")
    deaths: list[Any] = list(previous) if isinstance(previous, list) else []
    for death in deaths:
        if (
            isinstance(death, dict)
            and death.get("queue") == queue_name
            and death.get("reason") == reason
        ):
            count = death.get("count", 1)
            death["count"] = (count if isinstance(count, int) else 1) + 1
            deaths.remove(death)
            deaths.insert(0, death)
            break
    else:
        first: dict[str, Any] = {
            "count": 1,
            "reason": reason,
            "queue": queue_name,
            "time": datetime.fromtimestamp(int(wall_time), UTC),
            "exchange": original.exchange,
            "routing-keys": [original.routing_key],
        }
        if props.expiration is not None:
            # The per-message TTL goes (a dead letter does not expire again by it).
            first["original-expiration"] = props.expiration
        deaths.insert(0, first)
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue_name)
    headers.setdefault("x-first-death-exchange", original.exchange)
    props.headers = headers
    props.expiration = None
    return Message(dlx_name, routing_key, properties.encode(props), original.body), deaths


class DeadLetters:
    """A virtual host's dead-lettering: a dropped message's copy published to its queue's
    dead-letter exchange (RabbitMQ's rules: routing key, ``x-death``, cycles dropped)."""

    def __init__(
        self,
        exchanges: Mapping[str, Exchange],
        route: Callable[[Exchange, Message], list[Queue]],
        publish: Callable[[Exchange, Message], object],
        wall_clock: Callable[[], float],
    ) -> None:
        self._exchanges = exchanges
        self._route = route
        self._publish = publish
        self._wall_clock = wall_clock
        self._depth = 0
        #: copies published so far (``qpidd_messages_dead_lettered_total``)
        self.total = 0

    def dead_letter(self, queue: Queue, entry: Entry, reason: str) -> None:
        """``entry`` left ``queue`` for ``reason``: its copy to the queue's DLX, if any."""
        dlx_name = queue.limits.dead_letter_exchange
        if dlx_name is None:
            return
        exchange = self._exchanges.get(dlx_name)
        if exchange is None or self._depth >= MAX_DEPTH:
            return
        original = entry.message
        routing_key = queue.limits.dead_letter_routing_key
        if routing_key is None:
            routing_key = original.routing_key
        message, deaths = dead_letter_copy(
            original, queue.name, reason, dlx_name, routing_key, self._wall_clock()
        )
        # A queue the message already died in, with no client rejection since, is a
        # dead-letter cycle: RabbitMQ drops the message for that queue (and only that one).
        targets = self._route(exchange, message) if reason != REASON_REJECTED else []
        cyclic = any(is_cycle(q.name, deaths) for q in targets)
        if cyclic:
            targets = [q for q in targets if not is_cycle(q.name, deaths)]
            if not targets:
                return
        self.total += 1
        self._depth += 1
        try:
            if cyclic:
                for target in targets:
                    target.enqueue(message)
            else:
                self._publish(exchange, message)
        finally:
            self._depth -= 1
