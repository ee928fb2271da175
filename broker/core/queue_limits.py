"""A queue's limits and dead-lettering, read and checked from its declare arguments.

RabbitMQ's ``x-`` arguments: ``x-message-ttl``, ``x-expires``, ``x-max-length``,
``x-max-length-bytes``, ``x-overflow``, ``x-dead-letter-exchange``,
``x-dead-letter-routing-key``, ``x-max-priority`` and ``x-single-active-consumer``. A bad
value is PRECONDITION_FAILED (406) with RabbitMQ's words. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.core.errors import precondition_failed
from broker.core.priority import MAX_PRIORITY

OVERFLOW_DROP_HEAD = "drop-head"
OVERFLOW_REJECT_PUBLISH = "reject-publish"
OVERFLOW_REJECT_PUBLISH_DLX = "reject-publish-dlx"
OVERFLOWS = (OVERFLOW_DROP_HEAD, OVERFLOW_REJECT_PUBLISH, OVERFLOW_REJECT_PUBLISH_DLX)


def _int_arg(name: str, value: Any, queue: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise precondition_failed(
            f"invalid arg '{name}' for queue '{queue}' in vhost '/': {value!r}"
            f" (expected an integer >= {minimum})"
        )
    return value


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """Limits and dead-lettering read from a queue's declare arguments."""

    message_ttl_ms: int | None = None
    expires_ms: int | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = OVERFLOW_DROP_HEAD
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int = 0
    single_active_consumer: bool = False

    @classmethod
    def from_arguments(cls, queue: str, arguments: dict[str, Any]) -> QueueLimits:
        """Validate the ``x-`` arguments; a bad one is PRECONDITION_FAILED (406)."""
        ttl = arguments.get("x-message-ttl")
        expires = arguments.get("x-expires")
        max_length = arguments.get("x-max-length")
        max_bytes = arguments.get("x-max-length-bytes")
        overflow = arguments.get("x-overflow", OVERFLOW_DROP_HEAD)
        dlx = arguments.get("x-dead-letter-exchange")
        dlrk = arguments.get("x-dead-letter-routing-key")
        if overflow not in OVERFLOWS:
            raise precondition_failed(
                f"invalid arg 'x-overflow' for queue '{queue}' in vhost '/': {overflow!r}"
                f" (expected one of {', '.join(OVERFLOWS)})"
            )
        for name, value in (
            ("x-dead-letter-exchange", dlx),
            ("x-dead-letter-routing-key", dlrk),
        ):
            if value is not None and not isinstance(value, str):
                raise precondition_failed(
                    f"invalid arg '{name}' for queue '{queue}' in vhost '/': {value!r}"
                    " (expected a string)"
                )
        if dlrk is not None and dlx is None:
            raise precondition_failed(
                f"invalid arg 'x-dead-letter-routing-key' for queue '{queue}' in vhost '/':"
                " requires x-dead-letter-exchange"
            )
        max_priority = arguments.get("x-max-priority", 0)
        if (
            isinstance(max_priority, bool)
            or not isinstance(max_priority, int)
            or not 0 <= max_priority <= MAX_PRIORITY
        ):
            raise precondition_failed(
                f"invalid arg 'x-max-priority' for queue '{queue}' in vhost '/':"
                f" {max_priority!r} (expected an integer from 0 to {MAX_PRIORITY})"
            )
        single_active = arguments.get("x-single-active-consumer", False)
        if not isinstance(single_active, bool):
            raise precondition_failed(
                f"invalid arg 'x-single-active-consumer' for queue '{queue}' in vhost '/':"
                f" {single_active!r} (expected a boolean)"
            )
        return cls(
            message_ttl_ms=None if ttl is None else _int_arg("x-message-ttl", ttl, queue, 0),
            expires_ms=None if expires is None else _int_arg("x-expires", expires, queue, 1),
            max_length=None
            if max_length is None
            else _int_arg("x-max-length", max_length, queue, 0),
            max_length_bytes=None
            if max_bytes is None
            else _int_arg("x-max-length-bytes", max_bytes, queue, 0),
            overflow=str(overflow),
            dead_letter_exchange=dlx,
            dead_letter_routing_key=dlrk,
            max_priority=max_priority,
            single_active_consumer=single_active,
        )
