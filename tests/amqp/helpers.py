"""A scripted AMQP client driving a sans-I/O broker Connection, no sockets (h11's pair)."""

from __future__ import annotations

from typing import Any

from pamqp import body, commands, frame, header
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.connection import Connection
from broker.amqp.context import BrokerContext, ConnectionSettings
from broker.core.vhost import VirtualHost
from broker.security.sasl import Authenticator, UserDatabase


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_context(clock: FakeClock | None = None, **settings: Any) -> BrokerContext:
    clock = clock or FakeClock()
    return BrokerContext(
        vhost=VirtualHost(clock=clock),
        authenticator=Authenticator(UserDatabase.default(), True),
        settings=ConnectionSettings(**settings),
        clock=clock,
    )


class Client:
    """Feeds frames to a Connection and decodes what it sends back."""

    def __init__(self, ctx: BrokerContext, peer: str = "test:1") -> None:
        self.ctx = ctx
        self.conn = Connection(ctx, peer)
        self.frames: list[tuple[int, Any]] = []
        self._pending = b""

    # sending
    def send_bytes(self, data: bytes) -> None:
        self.feed(data)
        self._collect()

    def feed(self, data: bytes) -> None:
        """``receive_data``, then a pending password check run here (the shell runs it in
        a thread)."""
        self.conn.receive_data(data)
        check = self.conn.login_check
        if check is not None:
            self.conn.password_checked(check.run())
        while self.conn.unparsed:  # a read's slice spent: the shell goes on next turn
            self.conn.parse_more()

    def send(self, channel: int, method: Any) -> None:
        self.send_bytes(frame.marshal(method, channel))

    def publish(
        self,
        channel: int,
        body_bytes: bytes,
        exchange: str = "",
        routing_key: str = "",
        properties: commands.Basic.Properties | None = None,
        mandatory: bool = False,
    ) -> None:
        data = frame.marshal(
            commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
            channel,
        )
        data += frame.marshal(
            header.ContentHeader(0, len(body_bytes), properties or commands.Basic.Properties()),
            channel,
        )
        if body_bytes:
            data += frame.marshal(body.ContentBody(body_bytes), channel)
        self.send_bytes(data)

    # receiving
    def _collect(self) -> None:
        data = self._pending + self.conn.data_to_send()
        pos = 0
        while pos < len(data):
            try:
                used, channel, value = frame.unmarshal(data[pos:])
            except Exception:
                break
            self.frames.append((channel, value))
            pos += used
        self._pending = data[pos:]

    def take(self) -> list[tuple[int, Any]]:
        self._collect()
        frames, self.frames = self.frames, []
        return frames

    def methods(self) -> list[Any]:
        return [f for _, f in self.take() if isinstance(f, Method)]

    def expect(self, cls: type[Method], channel: int | None = None) -> Any:
        for ch, value in self.take():
            if isinstance(value, cls) and (channel is None or ch == channel):
                return value
        raise AssertionError(f"no {cls.__name__} received")

    # handshake
    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        heartbeat: int = 0,
        frame_max: int = 131072,
        capabilities: dict[str, Any] | None = None,
        client_properties: dict[str, Any] | None = None,
    ) -> None:
        self.send_bytes(framing.PROTOCOL_HEADER)
        self.expect(commands.Connection.Start)
        self.send(
            0,
            commands.Connection.StartOk(
                client_properties={
                    "product": "test-client",
                    "capabilities": capabilities or {"consumer_cancel_notify": True},
                    **(client_properties or {}),
                },
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
                locale="en_US",
            ),
        )
        self.expect(commands.Connection.Tune)
        self.send(
            0,
            commands.Connection.TuneOk(channel_max=0, frame_max=frame_max, heartbeat=heartbeat),
        )
        self.send(0, commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)

    def open_channel(self, number: int = 1) -> None:
        self.send(number, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk, number)


def open_client(ctx: BrokerContext | None = None, **kwargs: Any) -> Client:
    client = Client(ctx or make_context())
    client.handshake(**kwargs)
    client.open_channel(1)
    return client
