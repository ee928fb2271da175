"""A message as the broker holds it, and its per-queue entry.

A :class:`Message` is immutable content (exchange, routing key, raw properties, body) shared
by every queue it was routed to. Each queue wraps it in an :class:`Entry` carrying what is
per queue: the position (the queue-local sequence number, which the HA module uses as the
replication id), the expiry time, and whether it was delivered before. A message published
in a transaction carries the transaction's :class:`TxMark` (``Message.tx``), which HA
replication reads (docs/ha-design.md, "Transactions"); every other message has None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.core import properties
from broker.core.raw_alloc import raw_allocated

if TYPE_CHECKING:
    from broker.core.confirms import ConfirmHandle


class TxMark:
    """The mark of one committed transaction on its messages (``Message.tx``).

    ``id`` increases with each commit in this process (one broker per process); ``seen``
    holds the (queue name, position) of each of the transaction's entries that an HA
    replicating subscription saw enqueued: filled during the commit, read by the primary's
    subscriptions after it (broker/ha/replicating_subscription.py). No I/O.
    """

    __slots__ = ("id", "seen")

    _next_id = 1

    def __init__(self) -> None:
        self.id = TxMark._next_id
        TxMark._next_id += 1
        self.seen: set[tuple[str, int]] = set()

    @staticmethod
    def next_id() -> int:
        """The id the next transaction will get."""
        return TxMark._next_id

    def __repr__(self) -> str:
        return f"TxMark({self.id}, {len(self.seen)} seen)"


@raw_allocated
class Message:
    """Content of one published message. Treat as immutable once routed."""

    __slots__ = (
        "body",
        "confirm",
        "encoded_route",
        "exchange",
        "expiration_ms",
        "persistent",
        "properties_raw",
        "routing_key",
        "store_id",
        "tx",
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
        #: The transaction it was published in (set by tx.commit), else None.
        self.tx: TxMark | None = None
        #: Its id in the message store once written there (broker/store), else 0.
        self.store_id = 0
        info = scanned if scanned is not None else properties.scan(properties_raw)
        self.persistent = info.delivery_mode == 2
        expiration = info.expiration  # most messages have none: no call for it
        self.expiration_ms = None if expiration is None else properties.parse_expiration(expiration)

    @property
    def headers(self) -> dict[str, Any]:
        """Application headers, decoded at each read (a headers exchange's routing reads
        them; a message keeps no table, not even an empty one, while it waits in a queue)."""
        try:
            return properties.headers_of(self.properties_raw)
        except ValueError:  # a well-sized but undecodable table: route as no headers
            return {}

    @property
    def size(self) -> int:
        return len(self.body)

    def __repr__(self) -> str:
        return f"Message({self.exchange!r}, {self.routing_key!r}, {len(self.body)} bytes)"


@raw_allocated
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
