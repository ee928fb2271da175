"""The states of an AMQP 1.0 connection and its legal moves (one table, as 0-9-1's
:mod:`broker.amqp.state`): :class:`~broker.amqp10.connection.Connection` moves through
them and refuses any other move."""

from __future__ import annotations

from enum import Enum


class State(Enum):
    """Where a connection is: the header, the SASL layer, the open, the close."""

    AWAIT_HEADER = "await-header"
    AWAIT_SASL_INIT = "await-sasl-init"
    AWAIT_LOGIN = "await-login"
    AWAIT_AMQP_HEADER = "await-amqp-header"
    AWAIT_OPEN = "await-open"
    OPEN = "open"
    CLOSE_SENT = "close-sent"
    CLOSED = "closed"


S = State
#: The legal moves (any state may also go to CLOSED).
TRANSITIONS: dict[State, frozenset[State]] = {
    S.AWAIT_HEADER: frozenset({S.AWAIT_SASL_INIT, S.AWAIT_OPEN}),
    S.AWAIT_SASL_INIT: frozenset({S.AWAIT_LOGIN, S.AWAIT_AMQP_HEADER}),
    S.AWAIT_LOGIN: frozenset({S.AWAIT_AMQP_HEADER}),
    S.AWAIT_AMQP_HEADER: frozenset({S.AWAIT_OPEN}),
    S.AWAIT_OPEN: frozenset({S.OPEN, S.CLOSE_SENT}),
    S.OPEN: frozenset({S.CLOSE_SENT}),
    S.CLOSE_SENT: frozenset(),
    S.CLOSED: frozenset(),
}
#: The states before the connection is open (a client gone then abandoned its handshake).
HANDSHAKE = frozenset(
    {S.AWAIT_HEADER, S.AWAIT_SASL_INIT, S.AWAIT_LOGIN, S.AWAIT_AMQP_HEADER, S.AWAIT_OPEN}
)
