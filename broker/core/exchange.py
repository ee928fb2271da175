"""Exchanges and bindings: where a published message goes.

An exchange of each AMQP type routes a message to the set of bound queues:
``direct`` (routing key equals binding key), ``fanout`` (every bound queue), ``topic``
(pattern match, :mod:`broker.core.topic`) and ``headers`` (:mod:`broker.core.headers_match`).
A :class:`Binding` holds the queue object itself so routing does no name look-ups.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.core.headers_match import headers_match, validate_binding
from broker.core.topic import topic_matches

if TYPE_CHECKING:
    from broker.core.message import Message
    from broker.core.queue import Queue

BindingKey = tuple[str, str, tuple[tuple[str, str], ...]]


def binding_key(queue: str, routing_key: str, arguments: dict[str, Any]) -> BindingKey:
    """Identity of a binding on one exchange: queue, key and arguments."""
    return (queue, routing_key, tuple(sorted((k, repr(v)) for k, v in arguments.items())))


@dataclass(eq=False, slots=True)
class Binding:
    """A queue bound to an exchange."""

    exchange: str
    queue: Queue
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> BindingKey:
        return binding_key(self.queue.name, self.routing_key, self.arguments)


class Exchange(ABC):
    """Base class: bookkeeping of bindings; subclasses route."""

    type = ""

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
        self.had_bindings = True
        self._changed()
        return True

    def unbind(self, key: BindingKey) -> Binding | None:
        binding = self.bindings.pop(key, None)
        if binding is not None:
            self._changed()
        return binding

    def _changed(self) -> None:
        """Bindings changed: subclasses rebuild their routing tables."""

    @abstractmethod
    def route(self, message: Message) -> list[Queue]:
        """The distinct queues the message goes to, in binding order."""


class DirectExchange(Exchange):
    type = "direct"

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._table: dict[str, list[Queue]] = {}
        super().__init__(name, **kwargs)

    def _changed(self) -> None:
        table: dict[str, list[Queue]] = {}
        for binding in self.bindings.values():
            queues = table.setdefault(binding.routing_key, [])
            if binding.queue not in queues:
                queues.append(binding.queue)
        self._table = table

    def route(self, message: Message) -> list[Queue]:
        return self._table.get(message.routing_key, [])


class DefaultExchange(DirectExchange):
    """The nameless exchange: every queue is implicitly bound by its own name."""

    def __init__(self, queues: dict[str, Queue]) -> None:
        super().__init__("", durable=True, builtin=True)
        self._queues = queues

    def route(self, message: Message) -> list[Queue]:
        queue = self._queues.get(message.routing_key)
        return [] if queue is None else [queue]


class FanoutExchange(Exchange):
    type = "fanout"

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._queues: list[Queue] = []
        super().__init__(name, **kwargs)

    def _changed(self) -> None:
        queues: list[Queue] = []
        for binding in self.bindings.values():
            if binding.queue not in queues:
                queues.append(binding.queue)
        self._queues = queues

    def route(self, message: Message) -> list[Queue]:
        return self._queues


class TopicExchange(Exchange):
    type = "topic"
    _CACHE_LIMIT = 10_000

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._cache: dict[str, list[Queue]] = {}
        super().__init__(name, **kwargs)

    def _changed(self) -> None:
        self._cache = {}

    def route(self, message: Message) -> list[Queue]:
        key = message.routing_key
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        queues: list[Queue] = []
        for binding in self.bindings.values():
            if binding.queue not in queues and topic_matches(binding.routing_key, key):
                queues.append(binding.queue)
        if len(self._cache) >= self._CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = queues
        return queues


class HeadersExchange(Exchange):
    type = "headers"

    def validate_binding(self, arguments: dict[str, Any]) -> None:
        validate_binding(arguments)

    def route(self, message: Message) -> list[Queue]:
        queues: list[Queue] = []
        headers = message.headers
        for binding in self.bindings.values():
            if binding.queue not in queues and headers_match(binding.arguments, headers):
                queues.append(binding.queue)
        return queues


EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    cls.type: cls for cls in (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange)
}
