"""Exchanges and bindings: where a published message goes.

An exchange of each AMQP type routes a message to the set of bound destinations, queues
and (exchange-to-exchange bindings, RabbitMQ's extension) other exchanges: ``direct``
(routing key equals binding key), ``fanout`` (every binding), ``topic`` (pattern match,
:mod:`broker.core.topic`) and ``headers`` (:mod:`broker.core.headers_match`). A
:class:`Binding` holds the destination object itself so routing does no name look-ups; the
virtual host follows the exchanges an exchange routes to (:meth:`VirtualHost.route`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from broker.core.headers_match import headers_match, validate_binding
from broker.core.topic import topic_matches

if TYPE_CHECKING:
    from broker.core.message import Message
    from broker.core.queue import Queue

#: A binding's identity on its exchange: destination type, destination, key, arguments.
BindingKey = tuple[str, str, str, tuple[tuple[str, str], ...]]

#: Where an exchange routes a message: queues, and exchanges the virtual host follows.
Destination: TypeAlias = "Queue | Exchange"

#: Destination types, as RabbitMQ's management API names them.
QUEUE = "queue"
EXCHANGE = "exchange"


def binding_key(
    destination: str,
    routing_key: str,
    arguments: dict[str, Any],
    destination_type: str = QUEUE,
) -> BindingKey:
    """Identity of a binding on one exchange: destination (a queue by default), key and
    arguments. A queue and an exchange may have the same name: the type tells them apart."""
    return (
        destination_type,
        destination,
        routing_key,
        tuple(sorted((k, repr(v)) for k, v in arguments.items())),
    )


@dataclass(eq=False, slots=True)
class Binding:
    """A queue, or another exchange, bound to an exchange (``exchange`` is the source)."""

    exchange: str
    destination: Queue | Exchange
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def to_exchange(self) -> bool:
        return isinstance(self.destination, Exchange)

    @property
    def destination_type(self) -> str:
        return EXCHANGE if isinstance(self.destination, Exchange) else QUEUE

    @property
    def queue(self) -> Queue:
        """The destination queue (TypeError for an exchange-to-exchange binding)."""
        destination = self.destination
        if isinstance(destination, Exchange):
            raise TypeError(f"binding to exchange '{destination.name}' has no queue")
        return destination

    @property
    def key(self) -> BindingKey:
        return binding_key(
            self.destination.name, self.routing_key, self.arguments, self.destination_type
        )


class Exchange(ABC):
    """Base class: bookkeeping of bindings; subclasses route."""

    type = ""
    #: The name of the virtual host the exchange is in (set by it).
    vhost: str = "/"

    def __init__(
        self,
        name: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
        builtin: bool = False,
    ) -> None:
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.builtin = builtin
        self.bindings: dict[BindingKey, Binding] = {}
        #: How many of the bindings have an exchange as destination (0: routes to queues).
        self.exchange_destinations = 0
        self.had_bindings = False
        self.routed_total = 0
        self.unroutable_total = 0

    @property
    def alternate_exchange(self) -> str | None:
        value = self.arguments.get("alternate-exchange")
        return value if isinstance(value, str) else None

    def validate_binding(self, arguments: dict[str, Any]) -> None:
        """Raise an AmqpError for binding arguments this type refuses."""

    def bind(self, binding: Binding) -> bool:
        """Add a binding; False when an identical one exists already."""
        key = binding.key
        if key in self.bindings:
            return False
        self.bindings[key] = binding
        if binding.to_exchange:
            self.exchange_destinations += 1
        self.had_bindings = True
        self._changed()
        return True

    def unbind(self, key: BindingKey) -> Binding | None:
        binding = self.bindings.pop(key, None)
        if binding is not None:
            if binding.to_exchange:
                self.exchange_destinations -= 1
            self._changed()
        return binding

    def _changed(self) -> None:
        """Bindings changed: subclasses rebuild their routing tables."""

    @abstractmethod
    def route(self, message: Message) -> list[Destination]:
        """The distinct destinations the message goes to, in binding order."""


class DirectExchange(Exchange):
    type = "direct"

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._table: dict[str, list[Destination]] = {}
        super().__init__(name, **kwargs)

    def _changed(self) -> None:
        table: dict[str, list[Destination]] = {}
        for binding in self.bindings.values():
            found = table.setdefault(binding.routing_key, [])
            if binding.destination not in found:
                found.append(binding.destination)
        self._table = table

    def route(self, message: Message) -> list[Destination]:
        return self._table.get(message.routing_key, [])


class DefaultExchange(DirectExchange):
    """The nameless exchange: every queue is implicitly bound by its own name."""

    def __init__(self, queues: dict[str, Queue], replies: dict[str, Queue] | None = None) -> None:
        super().__init__("", durable=True, builtin=True)
        self._queues = queues
        #: Direct reply-to names (broker.core.direct_reply), routed by name too.
        self._replies: dict[str, Queue] = {} if replies is None else replies

    def route(self, message: Message) -> list[Destination]:
        queue = self._queues.get(message.routing_key)
        if queue is None:
            queue = self._replies.get(message.routing_key) if self._replies else None
            if queue is None:
                return []
        return [queue]


class FanoutExchange(Exchange):
    type = "fanout"

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._destinations: list[Destination] = []
        super().__init__(name, **kwargs)

    def _changed(self) -> None:
        found: list[Destination] = []
        for binding in self.bindings.values():
            if binding.destination not in found:
                found.append(binding.destination)
        self._destinations = found

    def route(self, message: Message) -> list[Destination]:
        return self._destinations


class TopicExchange(Exchange):
    type = "topic"
    _CACHE_LIMIT = 10_000

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._cache: dict[str, list[Destination]] = {}
        super().__init__(name, **kwargs)

    def _changed(self) -> None:
        self._cache = {}

    def route(self, message: Message) -> list[Destination]:
        key = message.routing_key
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        found: list[Destination] = []
        for binding in self.bindings.values():
            if binding.destination not in found and topic_matches(binding.routing_key, key):
                found.append(binding.destination)
        if len(self._cache) >= self._CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = found
        return found


class HeadersExchange(Exchange):
    type = "headers"

    def validate_binding(self, arguments: dict[str, Any]) -> None:
        validate_binding(arguments)

    def route(self, message: Message) -> list[Destination]:
        found: list[Destination] = []
        headers = message.headers
        for binding in self.bindings.values():
            if binding.destination not in found and headers_match(binding.arguments, headers):
                found.append(binding.destination)
        return found


EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    cls.type: cls for cls in (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange)
}
