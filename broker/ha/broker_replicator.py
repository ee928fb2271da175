"""Backup side, sans-I/O: the broker replicator, applying the configuration stream.

BrokerReplicator (Qpid's name) keeps the backup's copy of the primary's replicated
configuration.

It applies the configuration stream (:class:`broker.ha.streams.ConfigStream`) to the
backup's virtual host: a ``snapshot`` creates what is missing and deletes *leftovers*, the
queues, exchanges and bindings the backup has but the primary no longer does (backups hold
nothing of their own: clients cannot use them); later events create and delete one thing
each. Every queue replicated with level ``all`` needs a
:class:`~broker.ha.queue_replicator.QueueReplicator`; :meth:`apply` returns the names of
queues that gained or lost one, for the link to subscribe or unsubscribe. ``membership``
events are kept in :attr:`members`. The queue replicators share one
:class:`~broker.ha.tx_staging.TxStaging` (:attr:`staging`): a transaction's messages are
applied all together or not at all; a queue that goes takes its part of the staging along.

An event that the backup cannot apply (e.g. a declare that its vhost refuses) raises
``ValueError`` naming it: the link drops and reconnects, and the next snapshot repairs.

THREAD UNSAFE: the backup's event loop owns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.core.errors import AmqpError
from broker.core.exchange import EXCHANGE, QUEUE, BindingKey, binding_key
from broker.core.vhost import VirtualHost
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.tx_staging import TxStaging


@dataclass
class ConfigChanges:
    """What the link must do after an event: queues to subscribe and to drop."""

    subscribe: list[str] = field(default_factory=list)
    unsubscribe: list[str] = field(default_factory=list)


class BrokerReplicator:
    """Applies configuration events to the backup's virtual host."""

    def __init__(self, vhost: VirtualHost) -> None:
        self.vhost = vhost
        self.replicators: dict[str, QueueReplicator] = {}
        #: Transactions staged across the replicators, until whole (or the link goes).
        self.staging = TxStaging()
        #: Queues exclusive to a client connection of the primary (they die with it).
        self.exclusive: set[str] = set()
        self.members: list[dict[str, Any]] = []
        self.snapshots = 0

    def apply(self, event: dict[str, Any]) -> ConfigChanges:
        kind = event.get("type")
        changes = ConfigChanges()
        try:
            if kind == "snapshot":
                self._snapshot(event, changes)
            elif kind == "queue-declared":
                self._declare_queue(event["queue"], changes)
            elif kind == "queue-deleted":
                self._delete_queue(str(event["name"]), changes)
            elif kind == "exchange-declared":
                self._declare_exchange(event["exchange"])
            elif kind == "exchange-deleted":
                self.vhost.delete_exchange(str(event["name"]))
            elif kind == "bound":
                self._bind(event["binding"])
            elif kind == "unbound":
                self._unbind(event["binding"])
            elif kind == "membership":
                self.members = list(event.get("members") or [])
            else:
                raise ValueError(f"unknown configuration event {kind!r}")
        except AmqpError as exc:
            raise ValueError(f"cannot apply {kind} event: {exc.reply_text}") from exc
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed {kind} event: {exc!r}") from exc
        return changes

    # -- queues ------------------------------------------------------------------------
    def _declare_queue(self, config: dict[str, Any], changes: ConfigChanges) -> None:
        name = str(config["name"])
        arguments = dict(config.get("arguments") or {})
        uuid = str(config.get("uuid") or "") or None
        existing = self.vhost.queues.get(name)
        if existing is not None and (
            (uuid is not None and existing.uuid != uuid)  # deleted and declared again
            or existing.arguments != arguments
            or existing.durable != bool(config.get("durable"))
            or existing.auto_delete != bool(config.get("auto_delete"))
        ):
            self._delete_queue(name, changes)  # replaced on the primary by another queue
        queue = self.vhost.declare_queue(
            name,
            durable=bool(config.get("durable")),
            auto_delete=bool(config.get("auto_delete")),
            arguments=arguments,
            replicated=True,
            uuid=uuid,
        )
        if config.get("exclusive"):
            self.exclusive.add(name)
        else:
            self.exclusive.discard(name)
        if config.get("replicate") == "all" and name not in self.replicators:
            self.replicators[name] = QueueReplicator(queue, self.staging)
            changes.subscribe.append(name)

    def _delete_queue(self, name: str, changes: ConfigChanges) -> None:
        self.exclusive.discard(name)
        replicator = self.replicators.pop(name, None)
        if replicator is not None:
            changes.unsubscribe.append(name)
            self.staging.queue_gone(replicator)
        self.vhost.delete_queue(name)

    # -- exchanges and bindings --------------------------------------------------------
    def _declare_exchange(self, config: dict[str, Any]) -> None:
        name = str(config["name"])
        existing = self.vhost.exchanges.get(name)
        arguments = dict(config.get("arguments") or {})
        if existing is not None and (
            existing.type != config.get("type") or existing.arguments != arguments
        ):
            self.vhost.delete_exchange(name)
        self.vhost.declare_exchange(
            name,
            str(config["type"]),
            durable=bool(config.get("durable")),
            auto_delete=bool(config.get("auto_delete")),
            internal=bool(config.get("internal")),
            arguments=arguments,
        )

    def _bind(self, binding: dict[str, Any]) -> None:
        if binding.get("destination_type") == EXCHANGE:
            self.vhost.bind_exchange(
                str(binding["destination"]),
                str(binding["exchange"]),
                str(binding["routing_key"]),
                dict(binding.get("arguments") or {}),
            )
            return
        self.vhost.bind(
            str(binding["queue"]),
            str(binding["exchange"]),
            str(binding["routing_key"]),
            dict(binding.get("arguments") or {}),
        )

    def _unbind(self, binding: dict[str, Any]) -> None:
        if binding.get("destination_type") == EXCHANGE:
            self.vhost.unbind_exchange(
                str(binding["destination"]),
                str(binding["exchange"]),
                str(binding["routing_key"]),
                dict(binding.get("arguments") or {}),
            )
            return
        self.vhost.unbind(
            str(binding["queue"]),
            str(binding["exchange"]),
            str(binding["routing_key"]),
            dict(binding.get("arguments") or {}),
        )

    @staticmethod
    def _key(binding: dict[str, Any]) -> tuple[str, BindingKey]:
        """A binding event's identity: its exchange and its key there."""
        to_exchange = binding.get("destination_type") == EXCHANGE
        return (
            str(binding["exchange"]),
            binding_key(
                str(binding["destination"] if to_exchange else binding["queue"]),
                str(binding["routing_key"]),
                dict(binding.get("arguments") or {}),
                EXCHANGE if to_exchange else QUEUE,
            ),
        )

    # -- snapshot ----------------------------------------------------------------------
    def _snapshot(self, event: dict[str, Any], changes: ConfigChanges) -> None:
        self.snapshots += 1
        vhost = self.vhost
        queues = {str(q["name"]): q for q in event.get("queues") or []}
        exchanges = {str(e["name"]): e for e in event.get("exchanges") or []}
        bindings = list(event.get("bindings") or [])
        for name in [n for n in vhost.queues if n not in queues]:
            self._delete_queue(name, changes)  # leftovers absent on the primary
        for name, exchange in list(vhost.exchanges.items()):
            if not exchange.builtin and name not in exchanges:
                vhost.delete_exchange(name)
        for config in exchanges.values():
            self._declare_exchange(config)
        for config in queues.values():
            self._declare_queue(config, changes)
        wanted = {self._key(b) for b in bindings}
        for binding in vhost.bindings():
            exchange = vhost.exchanges[binding.exchange]
            if not exchange.builtin and (binding.exchange, binding.key) not in wanted:
                destination = binding.destination.name
                if binding.to_exchange:
                    vhost.unbind_exchange(
                        destination, binding.exchange, binding.routing_key, binding.arguments
                    )
                else:
                    vhost.unbind(
                        destination, binding.exchange, binding.routing_key, binding.arguments
                    )
        for b in bindings:
            self._bind(b)
