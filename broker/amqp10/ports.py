"""What a link needs of its session: :class:`LinkSession`.

A :class:`~broker.amqp10.session.Session` is one, structurally; the links
(:class:`~broker.amqp10.receiver.ReceiverLink`, :class:`~broker.amqp10.sender.SenderLink`)
import this module, never the session's, so the session can import them.

Call direction: the connection calls its sessions, a session its links; a link calls back
only through this port.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from typing import Any, Protocol

from broker.amqp.context import BrokerContext
from broker.amqp10.performatives import Transfer
from broker.core.message import Entry
from broker.core.queue import Queue
from broker.core.transaction import Transaction
from broker.core.vhost import VirtualHost


class TransactionalWork(Protocol):
    """An open transaction as a link sees it
    (:class:`~broker.amqp10.coordinator.OpenTransaction`)."""

    txn_id: bytes
    #: The held work (the commit core both protocols use).
    work: Transaction
    #: Why it may only roll back now, or None.
    rollback_only: str | None


class LinkSession(Protocol):
    """A link's session (and, through it, its connection)."""

    ctx: BrokerContext

    @property
    def vhost(self) -> VirtualHost: ...

    @property
    def user(self) -> str | None: ...

    @property
    def connection_name(self) -> str: ...

    @property
    def owner(self) -> object:
        """The connection, as the owner of exclusive queues."""
        ...

    def send(self, performative: Any) -> None:
        """Write one frame on the session's channel."""
        ...

    def can_send(self) -> bool:
        """May a transfer go out now (the peer's incoming window is open, the transport
        takes more)?"""
        ...

    def send_transfer(self, transfer: Transfer, payload: bytes) -> None:
        """Write a transfer, in as many frames as the peer's max-frame-size needs."""
        ...

    def send_delivery(self, link: Any, settled: bool, sections: bytes, body: bytes) -> int:
        """Write one of the broker's deliveries on ``link`` (the next delivery id, its tag
        the id's 4 bytes, message format 0; the message: ``sections`` then ``body``), in as
        many frames as the peer's max-frame-size needs; count it, keep it unsettled unless
        ``settled``; return its delivery id."""
        ...

    def sent_unsettled(self, delivery_id: int, link: Any, queue: Queue, entry: Entry) -> None:
        """An unsettled delivery went out: its disposition will name ``delivery_id``."""
        ...

    def confirms_settled(self, link: Any) -> None:
        """A receiver link has dispositions to send at the next flush."""
        ...

    def check_publish(self, exchange: str, routing_key: str) -> None:
        """The ACL's ``publish`` check; raises ``amqp:unauthorized-access``."""
        ...

    def link_lost(self, link: Any, condition: str, description: str) -> None:
        """The broker ends ``link`` (its queue was deleted): detach it with the error."""
        ...

    def transaction(self, txn_id: bytes) -> TransactionalWork:
        """The session's open transaction ``txn_id``; raises
        ``amqp:transaction:unknown-id`` (link scope)."""
        ...

    def published(self) -> None:
        """Count a message published on this connection."""
        ...
