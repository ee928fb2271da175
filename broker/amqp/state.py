"""Connection states of AMQP 0-9-1 and the legal moves between them, in one table.

``AWAIT_HEADER -> AWAIT_START_OK -> AWAIT_TUNE_OK -> AWAIT_OPEN -> OPEN`` is the handshake;
``AWAIT_LOGIN`` between start-ok and tune while a password hash is checked off the loop.
``CLOSING`` means the broker sent connection.close and waits for close-ok; ``CLOSED`` means
nothing more is read or written. Any state may move to ``CLOSING`` or ``CLOSED``.
"""

from __future__ import annotations

from enum import Enum


class ConnectionState(Enum):
    AWAIT_HEADER = "await-header"
    AWAIT_START_OK = "await-start-ok"
    AWAIT_LOGIN = "await-login"  # start-ok's password hash is being checked (in a thread)
    AWAIT_TUNE_OK = "await-tune-ok"
    AWAIT_OPEN = "await-open"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


S = ConnectionState

TRANSITIONS: dict[ConnectionState, frozenset[ConnectionState]] = {
    S.AWAIT_HEADER: frozenset({S.AWAIT_START_OK, S.CLOSING, S.CLOSED}),
    S.AWAIT_START_OK: frozenset({S.AWAIT_LOGIN, S.AWAIT_TUNE_OK, S.CLOSING, S.CLOSED}),
    S.AWAIT_LOGIN: frozenset({S.AWAIT_TUNE_OK, S.CLOSING, S.CLOSED}),
    S.AWAIT_TUNE_OK: frozenset({S.AWAIT_OPEN, S.CLOSING, S.CLOSED}),
    S.AWAIT_OPEN: frozenset({S.OPEN, S.CLOSING, S.CLOSED}),
    S.OPEN: frozenset({S.CLOSING, S.CLOSED}),
    S.CLOSING: frozenset({S.CLOSED}),
    S.CLOSED: frozenset(),
}


class ChannelState(Enum):
    OPEN = "open"
    CLOSING = "closing"  # the broker sent channel.close, waiting for close-ok
    CLOSED = "closed"


def check_transition(old: ConnectionState, new: ConnectionState) -> None:
    """Raise ``RuntimeError`` for a move the table does not allow (a broker bug)."""
    if new not in TRANSITIONS[old]:
        raise RuntimeError(f"illegal connection state transition {old.value} -> {new.value}")
