"""Primary and backup side, sans-I/O rules: *what* is replicated, the replication levels.

The levels and rules of seed 001, section 1.12.7, "Controlling replication of queues and
exchanges".

The broker option ``ha-replicate`` sets the default level (``none``, ``configuration`` or
``all``); the argument ``qpid.replicate`` given when a queue or exchange is declared
overrides it for that queue or exchange:

- ``all``: replicate the queue or exchange, its bindings and (for a queue) its messages;
- ``configuration``: replicate the existence of the queue or exchange and its bindings, not
  messages;
- ``none``: replicate nothing.

A binding is replicated when both its queue and its exchange have level ``configuration``
or ``all``. The built-in exchanges (the default exchange ``""``, the ``amq.*`` exchanges and
the management exchanges ``qpid.management``, ``qmf.default.direct`` and
``qmf.default.topic``) are never replicated, whatever their arguments: every broker makes
its own. Bindings to them differ:

- a binding on a **standard exchange** (``amq.direct``, ``amq.fanout``, ``amq.topic``,
  ``amq.headers``, ``amq.match``: :func:`is_standard_exchange`) is replicated when its
  queue (or destination exchange) is, as RabbitMQ keeps them (issue 30; Qpid's rule dropped
  them at a fail-over), on links whose replication format carries them (format 4:
  ``standard_exchanges``); a link of format 1 to 3 carries none, as before;
- the default exchange's bindings are implicit (every queue is bound by its name) and the
  management exchanges' belong to the broker: never replicated.

Levels are ordered, ``NONE < CONFIGURATION < ALL``. Pure functions over
:mod:`broker.core` objects; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from broker.core.errors import precondition_failed
from broker.core.exchange import Binding, Exchange
from broker.core.queue import Queue
from broker.ha.names import QPID_REPLICATE

__all__ = [
    "MANAGEMENT_EXCHANGES",
    "QPID_REPLICATE",
    "ReplicateLevel",
    "binding_replicated",
    "destination_replicated",
    "exchange_admits_bindings",
    "exchange_replicated",
    "is_builtin_exchange",
    "is_standard_exchange",
    "level_of",
    "queue_level",
]


#: Management exchanges the seed lists among the built-ins that are never replicated.
MANAGEMENT_EXCHANGES = frozenset({"qpid.management", "qmf.default.direct", "qmf.default.topic"})


class ReplicateLevel(Enum):
    """How much of a queue or exchange is replicated; ordered NONE < CONFIGURATION < ALL."""

    NONE = "none"
    CONFIGURATION = "configuration"
    ALL = "all"

    @classmethod
    def parse(cls, text: str) -> ReplicateLevel:
        """The level named ``text`` (``none``, ``configuration``, ``all``; any case).

        :raises ValueError: naming ``text`` and the allowed values.
        """
        if isinstance(text, str):
            word = text.strip().lower()
            for level in cls:
                if level.value == word:
                    return level
        raise ValueError(f"invalid replication level {text!r}: expected one of {_ALLOWED}")

    @property
    def rank(self) -> int:
        """0 for NONE, 1 for CONFIGURATION, 2 for ALL."""
        return _RANKS[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ReplicateLevel):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, ReplicateLevel):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, ReplicateLevel):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, ReplicateLevel):
            return NotImplemented
        return self.rank >= other.rank


_RANKS = {level: rank for rank, level in enumerate(ReplicateLevel)}
_ALLOWED = ", ".join(level.value for level in ReplicateLevel)


def level_of(
    arguments: Mapping[str, Any], default: ReplicateLevel, *, owner: str | None = None
) -> ReplicateLevel:
    """The level set by the ``qpid.replicate`` argument in ``arguments``, else ``default``.

    The value may be text or UTF-8 bytes (field tables carry either). ``owner`` names the
    object the arguments belong to in the error, e.g. ``"queue 'q1'"``.

    :raises AmqpError: PRECONDITION_FAILED (406) naming the bad value and the allowed ones.
    """
    if QPID_REPLICATE not in arguments:
        return default
    value = arguments[QPID_REPLICATE]
    shown: object = value
    if isinstance(value, bytes | bytearray):
        try:
            value = shown = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            value = None
    if isinstance(value, str):
        try:
            return ReplicateLevel.parse(value)
        except ValueError:
            pass
    where = f" for {owner}" if owner else ""
    raise precondition_failed(
        f"invalid arg '{QPID_REPLICATE}'{where}: {shown!r} (expected one of {_ALLOWED})"
    )


def is_builtin_exchange(exchange: Exchange) -> bool:
    """True for the exchanges the broker creates itself, which are never replicated."""
    name = exchange.name
    return exchange.builtin or name == "" or name.startswith("amq.") or name in MANAGEMENT_EXCHANGES


def is_standard_exchange(exchange: Exchange) -> bool:
    """True for a built-in ``amq.*`` exchange (``amq.topic``, ...): one every broker has,
    whose bindings are replicated (the module docstring)."""
    return exchange.builtin and exchange.name.startswith("amq.")


def exchange_replicated(exchange: Exchange, default: ReplicateLevel) -> ReplicateLevel:
    """The level ``exchange`` is replicated at: NONE for a built-in, else its argument.

    :raises AmqpError: PRECONDITION_FAILED for a bad ``qpid.replicate`` argument.
    """
    if is_builtin_exchange(exchange):
        return ReplicateLevel.NONE
    return level_of(exchange.arguments, default, owner=f"exchange '{exchange.name}'")


def queue_level(queue: Queue, default: ReplicateLevel) -> ReplicateLevel:
    """The level ``queue`` is replicated at: its ``qpid.replicate`` argument, else default.

    Exclusive and auto-delete queues follow the same rule (Qpid replicates them too).

    :raises AmqpError: PRECONDITION_FAILED for a bad ``qpid.replicate`` argument.
    """
    arguments = queue.arguments
    if QPID_REPLICATE not in arguments:  # most queues: no name formatted for an error
        return default
    return level_of(arguments, default, owner=f"queue '{queue.name}'")


def binding_replicated(
    binding: Binding,
    default: ReplicateLevel,
    *,
    exchange: Exchange,
    standard_exchanges: bool = True,
) -> bool:
    """Whether ``binding`` is replicated: its queue and exchange both at CONFIGURATION or ALL,
    or, on a standard exchange (``amq.topic``, ...), its queue at CONFIGURATION or ALL.

    ``exchange`` is the exchange the binding is on (a :class:`Binding` holds only its name).
    Bindings to the other built-in exchanges (the default one, the management ones) are
    never replicated; bindings to a standard one only when ``standard_exchanges`` (the
    link's format carries them: format 4). An exchange-to-exchange binding is replicated
    when its destination exchange is too, or is a built-in one (every broker has those).

    :raises ValueError: if ``exchange`` is not the binding's exchange.
    :raises AmqpError: PRECONDITION_FAILED for a bad ``qpid.replicate`` argument.
    """
    if exchange.name != binding.exchange:
        raise ValueError(f"binding is on exchange {binding.exchange!r}, not on {exchange.name!r}")
    return exchange_admits_bindings(
        exchange, default, standard_exchanges
    ) and destination_replicated(binding.destination, default)


# "At CONFIGURATION or ALL" is "not NONE" (three levels), asked without the ordering's
# calls: a snapshot asks this of every binding (5,000: 10 ms of CPU with them).
def exchange_admits_bindings(
    exchange: Exchange, default: ReplicateLevel, standard_exchanges: bool = True
) -> bool:
    """:func:`binding_replicated`'s part that depends on the binding's exchange alone."""
    if is_standard_exchange(exchange):
        return standard_exchanges
    return exchange_replicated(exchange, default) is not ReplicateLevel.NONE


def destination_replicated(destination: Queue | Exchange, default: ReplicateLevel) -> bool:
    """:func:`binding_replicated`'s part that depends on the binding's destination alone."""
    if isinstance(destination, Exchange):
        return (
            is_builtin_exchange(destination)
            or exchange_replicated(destination, default) is not ReplicateLevel.NONE
        )
    return queue_level(destination, default) is not ReplicateLevel.NONE
