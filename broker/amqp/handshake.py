"""The connection handshake's content, sans-I/O: what the broker offers in connection.start,
how connection.tune-ok is checked, and connection.open-ok with ``known-hosts``.

:class:`broker.amqp.connection.Connection` runs the handshake's states and sends these.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from pamqp import commands

from broker.amqp import framing
from broker.amqp.context import ConnectionSettings
from broker.core.errors import AmqpError, ReplyCode

#: What the broker can do, as RabbitMQ's clients look for it in server_properties.
CAPABILITIES = {
    "publisher_confirms": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "per_consumer_qos": True,
    "authentication_failure_close": True,
    "connection.blocked": True,
    "exchange_exchange_bindings": True,
    "direct_reply_to": True,
    "consumer_priorities": True,
}


def client_description(properties: dict[str, Any]) -> str:
    """A client's product and version from its start-ok properties (``connection_opened``)."""
    product = properties.get("product", "?")
    version = properties.get("version", "")
    return f"{product} {version}".strip()


def start_method(
    settings: ConnectionSettings, extra: dict[str, Any], mechanisms: Iterable[str]
) -> commands.Connection.Start:
    """connection.start: the server's properties (``extra`` from the HA role) and the
    SASL mechanisms offered."""
    return commands.Connection.Start(
        version_major=0,
        version_minor=9,
        server_properties={
            "product": settings.product,
            "version": settings.version,
            "platform": "Python",
            "information": "active-passive HA AMQP 0-9-1 broker",
            "cluster_name": settings.node_name,
            "capabilities": dict(CAPABILITIES),
            **extra,
        },
        mechanisms=" ".join(mechanisms),
        locales="en_US",
    )


def negotiate_tune(
    settings: ConnectionSettings, method: commands.Connection.TuneOk
) -> tuple[int, int, int]:
    """The client's connection.tune-ok checked against what was offered: (frame_max,
    channel_max, heartbeat); 0 means the offer. NOT_ALLOWED (530) beyond the offer."""
    frame_max = int(method.frame_max or 0) or settings.frame_max
    channel_max = int(method.channel_max or 0) or settings.channel_max
    if frame_max < framing.FRAME_MIN_SIZE or frame_max > settings.frame_max:
        raise AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"frame_max={frame_max} outside {framing.FRAME_MIN_SIZE}..{settings.frame_max}",
            10,
            31,
        )
    if channel_max > settings.channel_max:
        raise AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"channel_max={channel_max} exceeds the broker's {settings.channel_max}",
            10,
            31,
        )
    return frame_max, channel_max, int(method.heartbeat or 0)


class OpenOkWithHosts(commands.Connection.OpenOk):
    """connection.open-ok that carries ``known-hosts``.

    AMQP 0-8 defined the field; 0-9-1 keeps it as a reserved short string, which pamqp
    insists be empty. Clients decode it as a short string whatever it holds: pika keeps it
    (``connection.known_hosts``), aiormq and py-amqp skip it.
    """

    def validate(self) -> None:
        if len(self.known_hosts.encode()) > 255:
            raise ValueError("known_hosts is longer than 255 bytes")


@runtime_checkable
class AdvertisesKnownHosts(Protocol):
    """An admission policy that tells admitted clients where the service is."""

    def known_hosts(self) -> str:
        """connection.open-ok's ``known-hosts`` (a short string, "" for none)."""
        ...
