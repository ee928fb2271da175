"""The virtual host ``/``: every exchange, queue and binding, and the rules that change them.

This is where AMQP's declare/delete/bind semantics live (with the errors and reply codes the
spec and RabbitMQ give), where a published message is routed (through exchange-to-exchange
bindings and alternate exchanges, each exchange visited once), and where dropped messages
are dead-lettered. It does no I/O; the protocol
layer calls it and turns :class:`~broker.core.errors.AmqpError` into a channel or connection
close.

Configuration listeners (the HA module's broker replicator) hear every queue, exchange and
binding created or deleted.

THREAD UNSAFE: one event loop owns the virtual host.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from broker.core.dead_letter import DeadLetters
from broker.core.declare_contract import DeclareContract
from broker.core.direct_reply import DirectReplies
from broker.core.errors import (
    AmqpError,
    ReplyCode,
    access_refused,
    not_found,
    precondition_failed,
)
from broker.core.exchange import (
    EXCHANGE,
    EXCHANGE_TYPES,
    Binding,
    DefaultExchange,
    Destination,
    Exchange,
    binding_key,
)
from broker.core.field_tables import check_arguments
from broker.core.message import Message
from broker.core.queue import Queue
from broker.core.vhost_limits import VhostLimits
from broker.core.vhost_rules import (
    BUILTIN_EXCHANGES,
    EQUIVALENCE_ARGS,
    VHOST,
    PublishResult,
    check_exchange_equivalent,
    check_queue_equivalent,
    where,
)
from common.slices import SLICE, Steps, run_steps

__all__ = ["BUILTIN_EXCHANGES", "EQUIVALENCE_ARGS", "VHOST", "PublishResult", "VirtualHost"]

#: The result of a publish that n queues took and none refused, for n below 17: immutable,
#: so shared (a frozen dataclass made at each publish was one object and a slow __init__ a
#: message).
_ACCEPTED_BY = tuple(PublishResult(n, 0) for n in range(17))


class ConfigListener(Protocol):
    """Hears configuration changes (the HA broker replicator)."""

    def queue_declared(self, queue: Queue) -> None: ...

    def queue_deleted(self, queue: Queue) -> None: ...

    def exchange_declared(self, exchange: Exchange) -> None: ...

    def exchange_deleted(self, exchange: Exchange) -> None: ...

    def bound(self, binding: Binding) -> None: ...

    def unbound(self, binding: Binding) -> None: ...


class QueueConsumerOwner(Protocol):
    """A consumer that must hear when its queue is deleted under it."""

    def queue_deleted(self, queue: Queue) -> None: ...


class VirtualHost:
    """Exchanges, queues and bindings of one virtual host."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        default_queue_limit: int = 0,
        name: str = VHOST,
    ) -> None:
        self.name = name
        self.clock = clock
        self.wall_clock = wall_clock
        self.default_queue_limit = default_queue_limit
        self.queues: dict[str, Queue] = {}
        #: Direct reply-to's reply names, each with its unlisted queue.
        self.replies = DirectReplies(clock)
        self.exchanges: dict[str, Exchange] = {
            "": DefaultExchange(self.queues, self.replies.queues)
        }
        for ex_name, ex_type in BUILTIN_EXCHANGES.items():
            self.exchanges[ex_name] = EXCHANGE_TYPES[ex_type](ex_name, durable=True, builtin=True)
        for builtin in self.exchanges.values():
            builtin.vhost = name
        self._queue_bindings: dict[str, list[Binding]] = {}
        #: Exclusive queues by their owner's id (a connection's close deletes its own
        #: without a scan of every queue: 10,000 queues made each close of any
        #: connection cost milliseconds, thousands of them at a fail-over)
        self._exclusive: dict[int, dict[str, Queue]] = {}
        #: Exchange-to-exchange bindings by destination exchange name.
        self._exchange_bindings: dict[str, list[Binding]] = {}
        self.listeners: list[ConfigListener] = []
        #: Asked before a client's new queue, exchange or binding is created (an HA
        #: cluster member's replication contract); None: nothing to ask.
        self.contract: DeclareContract | None = None
        #: The vhosts' limits (``max-queues`` asked for a client's new queue); None: none.
        self.limits: VhostLimits | None = None
        self.dead_letters = DeadLetters(
            self.exchanges, self.route, self.publish, lambda: self.wall_clock()
        )
        self.published_total = 0
        self.unroutable_total = 0

    def hold_contract(self, contract: DeclareContract | None) -> None:
        """Ask ``contract`` before creating what a client declares (as VirtualHosts's)."""
        self.contract = contract

    # -- exchanges ---------------------------------------------------------------------
    def exchange(self, name: str) -> Exchange:
        try:
            return self.exchanges[name]
        except KeyError:
            raise not_found(f"no exchange '{name}' in vhost '{self.name}'") from None

    def declare_exchange(
        self,
        name: str,
        type: str,
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
        replicated: bool = False,
    ) -> Exchange:
        """exchange.declare: create, or check an existing exchange is equivalent.
        ``replicated``: made by HA replication or store recovery, not a client's (the
        contract is not asked)."""
        arguments = dict(arguments or {})
        existing = self.exchanges.get(name)
        if name == "":
            raise access_refused("operation not permitted on the default exchange")
        if passive:
            if existing is None:
                raise not_found(f"no exchange '{name}' in vhost '{self.name}'")
            return existing
        if existing is None and name.startswith("amq."):
            raise access_refused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        cls = EXCHANGE_TYPES.get(type)
        if cls is None:
            raise AmqpError(ReplyCode.COMMAND_INVALID, f"unknown exchange type '{type}'")
        alternate = arguments.get("alternate-exchange")
        if alternate is not None and not isinstance(alternate, str):
            raise precondition_failed(
                f"invalid arg 'alternate-exchange' for exchange '{name}': {alternate!r}"
            )
        if existing is not None:
            check_exchange_equivalent(
                self.name, existing, type, durable, auto_delete, internal, arguments
            )
            return existing
        if not replicated:
            check_arguments(where(self.name, f"exchange '{name}'"), arguments)
            if self.contract is not None:
                self.contract.check_exchange(self.name, name, arguments)
        exchange = cls(
            name, durable=durable, auto_delete=auto_delete, internal=internal, arguments=arguments
        )
        exchange.vhost = self.name
        self.exchanges[name] = exchange
        for listener in self.listeners:
            listener.exchange_declared(exchange)
        return exchange

    def delete_exchange(
        self, name: str, *, if_unused: bool = False, replicated: bool = False
    ) -> None:
        """exchange.delete; deleting an exchange that does not exist succeeds (RabbitMQ).
        ``replicated``: the primary's event, applied by a backup (see :meth:`unbind`)."""
        exchange = self.exchanges.get(name)
        if exchange is None:
            return
        if exchange.builtin:
            raise access_refused(f"operation not permitted on exchange '{name or 'amq.default'}'")
        if if_unused and exchange.bindings:
            raise precondition_failed(f"exchange '{name}' in vhost '{self.name}' in use")
        for binding in list(exchange.bindings.values()):
            self._remove_binding(exchange, binding)
        sources: list[Exchange] = []
        for binding in list(self._exchange_bindings.pop(name, [])):
            source = self.exchanges.get(binding.exchange)
            if source is not None and source is not exchange:
                self._remove_binding(source, binding)
                sources.append(source)
        del self.exchanges[name]
        for listener in self.listeners:
            listener.exchange_deleted(exchange)
        for source in sources:
            if source.name in self.exchanges and not replicated:
                self._maybe_auto_delete_exchange(source)

    # -- queues ------------------------------------------------------------------------
    def queue(self, name: str, owner: object | None = None) -> Queue:
        """Look up a queue, refusing one that is exclusive to another connection."""
        queue = self.queues.get(name)
        if queue is None:
            raise not_found(f"no queue '{name}' in vhost '{self.name}'")
        if owner is not None and queue.is_exclusive_to(owner):
            raise AmqpError(
                ReplyCode.RESOURCE_LOCKED,
                f"cannot obtain exclusive access to locked queue '{name}' in vhost '{self.name}'."
                " It could be originally declared on another connection or the exclusive"
                " property value does not match that of the original declaration.",
            )
        return queue

    @staticmethod
    def generate_queue_name() -> str:
        return "amq.gen-" + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode()[:22]

    def declare_queue(
        self,
        name: str,
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        owner: object | None = None,
        replicated: bool = False,
        uuid: str | None = None,
    ) -> Queue:
        """queue.declare: create, or check an existing queue is equivalent.

        ``replicated`` is set by HA replication on a backup (and by store recovery): it may
        create the server-named (``amq.gen-``) queues its primary has; ``uuid``, the
        :attr:`~broker.core.queue.Queue.uuid` a new queue gets (the primary's, the store's).
        """
        arguments = dict(arguments or {})
        if passive:
            if name == "":
                raise not_found(f"no queue '' in vhost '{self.name}'")
            queue = self.queue(name, owner)
            queue.touch()
            return queue
        if name == "":
            name = self.generate_queue_name()
            while name in self.queues:
                name = self.generate_queue_name()
        elif name.startswith("amq.") and name not in self.queues and not replicated:
            raise access_refused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        existing = self.queues.get(name)
        if existing is not None:
            self.queue(name, owner)  # exclusivity check
            if exclusive != (existing.exclusive_owner is not None):
                # RabbitMQ answers a changed exclusive flag with RESOURCE_LOCKED.
                raise AmqpError(
                    ReplyCode.RESOURCE_LOCKED,
                    f"cannot obtain exclusive access to locked queue '{name}' in vhost"
                    f" '{self.name}'. The exclusive property value does not match that of"
                    " the original declaration.",
                )
            check_queue_equivalent(self.name, existing, durable, exclusive, auto_delete, arguments)
            existing.touch()
            return existing
        if not replicated:
            check_arguments(where(self.name, f"queue '{name}'"), arguments)
            if self.contract is not None:
                self.contract.check_queue(self.name, name, arguments)
            if self.limits is not None:
                self.limits.check_queue(self.name, name, len(self.queues))
        queue = Queue(
            name,
            clock=self.clock,
            durable=durable,
            exclusive_owner=owner if exclusive else None,
            auto_delete=auto_delete,
            arguments=arguments,
            dead_letter=self.dead_letters.dead_letter,
            default_limit_bytes=self.default_queue_limit,
            uuid=uuid,
        )
        queue.vhost = self.name
        self.queues[name] = queue
        self._queue_bindings[name] = []
        if queue.exclusive_owner is not None:
            self._exclusive.setdefault(id(queue.exclusive_owner), {})[name] = queue
        for listener in self.listeners:
            listener.queue_declared(queue)
        return queue

    def delete_queue(
        self,
        name: str,
        *,
        if_unused: bool = False,
        if_empty: bool = False,
        owner: object | None = None,
        replicated: bool = False,
    ) -> int:
        """queue.delete: returns the number of ready messages deleted with it.
        ``replicated``: the primary's event, applied by a backup (see :meth:`unbind`)."""
        if name not in self.queues:
            return 0
        queue = self.queue(name, owner)
        if if_unused and queue.consumer_count:
            raise precondition_failed(f"queue '{name}' in vhost '{self.name}' in use")
        if if_empty and queue.message_count:
            raise precondition_failed(f"queue '{name}' in vhost '{self.name}' is not empty")
        return self._delete_queue(queue, replicated=replicated)

    def _delete_queue(self, queue: Queue, *, replicated: bool = False) -> int:
        count = queue.message_count
        self.queues.pop(queue.name, None)
        if queue.exclusive_owner is not None:
            owned = self._exclusive.get(id(queue.exclusive_owner))
            if owned is not None and owned.get(queue.name) is queue:
                del owned[queue.name]
                if not owned:
                    del self._exclusive[id(queue.exclusive_owner)]
        for binding in self._queue_bindings.pop(queue.name, []):
            exchange = self.exchanges.get(binding.exchange)
            if exchange is not None:
                exchange.unbind(binding.key)
                if not replicated:
                    self._maybe_auto_delete_exchange(exchange)
        consumers = queue.close()
        for listener in self.listeners:  # the store and the backups first: a consumer is
            listener.queue_deleted(queue)  # told once they hold the deletion (channel_consume)
        for consumer in consumers:
            if hasattr(consumer, "queue_deleted"):
                consumer.queue_deleted(queue)
        return count

    def purge_queue(self, name: str, owner: object | None = None) -> int:
        return self.queue(name, owner).purge()

    def consumer_cancelled(self, queue: Queue) -> None:
        """A consumer left ``queue``: delete it if it is auto-delete and now unused."""
        if self.replies.owns(queue):
            self.replies.close(queue)
            return
        if queue.auto_delete and queue.consumer_count == 0 and not queue.deleted:
            self._delete_queue(queue)

    def owner_closed(self, owner: object) -> None:
        """A connection closed: its exclusive queues go with it."""
        owned = self._exclusive.get(id(owner), {})
        for queue in [q for q in owned.values() if q.exclusive_owner is owner]:
            self._delete_queue(queue)

    # -- bindings ----------------------------------------------------------------------
    def bind(
        self,
        queue_name: str,
        exchange_name: str,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        owner: object | None = None,
        replicated: bool = False,
    ) -> Binding:
        """queue.bind (``replicated``: by HA replication or store recovery)."""
        arguments = dict(arguments or {})
        if exchange_name == "":
            raise access_refused("operation not permitted on the default exchange")
        queue = self.queue(queue_name, owner)
        exchange = self.exchange(exchange_name)
        exchange.validate_binding(arguments)
        key = binding_key(queue.name, routing_key, arguments)
        existing = exchange.bindings.get(key)
        if existing is not None:
            return existing
        binding = Binding(exchange_name, queue, routing_key, arguments)
        if not replicated:
            check_arguments(where(self.name, f"binding of queue '{queue.name}'"), arguments)
            if self.contract is not None:
                self.contract.check_binding(self.name, binding, exchange)
        exchange.bind(binding)
        self._queue_bindings[queue.name].append(binding)
        for listener in self.listeners:
            listener.bound(binding)
        return binding

    def unbind(
        self,
        queue_name: str,
        exchange_name: str,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        owner: object | None = None,
        replicated: bool = False,
    ) -> None:
        """queue.unbind; unbinding what is not bound, or from a queue or exchange that is
        gone, succeeds (RabbitMQ).

        ``replicated``: the primary's event, applied by a backup. An auto-delete exchange
        left without bindings then stays: a backup does not see every binding the primary's
        exchange has (none to a queue the primary does not replicate), so it cannot tell
        whether the primary deleted it; if the primary did, its deletion follows as an
        event of its own."""
        if exchange_name == "":
            raise access_refused("operation not permitted on the default exchange")
        if queue_name not in self.queues or exchange_name not in self.exchanges:
            return
        queue = self.queue(queue_name, owner)
        exchange = self.exchanges[exchange_name]
        binding = exchange.bindings.get(binding_key(queue.name, routing_key, dict(arguments or {})))
        if binding is not None:
            self._remove_binding(exchange, binding)
            if not replicated:
                self._maybe_auto_delete_exchange(exchange)

    def _remove_binding(self, exchange: Exchange, binding: Binding) -> None:
        exchange.unbind(binding.key)
        index = self._exchange_bindings if binding.to_exchange else self._queue_bindings
        bindings = index.get(binding.destination.name)
        if bindings is not None and binding in bindings:
            bindings.remove(binding)
        for listener in self.listeners:
            listener.unbound(binding)

    def bind_exchange(
        self,
        destination_name: str,
        source_name: str,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        replicated: bool = False,
    ) -> Binding:
        """exchange.bind: messages the source routes by this binding go on to the
        destination exchange (RabbitMQ's exchange-to-exchange bindings); ``replicated``:
        by HA replication or store recovery."""
        arguments = dict(arguments or {})
        if destination_name == "" or source_name == "":
            raise access_refused("operation not permitted on the default exchange")
        destination = self.exchange(destination_name)
        source = self.exchange(source_name)
        source.validate_binding(arguments)
        key = binding_key(destination_name, routing_key, arguments, EXCHANGE)
        existing = source.bindings.get(key)
        if existing is not None:
            return existing
        binding = Binding(source_name, destination, routing_key, arguments)
        if not replicated:
            check_arguments(
                where(self.name, f"binding of exchange '{destination_name}'"), arguments
            )
            if self.contract is not None:
                self.contract.check_binding(self.name, binding, source)
        source.bind(binding)
        self._exchange_bindings.setdefault(destination_name, []).append(binding)
        for listener in self.listeners:
            listener.bound(binding)
        return binding

    def unbind_exchange(
        self,
        destination_name: str,
        source_name: str,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        replicated: bool = False,
    ) -> None:
        """exchange.unbind; what is not bound, or gone, is unbound already (RabbitMQ).
        ``replicated``: the primary's event, applied by a backup (see :meth:`unbind`)."""
        if destination_name == "" or source_name == "":
            raise access_refused("operation not permitted on the default exchange")
        source = self.exchanges.get(source_name)
        if source is None:
            return
        key = binding_key(destination_name, routing_key, dict(arguments or {}), EXCHANGE)
        binding = source.bindings.get(key)
        if binding is not None:
            self._remove_binding(source, binding)
            if not replicated:
                self._maybe_auto_delete_exchange(source)

    def _maybe_auto_delete_exchange(self, exchange: Exchange) -> None:
        if exchange.auto_delete and exchange.had_bindings and not exchange.bindings:
            self.delete_exchange(exchange.name)

    def bindings(self) -> list[Binding]:
        return [b for ex in self.exchanges.values() for b in ex.bindings.values()]

    # -- publishing --------------------------------------------------------------------
    def check_publish(self, exchange_name: str) -> Exchange:
        """The exchange a client may publish to (404 missing, 403 internal)."""
        exchange = self.exchange(exchange_name)
        if exchange.internal:
            raise access_refused(f"cannot publish to internal exchange '{exchange_name}'")
        return exchange

    def route(self, exchange: Exchange, message: Message) -> list[Queue]:
        """The distinct queues for a message (RabbitMQ's rules): the exchanges an exchange
        routes to route it in turn, and an exchange that routes it nowhere at all hands it
        to its alternate exchange; each exchange routes it once (loops end)."""
        found = exchange.route(message)
        if not exchange.exchange_destinations and (found or exchange.alternate_exchange is None):
            return found  # type: ignore[return-value]  # queues only: no exchange bound
        return self._route_through(exchange, found, message)

    def _route_through(
        self, first: Exchange, found: list[Destination], message: Message
    ) -> list[Queue]:
        queues: list[Queue] = []
        queued: set[int] = set()
        seen = {first.name}
        work: deque[tuple[Exchange, list[Destination]]] = deque([(first, found)])
        while work:
            exchange, destinations = work.popleft()
            if not destinations:
                alternate = self.exchanges.get(exchange.alternate_exchange or "")
                if alternate is not None and alternate.name and alternate.name not in seen:
                    seen.add(alternate.name)
                    work.append((alternate, alternate.route(message)))
                continue
            for destination in destinations:
                if isinstance(destination, Exchange):
                    if destination.name not in seen:
                        seen.add(destination.name)
                        work.append((destination, destination.route(message)))
                elif id(destination) not in queued:
                    queued.add(id(destination))
                    queues.append(destination)
        return queues

    def publish(self, exchange: Exchange, message: Message) -> PublishResult:
        """Route and enqueue; a queue that refuses the message counts as rejected."""
        queues = self.route(exchange, message)
        self.published_total += 1
        if not queues:
            exchange.unroutable_total += 1
            self.unroutable_total += 1
            return _ACCEPTED_BY[0]
        exchange.routed_total += 1
        rejected = 0
        for queue in queues:
            if not queue.enqueue(message):
                rejected += 1
        count = len(queues)
        if rejected or count >= len(_ACCEPTED_BY):
            return PublishResult(count, rejected)
        return _ACCEPTED_BY[count]

    # -- dead-lettering ----------------------------------------------------------------
    # -- time --------------------------------------------------------------------------
    def tick(self) -> None:
        """Expire messages and delete queues unused past ``x-expires``, all at once."""
        run_steps(self.tick_steps())

    def tick_steps(self, size: int = SLICE) -> Steps[None]:
        """:meth:`tick` in slices of ``size`` queues (:mod:`common.slices`; 10,000 queues
        at once were one step of about 100 ms on a loaded machine): the queues are listed
        when the first slice runs, each is expired (or deleted, unused past
        ``x-expires``) when its slice runs, by the clock read then; one deleted or
        replaced meanwhile is skipped."""
        queues = list(self.queues.values())
        for start in range(0, len(queues), size):
            if start:
                yield
            now = self.clock()
            for queue in queues[start : start + size]:
                if self.queues.get(queue.name) is not queue:
                    continue
                if queue.message_count:
                    queue.expire()
                expires = queue.limits.expires_ms
                if (
                    expires is not None
                    and queue.consumer_count == 0
                    and now - queue.last_used >= expires / 1000.0
                ):
                    self._delete_queue(queue)
