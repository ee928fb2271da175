"""The broker's virtual hosts: a registry of :class:`~broker.core.vhost.VirtualHost` by name.

``/`` exists from the start and is never deleted (the HA role, the message store and the
stand-alone queue replication hang off it). :meth:`VirtualHosts.create` adds a vhost (a
second create of the same name finds it: RabbitMQ's PUT is idempotent);
:meth:`VirtualHosts.delete` deletes every queue and exchange of a vhost, so configuration
listeners hear each deletion, then the vhost, so :class:`VhostListener` s hear it last (the
broker shell closes its connections with 320 CONNECTION_FORCED, as RabbitMQ does).

Every vhost shares one list of configuration listeners (:attr:`VirtualHosts.listeners`, the
default vhost's own list): a listener added to ``/`` hears every vhost, and tells them
apart by the ``vhost`` attribute of a queue or exchange. Queues of all vhosts are known to
the HA role by a *key* (:func:`queue_key`): the name in ``/``, else the vhost and the name
joined by :data:`KEY_SEPARATOR`, so two vhosts may hold a queue of the same name.
:attr:`VirtualHosts.queues` maps keys to queues across every vhost.

No I/O. THREAD UNSAFE: one event loop owns the registry.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, ValuesView
from typing import Protocol

from broker.core.declare_contract import DeclareContract
from broker.core.errors import AmqpError, ReplyCode
from broker.core.queue import Queue
from broker.core.vhost import VHOST, ConfigListener, VirtualHost
from broker.core.vhost_limits import VhostLimits
from common.slices import SLICE, Steps

#: Joins a vhost's name and a queue's name in a queue key (never in a name a client uses).
KEY_SEPARATOR = "\x00"
#: Longest vhost name: connection.open carries it as a short string.
MAX_NAME_BYTES = 255


def queue_key(vhost: str, name: str) -> str:
    """The key of queue ``name`` in ``vhost``: the name itself in ``/``."""
    return name if vhost == VHOST else f"{vhost}{KEY_SEPARATOR}{name}"


def split_key(key: str) -> tuple[str, str]:
    """(vhost, queue name) of a queue key."""
    vhost, sep, name = key.partition(KEY_SEPARATOR)
    return (vhost, name) if sep else (VHOST, key)


def key_of(queue: Queue) -> str:
    return queue_key(queue.vhost, queue.name)


def check_vhost_name(name: object) -> str:
    """A valid vhost name, or ValueError naming what is wrong."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a vhost name must be a non-empty string, not {name!r}")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise ValueError(f"vhost name longer than {MAX_NAME_BYTES} bytes: {name[:40]!r}...")
    if KEY_SEPARATOR in name:
        raise ValueError(f"vhost name {name!r} holds a NUL character")
    return name


class VhostListener(Protocol):
    """Hears virtual hosts created and deleted (store, HA configuration stream, shell)."""

    def vhost_created(self, vhost: VirtualHost) -> None: ...

    def vhost_deleted(self, vhost: VirtualHost) -> None: ...


class _AllQueues(Mapping[str, Queue]):
    """Every vhost's queues by key (a live view)."""

    def __init__(self, hosts: dict[str, VirtualHost]) -> None:
        self._hosts = hosts

    def __getitem__(self, key: str) -> Queue:
        vhost, name = split_key(key)
        return self._hosts[vhost].queues[name]

    def __iter__(self) -> Iterator[str]:
        for host in list(self._hosts.values()):
            for name in list(host.queues):
                yield queue_key(host.name, name)

    def __len__(self) -> int:
        return sum(len(host.queues) for host in self._hosts.values())

    def items(self) -> ItemsView[str, Queue]:
        return _AllItems(self)

    def values(self) -> ValuesView[Queue]:
        return _AllValues(self)

    def key_items(self) -> list[tuple[str, Queue]]:
        """(key, queue) of every queue, ``/``'s at C speed (its keys are the names; a
        generator step and a key made per queue took 4 ms at 10,000 queues, quiet)."""
        found: list[tuple[str, Queue]] = []
        for host in list(self._hosts.values()):
            if host.name == VHOST:
                found.extend(host.queues.items())
            else:
                prefix = f"{host.name}{KEY_SEPARATOR}"
                found.extend((prefix + name, queue) for name, queue in host.queues.items())
        return found

    def missing(self, keys: Iterable[str]) -> set[str]:
        """Those of ``keys`` that are no queue's key now (by set operations against ``/``'s
        queues: 10,000 look-ups by key took milliseconds)."""
        default = self._hosts.get(VHOST)
        rest = set(keys) if default is None else set(keys) - default.queues.keys()
        return {key for key in rest if key not in self}

    def host_values(self) -> Iterator[Queue]:
        """Every queue, each vhost's at C speed: no key made, no generator step a queue (a
        promotion walks 10,000 queues three times: 3-4 ms of CPU each when a generator
        made each one's key)."""
        for host in list(self._hosts.values()):
            yield from list(host.queues.values())


