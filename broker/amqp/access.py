"""The ACL on AMQP: which ACL request each method makes, and the 403 for a denial.

:class:`AccessControl` holds the broker's current :class:`~broker.security.acl.Acl` (swapped
whole by :meth:`AccessControl.replace` on a reload) and is consulted by the connection
(:mod:`broker.amqp.connection`) before it hands a method to a channel:

- connection.open: ``access virtualhost name=V``; a denial closes the connection (403);
- exchange.declare (``access`` when passive, else ``create`` with name, type, durable,
  autodelete), exchange.delete; queue.declare (``access`` when passive, else ``create``
  with name, durable, exclusive, autodelete), queue.delete, queue.purge;
- queue.bind / queue.unbind: ``bind``/``unbind exchange name=X queuename=Q routingkey=K``
  (exchange.bind: the source as name, the destination as queuename);
- basic.publish: ``publish exchange name=X routingkey=K``; basic.consume and basic.get:
  ``consume queue name=Q``.

A denial closes the channel with 403 ACCESS_REFUSED (the spec's code for it) and logs
``acl_denied``; a ``-log`` rule's allowance logs ``acl_allowed``. Pure: no I/O; decisions
are the ACL's, remembered there.
"""

from __future__ import annotations

from typing import Any

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.core.errors import AmqpError, ReplyCode
from broker.security.acl import Acl

__all__ = ["AccessControl", "acl_request"]

Request = tuple[str, str, dict[str, str]]


def _flag(value: Any) -> str:
    return "true" if value else "false"


def acl_request(method: Method) -> Request | None:
    """``(action, object, properties)`` that ``method`` asks the ACL, or None."""
    if isinstance(method, commands.Queue.Declare):
        if method.passive:
            return "access", "queue", {"name": method.queue or ""}
        return (
            "create",
            "queue",
            {
                "name": method.queue or "",
                "durable": _flag(method.durable),
                "exclusive": _flag(method.exclusive),
                "autodelete": _flag(method.auto_delete),
            },
        )
    if isinstance(method, commands.Exchange.Declare):
        if method.passive:
            return "access", "exchange", {"name": method.exchange or ""}
        return (
            "create",
            "exchange",
            {
                "name": method.exchange or "",
                "type": method.exchange_type or "direct",
                "durable": _flag(method.durable),
                "autodelete": _flag(method.auto_delete),
            },
        )
    if isinstance(method, commands.Queue.Bind | commands.Queue.Unbind):
        action = "bind" if isinstance(method, commands.Queue.Bind) else "unbind"
        return (
            action,
            "exchange",
            {
                "name": method.exchange or "",
                "queuename": method.queue or "",
                "routingkey": method.routing_key or "",
            },
        )
    if isinstance(method, commands.Exchange.Bind | commands.Exchange.Unbind):
        action = "bind" if isinstance(method, commands.Exchange.Bind) else "unbind"
        return (
            action,
            "exchange",
            {
                "name": method.source or "",
                "queuename": method.destination or "",
                "routingkey": method.routing_key or "",
            },
        )
    if isinstance(method, commands.Queue.Delete):
        return "delete", "queue", {"name": method.queue or ""}
    if isinstance(method, commands.Exchange.Delete):
        return "delete", "exchange", {"name": method.exchange or ""}
    if isinstance(method, commands.Queue.Purge):
        return "purge", "queue", {"name": method.queue or ""}
    if isinstance(method, commands.Basic.Consume | commands.Basic.Get):
        return "consume", "queue", {"name": method.queue or ""}
    return None


class AccessControl:
    """The broker's current ACL, asked on behalf of connections."""

    def __init__(self, acl: Acl, log: Any) -> None:
        self.acl = acl
        self.log = log

    def replace(self, acl: Acl) -> None:
        """A reloaded ACL: every later request is decided by it."""
        self.acl = acl

    def check(
        self, user: str | None, connection: str, action: str, obj: str, props: dict[str, str]
    ) -> AmqpError | None:
        """None when allowed; else the 403 to close with (logged)."""
        decision = self.acl.decide(user or "", action, obj, props)
        if decision.allowed:
            if decision.logged:
                self.log.info(
                    "acl_allowed", connection=connection, user=user, action=action,
                    object=obj, properties=props, rule=decision.line,
                )  # fmt: skip
            return None
        self.log.warning(
            "acl_denied", connection=connection, user=user, action=action, object=obj,
            properties=props, rule=decision.line,
        )  # fmt: skip
        name = props.get("name", "")
        return AmqpError(
            ReplyCode.ACCESS_REFUSED,
            f"ACL denied {action} {obj} '{name}' to user '{user}'",
        )

    def check_method(self, user: str | None, connection: str, method: Method) -> AmqpError | None:
        request = acl_request(method)
        if request is None:
            return None
        error = self.check(user, connection, *request)
        if error is not None:
            error.class_id, error.method_id = method.index >> 16, method.index & 0xFFFF
        return error

    def check_publish(self, user: str | None, connection: str, payload: bytes) -> AmqpError | None:
        exchange, routing_key, _, _ = framing.unmarshal_publish(payload)
        error = self.check(
            user, connection, "publish", "exchange", {"name": exchange, "routingkey": routing_key}
        )
        if error is not None:
            error.class_id, error.method_id = 60, 40
        return error
