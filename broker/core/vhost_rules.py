"""The rules a virtual host applies that need no state: its built-in exchanges, which queue
arguments make two declarations equivalent, the equivalence checks of a declaration again
and how an inequivalence is worded (RabbitMQ's words). Split from :mod:`broker.core.vhost`,
which imports them back.

THREAD SAFE: constants and pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.core.errors import precondition_failed
from broker.core.exchange import Exchange
from broker.core.queue import Queue

VHOST = "/"

#: Exchanges every broker has, never replicated (seed 001, 1.12.7).
BUILTIN_EXCHANGES = {
    "amq.direct": "direct",
    "amq.fanout": "fanout",
    "amq.topic": "topic",
    "amq.match": "headers",
    "amq.headers": "headers",
}

#: Queue arguments compared when a queue is declared again (RabbitMQ's list).
EQUIVALENCE_ARGS = (
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-priority",
    "x-single-active-consumer",
)


@dataclass(frozen=True, slots=True)
class PublishResult:
    """Where a publish went: routed to ``queues`` queues, refused by ``rejected`` of them."""

    queues: int
    rejected: int

    @property
    def routed(self) -> bool:
        return self.queues > 0


def where(vhost: str, what: str) -> str:
    """``what`` (``queue 'q'``), and its vhost unless it is ``/``, for a refusal's text."""
    return what if vhost == VHOST else f"{what} in vhost '{vhost}'"


def flag(value: bool) -> str:
    return "true" if value else "false"


def shown(value: object) -> str:
    """A value in an inequivalence message, as RabbitMQ words it ('none' when unset)."""
    return "none" if value is None else f"'{value}'"


def check_exchange_equivalent(
    vhost: str,
    existing: Exchange,
    type: str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: dict[str, Any],
) -> None:
    """exchange.declare of an existing exchange: 406 unless it is equivalent."""
    for field, received, current in (
        ("type", type, existing.type),
        ("durable", flag(durable), flag(existing.durable)),
        ("auto_delete", flag(auto_delete), flag(existing.auto_delete)),
        ("internal", flag(internal), flag(existing.internal)),
        (
            "alternate-exchange",
            arguments.get("alternate-exchange"),
            existing.arguments.get("alternate-exchange"),
        ),
    ):
        if received != current:
            raise precondition_failed(
                f"inequivalent arg '{field}' for exchange '{existing.name}' in vhost"
                f" '{vhost}': received {shown(received)} but current is"
                f" {shown(current)}"
            )


def check_queue_equivalent(
    vhost: str,
    queue: Queue,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: dict[str, Any],
) -> None:
    """queue.declare of an existing queue: 406 unless it is equivalent (RabbitMQ's
    fields and :data:`EQUIVALENCE_ARGS`)."""
    checks: list[tuple[str, object, object]] = [
        ("durable", flag(durable), flag(queue.durable)),
        ("exclusive", flag(exclusive), flag(queue.exclusive_owner is not None)),
        ("auto_delete", flag(auto_delete), flag(queue.auto_delete)),
    ]
    for arg in EQUIVALENCE_ARGS:
        checks.append((arg, arguments.get(arg), queue.arguments.get(arg)))
    for field, received, current in checks:
        if received != current:
            raise precondition_failed(
                f"inequivalent arg '{field}' for queue '{queue.name}' in vhost"
                f" '{vhost}': received {shown(received)} but current is"
                f" {shown(current)}"
            )
