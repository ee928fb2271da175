"""The rules a virtual host applies that need no state: its built-in exchanges, which queue
arguments make two declarations equivalent, and how an inequivalence is worded (RabbitMQ's
words). Split from :mod:`broker.core.vhost`, which imports them back.

THREAD SAFE: constants and pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def flag(value: bool) -> str:
    return "true" if value else "false"


def shown(value: object) -> str:
    """A value in an inequivalence message, as RabbitMQ words it ('none' when unset)."""
    return "none" if value is None else f"'{value}'"
