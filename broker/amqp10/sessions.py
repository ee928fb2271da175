"""An AMQP 1.0 connection's sessions, by the client's channel: :class:`SessionTable`.

Contract: owned by a :class:`~broker.amqp10.connection.Connection` (one per connection),
built with a :class:`SessionHost` port (what it needs of the connection: the
:class:`~broker.amqp10.session.SessionConnection` each session is made with, the
connection's channel-max and its error log), never the connection's module. It answers a
client's ``begin`` (our session on the same channel number), hands each frame of an open
session to it (a transfer read by hand on the connection's hot path, any other
performative decoded), answers ``end``, and ends a session with an error of session scope
(``end`` with the error; the channel's frames are then dropped until the client's
``end``). It keeps which sessions have dispositions to send (:meth:`SessionTable.send_dispositions`
at the connection's flush), tells every session of a resource alarm and of a writable
transport again, and releases them all when the connection goes.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from typing import Any, Protocol

from broker.amqp10.errors import (
    ILLEGAL_STATE,
    RESOURCE_LIMIT_EXCEEDED,
    Amqp10Error,
    Scope,
)
from broker.amqp10.performatives import Begin, End, Error
from broker.amqp10.session import Session, SessionConnection
from common.weakly import weakly


class SessionHost(SessionConnection, Protocol):
    """What the session table needs of its connection (besides being each session's)."""

    #: The highest channel a session may use (ours and the client's open's, the lower).
    channel_max: int

    def log_error(self, error: Amqp10Error, scope: str) -> None:
        """Count and log a protocol error answered in ``scope``."""
        ...


class SessionTable:
    """See the module docstring."""

    def __init__(self, host: SessionHost) -> None:
        self._host = host
        self.sessions: dict[int, Session] = {}  # by the client's channel
        self._ending: set[int] = set()  # client channels we ended with an error
        self._dispositions: set[Session] = set()

    def begin(self, channel: int, begin: Begin) -> None:
        if begin.remote_channel is not None:
            raise Amqp10Error(ILLEGAL_STATE, "begin answering a session the broker never began")
        if channel in self.sessions or channel in self._ending:
            raise Amqp10Error(ILLEGAL_STATE, f"channel {channel} is in use")
        host = self._host
        if channel > host.channel_max:
            raise Amqp10Error(
                RESOURCE_LIMIT_EXCEEDED,
                f"channel {channel} is above channel-max {host.channel_max}",
            )
        session = Session(host, channel, begin)  # our channel: the same number
        self.sessions[channel] = session
        host.send_frame(channel, session.begin_reply(channel))

    def transfer(self, channel: int, fields: Any, payload: bytes) -> bool:
        """A transfer the connection read by hand (``fields``: handle, delivery-id, tag,
        format, settled, more, offset); False: no session on ``channel`` (the codec then
        decodes it, and the usual checks answer it)."""
        session = self.sessions.get(channel)
        if session is None:
            return False
        handle, delivery_id, _, _, settled, more, _ = fields
        try:
            session.transfer(handle, delivery_id, settled, more, False, payload)
        except Amqp10Error as error:
            if error.scope is not Scope.SESSION:
                raise
            self._end_with_error(channel, session, error)
        return True

    def frame(self, channel: int, performative: Any, payload: bytes) -> None:
        """Any other frame on ``channel`` (not begin, open or close)."""
        session = self.sessions.get(channel)
        if session is None:
            if channel in self._ending:
                if isinstance(performative, End):
                    self._ending.discard(channel)
                return
            raise Amqp10Error(
                ILLEGAL_STATE, f"{type(performative).__name__} on channel {channel} without begin"
            )
        if isinstance(performative, End):
            self._end(channel, session)
            return
        try:
            session.received(performative, payload)
        except Amqp10Error as error:
            if error.scope is not Scope.SESSION:
                raise
            self._end_with_error(channel, session, error)

    def _end(self, channel: int, session: Session) -> None:
        session.release()
        del self.sessions[channel]
        self._dispositions.discard(session)
        self._host.send_frame(channel, End())

    def _end_with_error(self, channel: int, session: Session, error: Amqp10Error) -> None:
        session.release()
        del self.sessions[channel]
        self._dispositions.discard(session)
        self._ending.add(channel)
        self._host.log_error(error, "session")
        self._host.send_frame(channel, End(error=Error(error.condition, error.description)))

    # -- dispositions at the connection's flush --------------------------------------------
    def has_dispositions(self, session: Session) -> None:
        self._dispositions.add(session)

    @property
    def dispositions_waiting(self) -> bool:
        return bool(self._dispositions)

    def send_dispositions(self) -> None:
        sessions, self._dispositions = self._dispositions, set()
        for session in sessions:
            if not session.ended:
                session.send_dispositions()

    # -- the connection's state ------------------------------------------------------------
    def publishers_blocked(self, blocked: bool) -> None:
        for session in self.sessions.values():
            session.publishers_blocked(blocked)

    def writable_again(self) -> None:
        for session in list(self.sessions.values()):
            session.writable_again()

    def release(self) -> None:
        """The connection closes or is lost: every session is released (its links', its
        transactions rolled back)."""
        for session in self.sessions.values():
            session.release()
        self.sessions.clear()
        self._dispositions.clear()
        # only its connection calls it from now on: held weakly (common.weakly)
        self._host = weakly(self._host)
