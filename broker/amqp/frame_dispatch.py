"""FrameDispatch: where one AMQP 0-9-1 frame of a connection goes (off the publish path).

The :class:`~broker.amqp.connection.Connection` splits what it reads into frames and hands
the publish, content header and body frames of an open channel straight to that channel
(the hot path); every other frame comes here, and goes

- to the frames kept behind a channel's held basic.get, when that channel keeps them
  (:class:`~broker.amqp.held_frames.HeldFrames`);
- a method on channel 0 to the connection class (:mod:`broker.amqp.connection_methods`);
- a channel method, once the connection is open, to its channel after the ACL's check
  (``basic.publish`` read by hand, any other decoded); ``channel.open`` of a new channel
  to the connection, which makes it;
- a content frame to its channel; a heartbeat is checked for channel 0 and dropped.

Frames of a closing connection are dropped; anything else out of place raises
:class:`~broker.core.errors.AmqpError` (the connection closes with its reply code).

Call direction: the connection calls this object; it reaches the connection only through
:class:`DispatchPort`.

THREAD UNSAFE: the connection's event loop owns it.
"""

from __future__ import annotations

from typing import Protocol

from pamqp import commands

from broker.amqp import framing
from broker.amqp.channel import Channel
from broker.amqp.connection_methods import ConnectionMethods
from broker.amqp.context import BrokerContext
from broker.amqp.held_frames import HeldFrames
from broker.amqp.state import ChannelState, ConnectionState
from broker.core.errors import AmqpError, ReplyCode
from common.weakly import weakly

__all__ = ["PUBLISH_ID", "DispatchPort", "FrameDispatch"]

S = ConnectionState
#: The first four bytes of a basic.publish method frame's payload (class 60, method 40).
PUBLISH_ID = b"\x00\x3c\x00\x28"


class DispatchPort(Protocol):
    """What the dispatch needs of its connection."""

    @property
    def state(self) -> ConnectionState: ...

    @property
    def channels(self) -> dict[int, Channel]: ...

    @property
    def user(self) -> str | None: ...

    @property
    def name(self) -> str: ...

    def open_channel(self, number: int) -> None:
        """Make channel ``number`` (its channel.open came) and answer open-ok."""
        ...


class FrameDispatch:
    """See the module docstring."""

    def __init__(
        self,
        port: DispatchPort,
        ctx: BrokerContext,
        methods: ConnectionMethods,
        held: HeldFrames,
    ) -> None:
        self._port = port
        self._ctx = ctx
        self._methods = methods
        self._held = held

    def connection_ended(self) -> None:
        """Its connection ended: held weakly from now on (no reference cycle with it:
        :mod:`common.weakly`; a frame's dispatch reads it strongly, as the hot path it is)."""
        self._port = weakly(self._port)

    def frame(self, ftype: int, channel: int, payload: bytes) -> None:
        """Handle one frame (errors raise: the connection's ``process`` closes it)."""
        port = self._port
        state = port.state
        if channel and state is S.OPEN:
            held = port.channels.get(channel)
            if (
                held is not None
                and held.held_frames is not None
                and self._held.defer(held, ftype, payload)
            ):
                return
        if ftype == framing.FRAME_METHOD:
            if channel == 0:
                self._methods.method(framing.unmarshal_method(payload))
                return
            if state is not S.OPEN:
                if state is S.CLOSING:
                    return
                raise AmqpError(
                    ReplyCode.UNEXPECTED_FRAME,
                    f"channel {channel} method before the connection is open",
                )
            ch = port.channels.get(channel)
            acl = self._ctx.acl
            if ch is not None and ch.state is ChannelState.OPEN and payload.startswith(PUBLISH_ID):
                denied = acl.check_publish(port.user, port.name, payload) if acl else None
                if denied is None:
                    ch.publish_method(payload)
                else:
                    ch.channel_error(denied)
                return
            method = framing.unmarshal_method(payload)
            if ch is None:
                if isinstance(method, commands.Channel.Open):
                    port.open_channel(channel)
                    return
                raise AmqpError(
                    ReplyCode.CHANNEL_ERROR,
                    f"expected 'channel.open' on channel {channel}, got {method.name}",
                )
            if acl is not None and ch.state is ChannelState.OPEN:
                denied = acl.check_method(port.user, port.name, method)
                if denied is not None:
                    ch.channel_error(denied)
                    return
            ch.method(method)
        elif ftype == framing.FRAME_HEADER or ftype == framing.FRAME_BODY:
            if state is not S.OPEN:
                if state is S.CLOSING:
                    return
                raise AmqpError(ReplyCode.UNEXPECTED_FRAME, "content frame before open")
            ch = port.channels.get(channel)
            if ch is None:
                raise AmqpError(
                    ReplyCode.CHANNEL_ERROR, f"content frame on channel {channel}, not open"
                )
            if ftype == framing.FRAME_HEADER:
                ch.content_header(payload)
            else:
                ch.content_body(payload)
        elif ftype == framing.FRAME_HEARTBEAT:
            if channel != 0:
                raise AmqpError(ReplyCode.FRAME_ERROR, f"heartbeat frame on channel {channel}")
        else:
            raise AmqpError(ReplyCode.FRAME_ERROR, f"unknown frame type {ftype}")
