"""The drill's clients: one per protocol, each an unmodified client library as our users
run it. :class:`PikaClient` speaks AMQP 0-9-1 (publisher confirms, acks);
:class:`ProtonClient` speaks AMQP 1.0 (python-qpid-proton's blocking API: a durable
message counts as confirmed once its ``accepted`` disposition came, a received one is
accepted).

Contract
========

- ``connect(role)`` tries each address of the URL list once, in order, and returns a
  :class:`DrillLink` on the drill's queue (declared durable, through 0-9-1: AMQP 1.0 has
  no declare), or raises :class:`ConnectFailed` with the last address's reason. The
  caller goes round the list again.
- A link's ``publish`` returns True (confirmed: a 0-9-1 confirm, a 1.0 ``accepted``) or
  False (nacked; released or rejected); its ``deliveries`` yields a message's body and its
  acknowledgement, or None when nothing came for a moment. Either raises :class:`Lost`
  when the connection is gone; ``finish`` ends consuming (deleting the queue if asked and
  empty) and closes; ``close`` only closes, never raising.
- The client libraries are imported when a client is made, not before (the drill's core
  and ``--help`` work without them).
- THREAD UNSAFE: one link per thread, as the libraries want.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from broker.ha.names import EPOCH_PROPERTY
from qpid_ha_cli.drill.settings import DrillSettings

__all__ = [
    "PROTOCOLS",
    "ConnectFailed",
    "DrillClient",
    "DrillLink",
    "Lost",
    "PikaClient",
    "ProtonClient",
    "make_client",
]

#: The protocols the drill's clients speak (``--protocol``).
PROTOCOLS = ("0-9-1", "1.0")


class ConnectFailed(Exception):
    """No address of the list took the connection (the last one's reason)."""


class Lost(Exception):
    """The connection went away under a publish or a delivery (the reason)."""


class DrillLink(Protocol):
    """One connection of the drill, on its queue."""

    address: str
    epoch: int | None

    def publish(self, body: bytes) -> bool: ...

    def deliveries(self, prefetch: int) -> Iterator[tuple[bytes, Callable[[], None]] | None]: ...

    def finish(self, delete_queue: bool) -> None: ...

    def close(self) -> None: ...


class DrillClient(Protocol):
    """Connections of one protocol to the drill's URL list."""

    protocol: str

    def connect(self, role: str) -> DrillLink: ...


def make_client(protocol: str, settings: DrillSettings) -> DrillClient:
    """The drill's client for ``protocol`` (one of :data:`PROTOCOLS`)."""
    if protocol == "1.0":
        return ProtonClient(settings)
    return PikaClient(settings)


def reason_of(exc: BaseException) -> str:
    """An exception as one line: its type and text."""
    text = str(exc).strip() or repr(exc)
    return " ".join(f"{type(exc).__name__}: {text}".split())


# -- AMQP 0-9-1: pika ---------------------------------------------------------------------
class PikaClient:
    """See the module docstring."""

    protocol = "0-9-1"

    def __init__(self, settings: DrillSettings) -> None:
        import pika  # the shell only

        self._pika = pika
        self.queue = settings.queue
        self._arguments = {"x-queue-type": settings.queue_type} if settings.queue_type else None
        self._properties = pika.BasicProperties(delivery_mode=2)
        self._params = [
            pika.ConnectionParameters(
                host=address.host,
                port=address.port,
                virtual_host=settings.vhost,
                credentials=pika.PlainCredentials(
                    settings.url.user or "guest", settings.url.password or "guest"
                ),
                connection_attempts=1,
                socket_timeout=2,
                blocked_connection_timeout=30,
            )
            for address in settings.url.addresses
        ]

    def connect(self, role: str) -> PikaLink:
        from pika.adapters.utils.connection_workflow import AMQPConnectorException

        pika = self._pika
        try:
            connection = pika.BlockingConnection(self._params)
            channel = connection.channel()
            channel.queue_declare(self.queue, durable=True, arguments=self._arguments)
        except (pika.exceptions.AMQPError, AMQPConnectorException, OSError, ValueError) as exc:
            # ValueError: pika's own word for a socket reset between the TCP connect and
            # its getpeername() ("Expected connected socket"), as when the broker is
            # SIGKILLed with this connection in its accept queue: a failed attempt.
            # AMQPConnectorException (not an AMQPError): the last address's attempt, e.g.
            # AMQPConnectorStackTimeout, a handshake not done within pika's stack timeout
            # (15 s) by a starved new primary under a reconnect storm: a failed attempt.
            raise ConnectFailed(reason_of(exc)) from None
        if role == "publisher":
            try:
                channel.confirm_delivery()
            except (pika.exceptions.AMQPError, OSError) as exc:
                with contextlib.suppress(Exception):
                    connection.close()
                raise ConnectFailed(reason_of(exc)) from None
        return PikaLink(pika, connection, channel, self.queue, self._properties)


class PikaLink:
    """A pika connection and channel on the drill's queue."""

    def __init__(
        self, pika: Any, connection: Any, channel: Any, queue: str, properties: Any
    ) -> None:
        self._pika = pika
        self._connection = connection
        self._channel = channel
        self._queue = queue
        self._properties = properties
        impl = connection._impl
        self.address = f"{impl.params.host}:{impl.params.port}"
        epoch = dict(impl.server_properties or {}).get(EPOCH_PROPERTY)
        self.epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None

    def publish(self, body: bytes) -> bool:
        pika = self._pika
        try:
            self._channel.basic_publish("", self._queue, body, self._properties)
        except pika.exceptions.NackError:
            return False
        except (pika.exceptions.AMQPError, OSError) as exc:
            raise Lost(reason_of(exc)) from None
        return True

    def deliveries(self, prefetch: int) -> Iterator[tuple[bytes, Callable[[], None]] | None]:
        pika = self._pika
        channel = self._channel
        try:
            channel.basic_qos(prefetch_count=prefetch)
            for method, _props, body in channel.consume(self._queue, inactivity_timeout=0.05):
                if method is None:
                    yield None
                    continue
                yield body, functools.partial(self._ack, method.delivery_tag)
        except (pika.exceptions.AMQPError, OSError) as exc:
            raise Lost(reason_of(exc)) from None

    def _ack(self, tag: int) -> None:
        pika = self._pika
        try:
            self._channel.basic_ack(tag)
        except (pika.exceptions.AMQPError, OSError) as exc:
            raise Lost(reason_of(exc)) from None

    def finish(self, delete_queue: bool) -> None:
        pika = self._pika
        try:
            self._channel.cancel()
            if delete_queue:
                with contextlib.suppress(pika.exceptions.AMQPError):
                    self._channel.queue_delete(self._queue, if_empty=True)
            self._connection.close()
        except (pika.exceptions.AMQPError, OSError) as exc:
            raise Lost(reason_of(exc)) from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._connection.is_open:
                self._connection.close()


# -- AMQP 1.0: python-qpid-proton -----------------------------------------------------------
class ProtonClient:
    """See the module docstring. A backup refuses a 1.0 client with a redirect (or
    ``connection:forced``): that address fails and the next one is tried."""

    protocol = "1.0"

    def __init__(self, settings: DrillSettings) -> None:
        self._declarer = PikaClient(settings)
        self.queue = settings.queue
        self._user = settings.url.user or "guest"
        self._password = settings.url.password or "guest"
        vhost = settings.vhost
        self._hostname = None if vhost == "/" else f"vhost:{vhost}"
        self._addresses = [f"{a.host}:{a.port}" for a in settings.url.addresses]

    def connect(self, role: str) -> ProtonLink:
        from proton.utils import BlockingConnection

        declared = self._declarer.connect("declare")  # 1.0 has no declare
        declared.close()
        reason = "no address"
        for address in self._addresses:
            kwargs: dict[str, Any] = {}
            if self._hostname is not None:
                kwargs["virtual_host"] = self._hostname
            try:
                connection = BlockingConnection(
                    f"amqp://{address}", timeout=2, user=self._user, password=self._password,
                    allowed_mechs="PLAIN", reconnect=False, **kwargs,
                )  # fmt: skip
                if role == "publisher":
                    link: Any = connection.create_sender(self.queue)
                else:
                    link = None  # the receiver is made with its credit (deliveries)
            except Exception as exc:  # proton's errors have no common base
                reason = f"{address}: {reason_of(exc)}"
                continue
            return ProtonLink(connection, link, address, self.queue, self._declarer)
        raise ConnectFailed(reason)


class ProtonLink:
    """A Proton blocking connection with a sender or a receiver on the drill's queue."""

    def __init__(
        self, connection: Any, sender: Any, address: str, queue: str, declarer: PikaClient
    ) -> None:
        self._declarer = declarer
        self._connection = connection
        self._sender = sender
        self._receiver: Any = None
        self._queue = queue
        self.address = address
        self.epoch: int | None = None  # a 1.0 open carries no epoch

    def publish(self, body: bytes) -> bool:
        from proton import Message
        from proton.utils import SendException

        message = Message(body=body, durable=True)
        message.inferred = True  # a data section: a 0-9-1 consumer reads the same body
        try:
            self._sender.send(message, timeout=30)
        except SendException:
            return False  # released or rejected
        except Exception as exc:
            raise Lost(reason_of(exc)) from None
        return True

    def deliveries(self, prefetch: int) -> Iterator[tuple[bytes, Callable[[], None]] | None]:
        from proton import Timeout

        try:
            receiver = self._receiver = self._connection.create_receiver(
                self._queue, credit=prefetch
            )
            while True:
                try:
                    message = receiver.receive(timeout=0.05)
                except Timeout:
                    yield None
                    continue
                body = message.body
                yield (bytes(body) if body is not None else b""), self._accept
        except Exception as exc:
            raise Lost(reason_of(exc)) from None

    def _accept(self) -> None:
        try:
            self._receiver.accept()
        except Exception as exc:
            raise Lost(reason_of(exc)) from None

    def finish(self, delete_queue: bool) -> None:
        try:
            if self._receiver is not None:
                self._receiver.close()
            self._connection.close()
        except Exception as exc:
            raise Lost(reason_of(exc)) from None
        if delete_queue:  # through 0-9-1, as it was declared
            with contextlib.suppress(ConnectFailed, Lost):
                self._declarer.connect("cleanup").finish(delete_queue=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._connection.close()
