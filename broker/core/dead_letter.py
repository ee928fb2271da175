"""Dead-lettering, sans-I/O: the copy of a dropped message that goes to its queue's
dead-letter exchange, with RabbitMQ's ``x-death`` headers, and its cycle rule.

The virtual host routes the copy (:meth:`broker.core.vhost.VirtualHost._dead_letter`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from broker.core import properties
from broker.core.message import Message
from broker.core.queue import REASON_REJECTED


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
