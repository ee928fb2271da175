"""Backup side, sans-I/O: the broker replicator, applying the configuration stream.

BrokerReplicator (Qpid's name) keeps the backup's copy of the primary's replicated
configuration.

It applies the configuration stream (:class:`broker.ha.config_stream.ConfigStream`) to the
backup's virtual hosts: a ``snapshot`` creates what is missing and deletes *leftovers*, the
vhosts, queues, exchanges and bindings the backup has but the primary no longer does
(backups hold nothing of their own: clients cannot use them); later events create and
delete one thing each, in the vhost the event names (``/`` when it names none). Every
queue replicated with level ``all`` needs a
:class:`~broker.ha.queue_replicator.QueueReplicator`; :meth:`apply` returns the keys
(:func:`broker.core.vhosts.queue_key`: the name in ``/``) of queues that gained or lost
one, for the link to subscribe or unsubscribe. ``membership``
events are kept in :attr:`members`, a ``users`` event (replication format 4) replaces
:attr:`cluster_users`. The queue replicators share one
:class:`~broker.ha.tx_staging.TxStaging` (:attr:`staging`): a transaction's messages are
applied all together or not at all; a queue that goes takes its part of the staging along.

An event that the backup cannot apply (e.g. a declare that its vhost refuses) raises
``ValueError`` naming it: the link drops and reconnects, and the next snapshot repairs.

THREAD UNSAFE: the backup's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.core.errors import AmqpError
from broker.core.exchange import EXCHANGE, QUEUE, BindingKey, binding_key
from broker.core.queue import Queue
from broker.core.vhost import VHOST, VirtualHost
from broker.core.vhosts import VirtualHosts, queue_key
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.replicate_level import is_standard_exchange
from broker.ha.tx_staging import TxStaging
from broker.security.cluster_users import ClusterUsers
from common.slices import SLICE, Steps, run_steps

#: A queue's messages that cost, deleted with it, as much as one object of a snapshot's
#: slice (:meth:`BrokerReplicator.apply_steps`): an empty queue is deleted in ~4 us, its
#: messages freed in ~0.3 us each (a 50,000-message backlog: 14 ms, a slice of its own).
MESSAGES_AN_OBJECT = 16


@dataclass
class ConfigChanges:
    """What the link must do after an event: queues to subscribe and to drop."""

    subscribe: list[str] = field(default_factory=list)
    unsubscribe: list[str] = field(default_factory=list)


class BrokerReplicator:
    """Applies configuration events to the backup's virtual host."""

    def __init__(self, vhost: VirtualHosts | VirtualHost) -> None:
        self.vhosts = vhost if isinstance(vhost, VirtualHosts) else VirtualHosts(default=vhost)
        #: By queue key.
        self.replicators: dict[str, QueueReplicator] = {}
        #: Transactions staged across the replicators, until whole (or the link goes).
        self.staging = TxStaging()
        #: Keys of queues exclusive to a client connection of the primary (they die with it).
        self.exclusive: set[str] = set()
        self.members: list[dict[str, Any]] = []
        self.snapshots = 0
        #: The cluster's users a ``users`` event replaces (None: kept nowhere).
        self.cluster_users: ClusterUsers | None = None

    def apply(self, event: dict[str, Any]) -> ConfigChanges:
        return run_steps(self.apply_steps(event))

    def apply_steps(self, event: dict[str, Any], size: int = SLICE) -> Steps[ConfigChanges]:
        """:meth:`apply` in slices (:mod:`common.slices`): a snapshot ``size`` objects a
        slice (10,000 queues at once were 250 ms of CPU), any other event at once. The link
        applies nothing else meanwhile, and finishes a snapshot a slice a turn if it stops
        (see :mod:`broker.ha.config_apply`)."""
        kind = event.get("type")
        changes = ConfigChanges()
        try:
            if kind == "snapshot":
                yield from self._snapshot(event, changes, size)
            elif kind == "queue-declared":
                self._declare_queue(event["queue"], changes)
            elif kind == "queue-deleted":
                self._delete_queue(queue_key(_vhost_of(event), str(event["name"])), changes)
            elif kind == "exchange-declared":
                self._declare_exchange(event["exchange"])
            elif kind == "exchange-deleted":
                self._in(event).delete_exchange(str(event["name"]), replicated=True)
            elif kind == "vhost-declared":
                self.vhosts.create(str(event["name"]))
            elif kind == "vhost-deleted":
                self._delete_vhost(str(event["name"]), changes)
            elif kind == "bound":
                self._bind(event["binding"])
            elif kind == "unbound":
                self._unbind(event["binding"])
            elif kind == "membership":
                self.members = list(event.get("members") or [])
            elif kind == "snapshot-head":
                pass  # format 4: the next snapshot's busiest rows, read by the link, never applied
            elif kind == "users":  # replication format 4: the cluster's users, all of them
                if self.cluster_users is not None:
                    self.cluster_users.replace(event)
            else:
                raise ValueError(f"unknown configuration event {kind!r}")
        except AmqpError as exc:
            raise ValueError(f"cannot apply {kind} event: {exc.reply_text}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed {kind} event: {exc!r}") from exc
        return changes

    def _in(self, config: dict[str, Any]) -> VirtualHost:
        """The vhost an event (or its object) names; KeyError if the backup has none."""
        name = _vhost_of(config)
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise KeyError(f"no vhost {name!r}")
        return vhost

    # -- virtual hosts -----------------------------------------------------------------
    def _delete_vhost(self, name: str, changes: ConfigChanges) -> None:
        run_steps(self._delete_vhost_steps(name, changes, _Budget(SLICE)))

    def _delete_vhost_steps(
        self, name: str, changes: ConfigChanges, budget: _Budget
    ) -> Steps[None]:
        """:meth:`_delete_vhost` in slices (its queues as a snapshot's leftovers), then the
        vhost itself (what is left of it: exchanges and bindings, a few)."""
        vhost = self.vhosts.get(name)
        if vhost is None or name == VHOST:
            return
        for queue_name in list(vhost.queues):
            queue = vhost.queues.get(queue_name)
            cost = 1 if queue is None else 1 + queue.message_count // MESSAGES_AN_OBJECT
            self._delete_queue(queue_key(name, queue_name), changes)
            if budget.full(cost):
                yield
        if self.vhosts.get(name) is vhost:
            self.vhosts.delete(name)

    # -- queues ------------------------------------------------------------------------
    def _declare_queue(self, config: dict[str, Any], changes: ConfigChanges) -> None:
        name = str(config["name"])
        vhost = self._in(config)
        key = queue_key(vhost.name, name)
        arguments = dict(config.get("arguments") or {})
        uuid = str(config.get("uuid") or "") or None
        existing = vhost.queues.get(name)
        if existing is not None and _replaced(existing, config):
            self._delete_queue(key, changes)  # replaced on the primary by another queue
        queue = vhost.declare_queue(
            name,
            durable=bool(config.get("durable")),
            auto_delete=bool(config.get("auto_delete")),
            arguments=arguments,
            replicated=True,
            uuid=uuid,
        )
        if config.get("exclusive"):
            self.exclusive.add(key)
        else:
            self.exclusive.discard(key)
        if config.get("replicate") == "all" and key not in self.replicators:
            self.replicators[key] = QueueReplicator(queue, self.staging)
            changes.subscribe.append(key)

    def kept_by_snapshot(
        self, event: dict[str, Any], keys: Iterable[str]
    ) -> dict[str, QueueReplicator]:
        """Of the queue replicators named by ``keys``, those a ``snapshot`` event keeps as
        they are: the snapshot names their queue (in its vhost), replicated with level
        ``all``, and declaring it replaces nothing (the same rule as :meth:`apply`: the same
        uuid, arguments, durability and auto-delete). Applying the snapshot leaves each of
        them and its queue untouched, so the link may subscribe their streams before it
        applies the snapshot (:mod:`broker.ha.queue_subscriptions`). Reads only."""
        wanted = {key: self.replicators[key] for key in keys if key in self.replicators}
        kept: dict[str, QueueReplicator] = {}
        if not wanted:
            return kept
        for config in event.get("queues") or []:
            key = self.kept_by_row(config, wanted)
            if key is not None:
                kept[key] = wanted[key]
        return kept

    def kept_by_row(self, config: Any, wanted: Mapping[str, QueueReplicator]) -> str | None:
        """:meth:`kept_by_snapshot`'s rule for one of a snapshot's queue rows: the key of
        the replicator of ``wanted`` (by key) whose queue ``config`` keeps as it is, or
        None (another queue, or one it would replace). Reads only."""
        if not isinstance(config, dict) or config.get("replicate") != "all":
            return None
        key = queue_key(_vhost_of(config), str(config["name"]))
        replicator = wanted.get(key)
        if replicator is None:
            return None
        queue = replicator.queue
        if queue.deleted or self.vhosts.queue(key) is not queue or _replaced(queue, config):
            return None
        return key

    def _delete_queue(self, key: str, changes: ConfigChanges) -> None:
        self.exclusive.discard(key)
        replicator = self.replicators.pop(key, None)
        if replicator is not None:
            changes.unsubscribe.append(key)
            self.staging.queue_gone(replicator)
        self.vhosts.delete_queue(key, replicated=True)

    # -- exchanges and bindings --------------------------------------------------------
    def _declare_exchange(self, config: dict[str, Any]) -> None:
        name = str(config["name"])
        vhost = self._in(config)
        existing = vhost.exchanges.get(name)
        arguments = dict(config.get("arguments") or {})
        if existing is not None and (
            existing.type != config.get("type") or existing.arguments != arguments
        ):
            vhost.delete_exchange(name, replicated=True)
        vhost.declare_exchange(
            name,
            str(config["type"]),
            durable=bool(config.get("durable")),
            auto_delete=bool(config.get("auto_delete")),
            internal=bool(config.get("internal")),
            arguments=arguments,
            replicated=True,
        )

    def _bind(self, binding: dict[str, Any]) -> None:
        vhost = self._in(binding)
        if binding.get("destination_type") == EXCHANGE:
            vhost.bind_exchange(
                str(binding["destination"]),
                str(binding["exchange"]),
                str(binding["routing_key"]),
                dict(binding.get("arguments") or {}),
                replicated=True,
            )
            return
        vhost.bind(
            str(binding["queue"]),
            str(binding["exchange"]),
            str(binding["routing_key"]),
            dict(binding.get("arguments") or {}),
            replicated=True,
        )

    def _unbind(self, binding: dict[str, Any]) -> None:
        vhost = self._in(binding)
        if binding.get("destination_type") == EXCHANGE:
            vhost.unbind_exchange(
                str(binding["destination"]),
                str(binding["exchange"]),
                str(binding["routing_key"]),
                dict(binding.get("arguments") or {}),
                replicated=True,
            )
            return
        vhost.unbind(
            str(binding["queue"]),
            str(binding["exchange"]),
            str(binding["routing_key"]),
            dict(binding.get("arguments") or {}),
            replicated=True,
        )

    @staticmethod
    def _key(binding: dict[str, Any]) -> tuple[str, str, BindingKey]:
        """A binding event's identity: its vhost, its exchange and its key there."""
        to_exchange = binding.get("destination_type") == EXCHANGE
        return (
            _vhost_of(binding),
            str(binding["exchange"]),
            binding_key(
                str(binding["destination"] if to_exchange else binding["queue"]),
                str(binding["routing_key"]),
                dict(binding.get("arguments") or {}),
                EXCHANGE if to_exchange else QUEUE,
            ),
        )

    # -- snapshot ----------------------------------------------------------------------
    def _snapshot(self, event: dict[str, Any], changes: ConfigChanges, size: int) -> Steps[None]:
        """In the order of one step: leftovers deleted, exchanges then queues declared,
        leftover bindings removed (those to the standard ``amq.*`` exchanges too: a link of
        format 1 to 3 sends none, and the backup holds none of its primary's then), bindings
        made; ``size`` objects a slice, whatever part of the work they are in (a row read,
        an object declared, deleted, bound or unbound: one each; a queue deleted also its
        messages, :data:`MESSAGES_AN_OBJECT` an object). Nothing over thousands of objects
        is done in one slice: 10,000 queues' rows in one were 10-40 ms (issue 25)."""
        self.snapshots += 1
        budget = _Budget(size)
        vhosts = {VHOST, *(str(v) for v in event.get("vhosts") or [])}
        for vhost in list(self.vhosts):
            if vhost.name not in vhosts:  # leftovers absent on the primary
                yield from self._delete_vhost_steps(vhost.name, changes, budget)
        for name in sorted(vhosts):
            self.vhosts.create(name)
        queues: dict[str, dict[str, Any]] = {}
        for q in event.get("queues") or []:
            queues[queue_key(_vhost_of(q), str(q["name"]))] = q
            if budget.full():
                yield
        exchanges: dict[tuple[str, str], dict[str, Any]] = {}
        for e in event.get("exchanges") or []:
            exchanges[(_vhost_of(e), str(e["name"]))] = e
            if budget.full():
                yield
        # Keys, not queues: each leftover is freed as it is deleted, not all at once when
        # a list of them goes (10,000 queues freed at once: 14 ms).
        for key in list(self.vhosts.queues):
            queue = self.vhosts.queue(key)
            cost = 1
            if key not in queues and queue is not None:
                cost += queue.message_count // MESSAGES_AN_OBJECT
                self._delete_queue(key, changes)  # leftovers absent on the primary
            if budget.full(cost):
                yield
        leftovers = [
            (vhost, name)
            for vhost in list(self.vhosts)
            for name, exchange in vhost.exchanges.items()
            if not exchange.builtin and (vhost.name, name) not in exchanges
        ]
        for vhost, name in leftovers:
            exchange = vhost.exchanges.get(name)
            if exchange is not None:
                cost = 1 + len(exchange.bindings)
                vhost.delete_exchange(name, replicated=True)
                if budget.full(cost):
                    yield
        for config in exchanges.values():
            self._declare_exchange(config)
            if budget.full():
                yield
        for config in queues.values():
            self._declare_queue(config, changes)
            if budget.full():
                yield
        bindings = event.get("bindings") or []
        wanted: set[tuple[str, str, BindingKey]] = set()
        for b in bindings:
            wanted.add(self._key(b))
            if budget.full():
                yield
        for vhost in list(self.vhosts):
            yield from self._unbind_leftovers(vhost, wanted, budget)
        for b in bindings:
            self._bind(b)
            if budget.full():
                yield

    @staticmethod
    def _unbind_leftovers(
        vhost: VirtualHost, wanted: set[tuple[str, str, BindingKey]], budget: _Budget
    ) -> Steps[None]:
        for binding in vhost.bindings():
            exchange = vhost.exchanges.get(binding.exchange)
            if exchange is None or (exchange.builtin and not is_standard_exchange(exchange)):
                continue  # the default exchange's are implicit, the management ones' local
            if (vhost.name, binding.exchange, binding.key) not in wanted:
                destination = binding.destination.name
                if binding.to_exchange:
                    vhost.unbind_exchange(
                        destination,
                        binding.exchange,
                        binding.routing_key,
                        binding.arguments,
                        replicated=True,
                    )
                else:
                    vhost.unbind(
                        destination,
                        binding.exchange,
                        binding.routing_key,
                        binding.arguments,
                        replicated=True,
                    )
            if budget.full():
                yield


class _Budget:
    """The objects of a slice (:meth:`BrokerReplicator.apply_steps`): ``full(cost)`` after
    each piece of work says whether the slice is done (the count starts again)."""

    __slots__ = ("size", "spent")

    def __init__(self, size: int) -> None:
        self.size = size
        self.spent = 0

    def full(self, cost: int = 1) -> bool:
        self.spent += cost
        if self.spent < self.size:
            return False
        self.spent = 0
        return True


def _replaced(existing: Queue, config: dict[str, Any]) -> bool:
    """Whether declaring ``config`` replaces the backup's ``existing`` queue of its name:
    the primary's is another queue (deleted and declared again) or declared otherwise."""
    uuid = str(config.get("uuid") or "") or None
    return (
        (uuid is not None and existing.uuid != uuid)  # deleted and declared again
        or existing.arguments != dict(config.get("arguments") or {})
        or existing.durable != bool(config.get("durable"))
        or existing.auto_delete != bool(config.get("auto_delete"))
    )


def _vhost_of(config: dict[str, Any]) -> str:
    """The vhost an event or an object of one names: ``/`` when it names none."""
    return str(config.get("vhost") or VHOST)
