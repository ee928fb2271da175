"""Errors of the asyncio AMQP client, and the two internal signals of its reader.

Contract: every error the client raises or reports is a :class:`ClientError`. Those that
carry the broker's (or this client's) reply code and text subclass :class:`_ReplyError`
and print as ``"<code> <text>"``. :class:`_ProtocolError` and :class:`_Abort` never leave
the client: the reader turns them into a connection.close and a :class:`ConnectionFailed`
or :class:`CallbackError`. A recorded reason is raised as a :func:`_fresh` copy each time.
"""

from __future__ import annotations

import copy
from typing import TypeVar


class ClientError(Exception):
    """Base of every error this client raises or reports."""


class ConnectionFailed(ClientError):
    """The socket failed or closed, the handshake timed out, or the peer broke protocol."""


class CallbackError(ClientError):
    """A consumer's callback raised; the connection was closed (541). ``__cause__`` tells."""


class _ReplyError(ClientError):
    """An error carrying an AMQP reply code and text."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        super().__init__(int(reply_code), reply_text)
        self.reply_code = int(reply_code)
        self.reply_text = reply_text

    def __str__(self) -> str:
        return f"{self.reply_code} {self.reply_text}"


class ConnectionRefusedByBroker(_ReplyError):
    """The broker answered the handshake with connection.close (403, 530, ...)."""


class ConnectionClosedByBroker(_ReplyError):
    """The broker closed an open connection (320 on shutdown, 541, ...)."""


class ConnectionClosedByClient(_ReplyError):
    """This client closed the connection (:meth:`AmqpClient.close`)."""


class ChannelClosedByBroker(_ReplyError):
    """The broker closed the channel (404 NOT_FOUND, 406 PRECONDITION_FAILED, ...)."""


class ChannelClosedByClient(_ReplyError):
    """This client closed the channel (:meth:`ClientChannel.close`)."""


class PublishNacked(ClientError):
    """The broker answered a publish in confirm mode with basic.nack."""


class _ProtocolError(Exception):
    """The broker broke the protocol: close the connection with this code."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        super().__init__(reply_code, reply_text)
        self.reply_code = reply_code
        self.reply_text = reply_text


class _Abort(Exception):
    """Stop parsing: the connection is being closed for ``reason``."""

    def __init__(self, reason: ClientError, reply_code: int, reply_text: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply_code = reply_code
        self.reply_text = reply_text


_E = TypeVar("_E", bound=BaseException)


def _fresh(error: _E) -> _E:
    """A copy of ``error`` to raise (one instance raised many times grows a traceback)."""
    duplicate = copy.copy(error)
    duplicate.__traceback__ = None
    return duplicate
