"""The connection handshake's content, sans-I/O: what the broker offers in connection.start,
how connection.tune-ok is checked, and connection.open-ok with ``known-hosts``.

:class:`broker.amqp.connection.Connection` runs the handshake's states and sends these.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.context import (
    HA_BACKUP_PROPERTY,
    BrokerContext,
    ConnectionSettings,
    counts_toward_limits,
)
from broker.core.errors import AmqpError, ReplyCode
from broker.core.vhost import VirtualHost

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


#: The protocol's largest channel-max.
CHANNEL_MAX_LIMIT = 65535


def channel_max_offer(settings: ConnectionSettings, client_properties: dict[str, Any]) -> int:
    """channel-max for connection.tune: the setting (RabbitMQ's 2047 by default), but the
    protocol's largest to an HA backup's link, which holds a channel per replicated queue."""
    if client_properties.get(HA_BACKUP_PROPERTY):
        return CHANNEL_MAX_LIMIT
    return settings.channel_max


def tune_before_refusal() -> commands.Connection.Tune:
    """connection.tune to a client whose login was skipped because connection.open will
    refuse it (:meth:`~broker.amqp.context.AdmissionPolicy.refusal_before_login`): 0 for
    each limit (the protocol's "no limit offered"), so that a client not logged in learns
    none of the broker's settings; it then sends tune-ok and open as to any broker, and
    meets the refusal where it always did (pika calls a close before connection.tune an
    authentication error, one after it an access refusal)."""
    return commands.Connection.Tune(channel_max=0, frame_max=0, heartbeat=0)


def negotiate_tune(
    settings: ConnectionSettings, method: commands.Connection.TuneOk, channel_max_offered: int
) -> tuple[int, int, int]:
    """The client's connection.tune-ok checked against what was offered: (frame_max,
    channel_max, heartbeat); 0 means the offer. NOT_ALLOWED (530) beyond the offer."""
    frame_max = int(method.frame_max or 0) or settings.frame_max
    channel_max = int(method.channel_max or 0) or channel_max_offered
    if frame_max < framing.FRAME_MIN_SIZE or frame_max > settings.frame_max:
        raise AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"frame_max={frame_max} outside {framing.FRAME_MIN_SIZE}..{settings.frame_max}",
            10,
            31,
        )
    if channel_max > channel_max_offered:
        raise AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"channel_max={channel_max} exceeds the broker's {channel_max_offered}",
            10,
            31,
        )
    return frame_max, channel_max, int(method.heartbeat or 0)


#: start-ok on a plain socket of a broker with --require-encryption.
ENCRYPTION_REQUIRED = (
    "encryption required: this broker accepts TLS connections only"
    " (require-encryption); connect to its ssl-port"
)


def login_refused(mechanism: str) -> AmqpError:
    """ACCESS_REFUSED (403) for a failed login, in RabbitMQ's words (the reason is logged,
    never told to the client)."""
    return AmqpError(
        ReplyCode.ACCESS_REFUSED,
        f"Login was refused using authentication mechanism {mechanism}.",
        10,
        11,
    )


def open_vhost(ctx: BrokerContext, user: str | None, connection: str, name: str) -> VirtualHost:
    """connection.open's checks before admission: the virtual host exists, the ACL lets
    ``user`` in and the connection limit is not reached. Raises NOT_ALLOWED (530) or
    ACCESS_REFUSED (403) as RabbitMQ does; counts a refusal by the limit."""
    found = ctx.find_vhost(name)
    if found is None:  # RabbitMQ's words
        raise AmqpError(ReplyCode.NOT_ALLOWED, f"vhost {name} not found", 10, 40)
    if not ctx.authenticator.may_open(user, name):  # a cluster user without a permission
        raise AmqpError(
            ReplyCode.ACCESS_REFUSED, f"access to vhost '{name}' refused for user '{user}'", 10, 40
        )
    if ctx.acl is not None:
        denied = ctx.acl.check(user, connection, "access", "virtualhost", {"name": name})
        if denied is not None:
            raise AmqpError(ReplyCode.ACCESS_REFUSED, denied.reply_text, 10, 40)
    if ctx.connection_limit_reached(ctx.settings.max_connections):
        ctx.connections_refused_total += 1
        raise AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"connection limit ({ctx.settings.max_connections}) reached",
            10,
            40,
        )
    return found


def check_vhost_connections(
    ctx: BrokerContext, client_properties: dict[str, Any], user: str | None, vhost: VirtualHost
) -> None:
    """530 NOT_ALLOWED, in RabbitMQ's words, when ``vhost`` holds its ``max-connections``
    of clients already (:mod:`broker.core.vhost_limits`); counts the refusal. Asked after
    admission: a backup refuses a client as not the primary first."""
    limits = ctx.authenticator.cluster_users.limits
    if not limits.of(vhost.name) or not counts_toward_limits(client_properties):
        return  # most vhosts have no limit: no count of the connections
    try:
        limits.check_connection(vhost.name, user, ctx.client_connections_to(vhost))
    except AmqpError:
        ctx.connections_refused_total += 1
        raise


def close_method(reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0) -> Method:
    """connection.close with a reply code and text (the failing method's ids, 0 for none)."""
    return commands.Connection.Close(
        reply_code=reply_code, reply_text=reply_text, class_id=class_id, method_id=method_id
    )


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
