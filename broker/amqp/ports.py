"""What a channel and its parts need of the connection they run on: :class:`Wire` and
:class:`ChannelConnection`; and what the socket's shell needs of either protocol's
connection: :class:`ShellConnection`.

A connection (:class:`~broker.amqp.connection.Connection`) is both, structurally: it
builds its channels with itself as their :class:`ChannelConnection`, and a channel hands
its parts (:class:`~broker.amqp.channel_consume.Deliveries`,
:class:`~broker.amqp.channel_publish.Publisher`) the connection as their :class:`Wire`
only. So neither a channel nor its parts import the connection's module, and a part
written against these ports (AMQP 1.0's links) needs no 0-9-1 connection.

Call direction: the connection calls its channels, a channel calls its parts; the parts
call back only through these ports and their channel's own small ports.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pamqp.base import Frame as Method

from broker.amqp.context import BrokerContext
from broker.core.errors import AmqpError, ReplyCode
from broker.core.vhost import VirtualHost
from broker.security.sasl import PasswordCheck
from common.slices import Steps


class Wire(Protocol):
    """The connection's output, as a channel's parts write to it."""

    #: The negotiated frame-max (content is cut into body frames of at most this).
    frame_max: int
    #: Counters of the connection (logged when it closes; management reads them).
    messages_published: int
    messages_delivered: int

    def write(self, data: bytes) -> None:
        """Queue ``data`` (whole frames) for the next flush; dropped once closed."""
        ...


class ChannelConnection(Wire, Protocol):
    """What a :class:`~broker.amqp.channel.Channel` needs of its connection."""

    ctx: BrokerContext
    vhost: VirtualHost
    #: The transport accepts more output (the shell's write buffer is under its mark).
    writable: bool
    #: A clean close releases the channels, a slice a turn of the loop: what a channel
    #: writes meanwhile is never sent.
    releasing: bool

    @property
    def name(self) -> str: ...

    @property
    def peer(self) -> str: ...

    @property
    def user(self) -> str | None: ...

    @property
    def client_properties(self) -> dict[str, Any]: ...

    @property
    def close_reason(self) -> str | None: ...

    @property
    def channels(self) -> Mapping[int, object]:
        """The open channels by number (a channel still there is not closed)."""
        ...

    def send_method(self, channel: int, method: Method) -> None: ...

    def capability(self, name: str) -> bool: ...

    def channel_closed(self, channel: Any) -> None:
        """The channel's close handshake finished: its number may be reused."""
        ...

    def confirms_settled(self, channel: Any) -> None:
        """The channel has confirm replies to send at the next flush."""
        ...

    def held_frames_dropped(self, frames: list[tuple[int, bytes]]) -> None: ...

    def replay_held_frames(self, number: int) -> None: ...

    def request_pump(self, key: int, pump: Callable[[], None]) -> None: ...

    def connection_error(self, error: AmqpError) -> None: ...


class ShellConnection(Protocol):
    """What the asyncio shell (:class:`~broker.amqp.protocol.AmqpProtocol`) and the broker
    (shutdown, fencing, a deleted vhost, resource alarms) need of a connection core: the
    0-9-1 :class:`~broker.amqp.connection.Connection` or, after an AMQP 1.0 protocol
    header, :class:`broker.amqp10.connection.Connection`."""

    ctx: BrokerContext
    vhost: VirtualHost
    should_close: bool
    close_reason: str | None
    on_reading_changed: Callable[[], None] | None
    #: Frames of the last read wait for a later turn of the loop (:meth:`parse_more`).
    unparsed: bool
    #: Bytes read and written (the shell counts them).
    recv_oct: int
    send_oct: int

    @property
    def name(self) -> str: ...

    @property
    def is_open(self) -> bool: ...

    @property
    def reading_paused(self) -> bool: ...

    @property
    def login_check(self) -> PasswordCheck | None: ...

    @property
    def client_properties(self) -> Mapping[str, Any]: ...

    @property
    def user(self) -> str | None: ...

    @property
    def peer(self) -> str: ...

    def receive_data(self, data: bytes) -> None: ...

    def parse_more(self) -> None: ...

    def data_to_send(self) -> bytes: ...

    def signal_output(self) -> None: ...

    def password_checked(self, matched: bool) -> None: ...

    def publishers_blocked(self, reason: str | None) -> None: ...

    def set_writable(self, writable: bool) -> None: ...

    def tick(self) -> None: ...

    def close(self, reply_code: ReplyCode, text: str) -> None: ...

    def drop_unsent(self) -> None:
        """Forget everything not written yet (an HA primary that stopped serving closes its
        clients: nothing it held may reach them)."""
        ...

    def connection_lost(self) -> None: ...

    def connection_lost_steps(self, *, unread: int = 0, waited_s: float = 0.0) -> Steps[None]:
        """:meth:`connection_lost` in slices (:mod:`common.slices`), for the loop's turns.
        ``unread``: bytes the shell read and had not handed over; ``waited_s``: the seconds
        the socket waited between its accept and the connection's making (both logged
        with a handshake abandoned)."""
        ...
