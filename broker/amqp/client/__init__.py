"""A small asyncio AMQP 0-9-1 client: the HA link to the primary, and admin tools.

This package's public face; import from here (``from broker.amqp.client import connect``).
One concept a module:

- :mod:`~broker.amqp.client.handshake`: :func:`connect` opens a TCP connection and runs the
  handshake (PLAIN, AMQPLAIN or ANONYMOUS; vhost ``/``) within ``timeout``; a broker that
  closes the handshake raises :class:`ConnectionRefusedByBroker` (403, 530, ...), anything
  else :class:`ConnectionFailed`.
- :mod:`~broker.amqp.client.connection`: :class:`AmqpClient` owns the socket, a reader
  task and a heartbeat task; however the connection ends, :meth:`AmqpClient.wait_closed`
  returns the reason and pending calls fail with it.
- :mod:`~broker.amqp.client.channel`: :class:`ClientChannel` declares, consumes (a
  callback per delivery, in wire order), acks, publishes (optionally confirmed), gets and
  closes; a raising callback closes the connection (541) with :class:`CallbackError`.
- :mod:`~broker.amqp.client.errors`: every error is a :class:`ClientError`.
- :mod:`~broker.amqp.client.wire`: :class:`Delivery` and the hand-packed frame formats.

Call direction: handshake → connection → channel; errors and wire are leaves.

THREAD UNSAFE: a client, its channels and its callbacks belong to the event loop that ran
:func:`connect` (asyncio's default loop or uvloop); use them from that loop only.
"""

from __future__ import annotations

from broker.amqp.client.channel import ClientChannel
from broker.amqp.client.connection import AmqpClient
from broker.amqp.client.errors import (
    CallbackError,
    ChannelClosedByBroker,
    ChannelClosedByClient,
    ClientError,
    ConnectionClosedByBroker,
    ConnectionClosedByClient,
    ConnectionFailed,
    ConnectionRefusedByBroker,
    PublishNacked,
)
from broker.amqp.client.handshake import connect
from broker.amqp.client.wire import Delivery

__all__ = [
    "AmqpClient",
    "CallbackError",
    "ChannelClosedByBroker",
    "ChannelClosedByClient",
    "ClientChannel",
    "ClientError",
    "ConnectionClosedByBroker",
    "ConnectionClosedByClient",
    "ConnectionFailed",
    "ConnectionRefusedByBroker",
    "Delivery",
    "PublishNacked",
    "connect",
]