class _AllItems(ItemsView[str, Queue]):
    _mapping: _AllQueues

    def __iter__(self) -> Iterator[tuple[str, Queue]]:
        return iter(self._mapping.key_items())


class _AllValues(ValuesView[Queue]):
    _mapping: _AllQueues

    def __iter__(self) -> Iterator[Queue]:
        return self._mapping.host_values()


class VirtualHosts:
    """The registry (see the module docstring)."""

    def __init__(
        self,
        factory: Callable[[str], VirtualHost] | None = None,
        *,
        default: VirtualHost | None = None,
    ) -> None:
        """``factory`` makes a vhost of a name; ``default``: the ``/`` to hold (else made)."""
        self._factory = factory or (lambda name: VirtualHost(name=name))
        self.default = default if default is not None else self._factory(VHOST)
        #: Configuration listeners of every vhost (one list, shared).
        self.listeners: list[ConfigListener] = self.default.listeners
        self.vhost_listeners: list[VhostListener] = []
        self._hosts: dict[str, VirtualHost] = {VHOST: self.default}
        self._all = _AllQueues(self._hosts)
        self.queues: Mapping[str, Queue] = self._all

    def missing_queues(self, keys: Iterable[str]) -> set[str]:
        """Those of ``keys`` that are no queue's key now (set operations, at C speed for
        ``/``'s queues)."""
        return self._all.missing(keys)

    @property
    def name(self) -> str:
        """The default vhost's name (messages that name one vhost name it)."""
        return VHOST

    def hold_contract(self, contract: DeclareContract | None) -> None:
        """Every vhost, and every one created later, asks ``contract`` before it creates
        what a client declared (:mod:`broker.core.declare_contract`)."""
        for vhost in self._hosts.values():
            vhost.contract = contract

    def hold_limits(self, limits: VhostLimits | None) -> None:
        """Every vhost, and every one created later, refuses a client's new queue over its
        ``max-queues`` (:mod:`broker.core.vhost_limits`)."""
        for vhost in self._hosts.values():
            vhost.limits = limits

    def get(self, name: str) -> VirtualHost | None:
        return self._hosts.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._hosts

    def __iter__(self) -> Iterator[VirtualHost]:
        return iter(list(self._hosts.values()))

    def __len__(self) -> int:
        return len(self._hosts)

    def names(self) -> list[str]:
        return sorted(self._hosts)

    def create(self, name: str) -> tuple[VirtualHost, bool]:
        """The vhost ``name``, created if new: (vhost, created). ValueError: a bad name."""
        existing = self._hosts.get(check_vhost_name(name))
        if existing is not None:
            return existing, False
        vhost = self._factory(name)
        vhost.listeners = self.listeners
        vhost.contract = self.default.contract
        vhost.limits = self.default.limits
        self._hosts[name] = vhost
        for listener in list(self.vhost_listeners):
            listener.vhost_created(vhost)
        return vhost, True

    def delete(self, name: str) -> VirtualHost:
        """Delete the vhost ``name`` with everything in it (404 NOT_FOUND if there is none;
        ``/`` is refused with 403 ACCESS_REFUSED)."""
        vhost = self._hosts.get(name)
        if vhost is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no vhost '{name}'")
        if vhost is self.default:
            raise AmqpError(ReplyCode.ACCESS_REFUSED, f"the default vhost '{VHOST}' stays")
        for queue_name in list(vhost.queues):
            vhost.delete_queue(queue_name)
        for exchange in list(vhost.exchanges.values()):
            if not exchange.builtin:
                vhost.delete_exchange(exchange.name)
        del self._hosts[name]
        for listener in list(self.vhost_listeners):
            listener.vhost_deleted(vhost)
        return vhost

    def queue(self, key: str) -> Queue | None:
        """The queue of a key, None if there is none."""
        vhost, name = split_key(key)
        host = self._hosts.get(vhost)
        return None if host is None else host.queues.get(name)

    def delete_queue(self, key: str, *, replicated: bool = False) -> int:
        """Delete the queue of a key (nothing if it is gone); its ready message count.
        ``replicated``: the primary's event, applied by a backup (:meth:`VirtualHost.unbind`)."""
        vhost, name = split_key(key)
        host = self._hosts.get(vhost)
        return 0 if host is None else host.delete_queue(name, replicated=replicated)

    def tick(self) -> None:
        for vhost in list(self._hosts.values()):
            vhost.tick()

    def tick_steps(self, size: int = SLICE) -> Steps[None]:
        """:meth:`tick` in slices of ``size`` queues (:meth:`VirtualHost.tick_steps`), a
        vhost after another, each from a slice of its own; one deleted meanwhile is
        skipped."""
        first = True
        for vhost in list(self._hosts.values()):
            if self._hosts.get(vhost.name) is not vhost:
                continue
            if not first:
                yield
            first = False
            yield from vhost.tick_steps(size)
