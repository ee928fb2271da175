"""What an attach's terminus names, as the link the broker makes for it.

Contract: :func:`make_link` resolves an attach (the client's role, its target or source)
to the broker's end of the link: a :class:`~broker.amqp10.receiver.ReceiverLink` for a
target the client sends to (a queue, an exchange and key, or no address: the anonymous
relay), a :class:`~broker.amqp10.coordinator.CoordinatorLink` for a ``coordinator``
target (transactions), a :class:`~broker.amqp10.sender.SenderLink` for a source the
client receives from (a queue, or a dynamic one: a new temporary queue). It checks what
the session checks at attach: the queue exists and is not another connection's exclusive
one, the exchange exists, the ACL's ``publish`` (:func:`check_publish`) and ``consume``.

:raises Amqp10Error: link scope (``amqp:not-implemented``, ``amqp:unauthorized-access``,
    ``amqp:resource-locked``, ``amqp:invalid-field``).
:raises AmqpError: the core's refusals (not found...), which the session maps.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

import dataclasses

from broker.amqp10 import addresses
from broker.amqp10.coordinator import CoordinatorLink, Transactions
from broker.amqp10.errors import (
    NOT_IMPLEMENTED,
    RESOURCE_LOCKED,
    UNAUTHORIZED_ACCESS,
    Amqp10Error,
    Scope,
)
from broker.amqp10.performatives import SENDER, Attach, Coordinator, Source, Target
from broker.amqp10.ports import LinkSession
from broker.amqp10.receiver import ReceiverLink
from broker.amqp10.sender import SenderLink

#: The broker's end of a link.
Link = ReceiverLink | SenderLink | CoordinatorLink


def make_link(session: LinkSession, attach: Attach, transactions: Transactions) -> Link:
    """The link for ``attach`` on ``session`` (see the module docstring)."""
    vhost = session.vhost
    if attach.role is SENDER:  # the client sends: the broker's end receives
        target = attach.target
        if isinstance(target, Coordinator):
            return CoordinatorLink(session, attach, transactions)
        if not isinstance(target, Target) or target.dynamic:
            raise Amqp10Error(NOT_IMPLEMENTED, "a dynamic or missing target", Scope.LINK)
        if not target.address:
            return ReceiverLink(session, attach, None, "")  # the anonymous relay
        address = addresses.parse(target.address)
        exchange, key = addresses.route_of(address)
        if isinstance(address, addresses.QueueAddress):
            vhost.queue(address.queue, owner=session.owner)  # not-found, resource-locked
        else:
            vhost.check_publish(exchange)
        session.check_publish(exchange, key)
        return ReceiverLink(session, attach, exchange, key)
    source = attach.source
    if not isinstance(source, Source):
        raise Amqp10Error(NOT_IMPLEMENTED, "a missing source", Scope.LINK)
    if source.dynamic:  # a temporary queue for this link (request/reply)
        queue = vhost.declare_queue("", exclusive=True, auto_delete=True, owner=session.owner)
        attach = dataclasses.replace(attach, source=dataclasses.replace(source, address=queue.name))
        return SenderLink(session, attach, queue)
    queue_address = addresses.parse_source(source.address)
    queue = vhost.queue(queue_address.queue, owner=session.owner)
    acl = session.ctx.acl
    if acl is not None:
        denied = acl.check(
            session.user, session.connection_name, "consume", "queue", {"name": queue.name}
        )
        if denied is not None:
            raise Amqp10Error(UNAUTHORIZED_ACCESS, denied.reply_text, Scope.LINK)
    if queue.has_exclusive_consumer():
        raise Amqp10Error(
            RESOURCE_LOCKED, f"queue '{queue.name}' has an exclusive consumer", Scope.LINK
        )
    return SenderLink(session, attach, queue)
