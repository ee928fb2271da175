"""A port: what a virtual host asks before it creates what a client declared.

A virtual host creates queues, exchanges and bindings for clients (AMQP methods, the
management API) and for the broker itself (HA replication on a backup, store recovery:
``replicated=True``). Before it creates one *for a client*, and only then, it asks its
:class:`DeclareContract`, which raises :class:`~broker.core.errors.AmqpError` to refuse (406
PRECONDITION_FAILED naming the limit and the value, 403 ACCESS_REFUSED for a reserved name).
An existing object declared again, and a passive declare, are never asked: the existence
check comes first, as in RabbitMQ.

An HA cluster member holds :class:`broker.ha.replication_contract.ReplicationContract` here
(what the replication wire carries); a stand-alone broker holds none. The call direction is
one way: the virtual host calls the contract; the contract reads only its arguments.

THREAD UNSAFE: called on the loop that owns the virtual host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker.core.exchange import Binding, Exchange


class DeclareContract(Protocol):
    """Refuses (raises AmqpError) what a client may not create; returns None otherwise."""

    def check_queue(self, vhost: str, name: str, arguments: Mapping[str, Any]) -> None:
        """A new queue ``name`` in ``vhost`` with ``arguments``."""
        ...

    def check_exchange(self, vhost: str, name: str, arguments: Mapping[str, Any]) -> None:
        """A new exchange ``name`` in ``vhost`` with ``arguments``."""
        ...

    def check_binding(self, vhost: str, binding: Binding, exchange: Exchange) -> None:
        """A new ``binding`` on ``exchange`` (its source), not yet added."""
        ...
