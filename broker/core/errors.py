"""AMQP 0-9-1 reply codes and the one error type the core raises.

The core never closes anything itself: it raises :class:`AmqpError` carrying the reply code
the spec prescribes, and the protocol layer decides from the code whether the channel
(soft error) or the whole connection (hard error) is closed.
"""

from __future__ import annotations

from enum import IntEnum


class ReplyCode(IntEnum):
    """Reply codes of AMQP 0-9-1 (section 1.2 of the spec), RabbitMQ's names."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


#: Codes that close only the channel; every other error code closes the connection.
SOFT_CODES = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)


class AmqpError(Exception):
    """An error that the peer is told about with a channel or connection close.

    ``class_id``/``method_id`` name the method that failed (0, 0 when none did).
    """

    def __init__(
        self, reply_code: ReplyCode, reply_text: str, class_id: int = 0, method_id: int = 0
    ) -> None:
        super().__init__(f"{reply_code.name} {int(reply_code)}: {reply_text}")
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def closes_connection(self) -> bool:
        """True for a hard error (connection close), False for a channel close."""
        return self.reply_code not in SOFT_CODES

    def wire_text(self) -> str:
        """Reply text as RabbitMQ sends it: ``NOT_FOUND - no queue 'q'``, at most 255 bytes."""
        text = f"{self.reply_code.name} - {self.reply_text}"
        return text.encode("utf-8")[:255].decode("utf-8", "ignore")


class RoutineRefusal(AmqpError):
    """A connection refused as part of normal operation, not for anything the client did
    wrong: an HA backup (or a primary not serving) sending a client on to the next address
    of its URL list. Closes the connection like any :class:`AmqpError`; logged at info."""

    def __init__(
        self, reply_code: ReplyCode, reply_text: str, redirect: tuple[str, int] | None = None
    ) -> None:
        super().__init__(reply_code, reply_text)
        #: Where the client should connect instead (host, port), when the refuser knows:
        #: an AMQP 1.0 client is told with ``amqp:connection:redirect``; 0-9-1 has no
        #: redirect and reads it in the reply text.
        self.redirect = redirect


def not_found(what: str) -> AmqpError:
    return AmqpError(ReplyCode.NOT_FOUND, what)


def precondition_failed(what: str) -> AmqpError:
    return AmqpError(ReplyCode.PRECONDITION_FAILED, what)


def access_refused(what: str) -> AmqpError:
    return AmqpError(ReplyCode.ACCESS_REFUSED, what)
