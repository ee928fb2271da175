"""AMQP 1.0 error conditions (part 2, section 2.8.15-2.8.18) and the exception that
carries one to the scope it ends: the connection (close), a session (end) or a link
(detach).

A core raises :class:`Amqp10Error` where it finds the fault; the connection catches it
and answers with the performative of its scope, naming the condition and a description.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from broker.amqp10.types import UShort
from broker.core.errors import AmqpError, ReplyCode, RoutineRefusal

#: The conditions this broker sends, by name in the specification.
INTERNAL_ERROR = "amqp:internal-error"
NOT_FOUND = "amqp:not-found"
UNAUTHORIZED_ACCESS = "amqp:unauthorized-access"
DECODE_ERROR = "amqp:decode-error"
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
NOT_ALLOWED = "amqp:not-allowed"
INVALID_FIELD = "amqp:invalid-field"
NOT_IMPLEMENTED = "amqp:not-implemented"
RESOURCE_LOCKED = "amqp:resource-locked"
PRECONDITION_FAILED = "amqp:precondition-failed"
RESOURCE_DELETED = "amqp:resource-deleted"
ILLEGAL_STATE = "amqp:illegal-state"
FRAME_SIZE_TOO_SMALL = "amqp:frame-size-too-small"
CONNECTION_FORCED = "amqp:connection:forced"
FRAMING_ERROR = "amqp:connection:framing-error"
REDIRECT = "amqp:connection:redirect"
WINDOW_VIOLATION = "amqp:session:window-violation"
ERRANT_LINK = "amqp:session:errant-link"
HANDLE_IN_USE = "amqp:session:handle-in-use"
UNATTACHED_HANDLE = "amqp:session:unattached-handle"
DETACH_FORCED = "amqp:link:detach-forced"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
TRANSACTION_UNKNOWN_ID = "amqp:transaction:unknown-id"
TRANSACTION_ROLLBACK = "amqp:transaction:rollback"


class Scope(Enum):
    """What an error ends."""

    CONNECTION = "connection"
    SESSION = "session"
    LINK = "link"


class Amqp10Error(Exception):
    """A condition to answer with (see the module docstring). ``info``: the error's info
    map (a redirect's ``network-host`` and ``port``); ``routine``: a refusal that is normal
    operation (an HA backup sending a client on), logged at info, not as a warning."""

    def __init__(
        self,
        condition: str,
        description: str,
        scope: Scope = Scope.CONNECTION,
        info: dict[str, Any] | None = None,
        routine: bool = False,
    ):
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description
        self.scope = scope
        self.info = info
        self.routine = routine


#: The condition of a broker-core error, by its 0-9-1 reply code.
_CONDITIONS = {
    ReplyCode.NOT_FOUND: NOT_FOUND,
    ReplyCode.ACCESS_REFUSED: UNAUTHORIZED_ACCESS,
    ReplyCode.RESOURCE_LOCKED: RESOURCE_LOCKED,
    ReplyCode.PRECONDITION_FAILED: PRECONDITION_FAILED,
    ReplyCode.NOT_ALLOWED: NOT_ALLOWED,
    ReplyCode.RESOURCE_ERROR: RESOURCE_LIMIT_EXCEEDED,
    ReplyCode.CONNECTION_FORCED: CONNECTION_FORCED,
    ReplyCode.NOT_IMPLEMENTED: NOT_IMPLEMENTED,
}


def from_core(error: AmqpError, scope: Scope) -> Amqp10Error:
    """A broker-core refusal (a missing queue: 404...) as the 1.0 condition it means.

    A routine refusal (:class:`~broker.core.errors.RoutineRefusal`: an HA backup, or a
    primary not serving, sending a client on) is ``amqp:connection:redirect`` naming the
    address it gives (``network-host``, ``port``, and ``hostname`` for the client's next
    open), else ``amqp:connection:forced``: the condition 1.0 clients take as "connect
    again" (python-qpid-proton reconnects on it, where ``amqp:not-allowed`` or a redirect
    make it give up; docs/amqp-1-0.md says how far that gets a URL list)."""
    if isinstance(error, RoutineRefusal):
        if error.redirect is None:
            return Amqp10Error(CONNECTION_FORCED, error.reply_text, scope, routine=True)
        host, port = error.redirect
        info = {"hostname": host, "network-host": host, "port": UShort(port)}
        return Amqp10Error(REDIRECT, error.reply_text, scope, info=info, routine=True)
    condition = _CONDITIONS.get(ReplyCode(int(error.reply_code)), INTERNAL_ERROR)
    return Amqp10Error(condition, error.reply_text, scope)
