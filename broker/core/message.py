"""A message as the broker holds it, and its per-queue entry.

A :class:`Message` is immutable content (exchange, routing key, raw properties, body) shared
by every queue it was routed to. Each queue wraps it in an :class:`Entry` carrying what is
per queue: the position (the queue-local sequence number, which the HA module uses as the
replication id), the expiry time, and whether it was delivered before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.core import properties

if TYPE_CHECKING:
    from broker.core.confirms import ConfirmHandle


class Message:
    """Content of one published message. Treat as immutable once routed."""

    __slots__ = (
        "_headers",
        "body",
        "confirm",
        "encoded_route",
        "exchange",
        "expiration_ms",
        "persistent",
        "properties_raw",
        "routing_key",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        properties_raw: bytes = properties.EMPTY,
        body: bytes = b"",
        *,
        confirm: ConfirmHandle | None = None,
        scanned: properties.ScannedProperties | None = None,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties_raw = properties_raw
        self.body = body
        self.confirm = confirm
        #: Opaque cache for the protocol layer (exchange and routing key as encoded once).
        self.encoded_route: bytes | None = None
        info = scanned if scanned is not None else properties.scan(properties_raw)
        self.persistent = info.delivery_mode == 2
        self.expiration_ms = properties.parse_expiration(info.expiration)
        self._headers: dict[str, Any] | None = None if info.has_headers else {}

    @property
    def headers(self) -> dict[str, Any]:
        """Application headers (decoded on first use)."""
        if self._headers is None:
            try:
                self._headers = properties.headers_of(self.properties_raw)
            except ValueError:  # a well-sized but undecodable table: route as no headers
                self._headers = {}
        return self._headers

    @property
    def size(self) -> int:
        return len(self.body)

    def __repr__(self) -> str:
        return f"Message({self.exchange!r}, {self.routing_key!r}, {len(self.body)} bytes)"


class Entry:
    """One message on one queue."""

    __slots__ = ("delivery_count", "expires_at", "message", "position")

    def __init__(self, message: Message, position: int, expires_at: float | None) -> None:
        self.message = message
        self.position = position
        self.expires_at = expires_at
        self.delivery_count = 0

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 0

    def __repr__(self) -> str:
        return f"Entry(#{self.position}, {self.message!r})"
