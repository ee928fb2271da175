"""SnapshotRows: each queue's and binding's snapshot row, encoded once (issue 25).

A configuration stream's first event is a snapshot of every replicated queue, exchange and
binding (:func:`broker.ha.config_objects.snapshot_steps`); a member linking to a freshly
promoted primary subscribes its busy queues only once it has read their rows, and the
primary's confirms on those queues wait for its streams of them (docs/ha-design.md, "Who
a confirm waits for"). At 10,000 queues with 5,000 bindings making the rows and encoding
them took the new primary 90-100 ms of CPU before the first byte of the snapshot went out:
most of a second of a fail-over on a loaded machine.

Every HA broker, whatever its role, keeps here the encoding of each queue's and each
binding's row as replication format 2 and later write it in a snapshot
(:attr:`~broker.ha.link_format.Codec.encode_snapshot_row`), made when the object is
declared (it hears the virtual hosts as a configuration listener), at the HA broker's start
for the objects recovered from its store (:meth:`SnapshotRows.warm_steps`, a slice a
turn), or when a snapshot first needs it. A snapshot then joins those bytes
(:class:`~broker.core.field_table_codec.Encoded` items): the same bytes as encoding the
rows there (tests/ha/test_snapshot_rows.py).

**Why a row kept is the row now**: a row is a function of its object's fields that never
change for the object's life (a queue's name, vhost, durable, auto-delete, exclusive,
arguments (its own copy) and uuid; a binding's exchange, destination, key and arguments)
and, for a queue, its replication level, which is checked at every use (the row is made
again when the level differs). A queue or binding deleted is forgotten; one of the same
name declared again is another object, with a row of its own. Kept by object, not by
name: a row is never served for an object it was not made of.

Costs: a row's encoding at each declare and bind (6-7 µs of CPU an object), and its
bytes: 3.6 MiB for 10,000 queues and 5,000 bindings (~0.4 KiB a queue).

THREAD UNSAFE: the broker's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from broker.core.errors import AmqpError
from broker.core.exchange import Binding, Exchange
from broker.core.field_table_codec import Encoded
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.config_objects import binding_config, queue_config
from broker.ha.replicate_level import ReplicateLevel, queue_level
from broker.ha.wire_config2 import encode_snapshot_row
from common.slices import SLICE, Steps

__all__ = ["SnapshotRows"]


class SnapshotRows:
    """See the module docstring. A :class:`~broker.core.vhost.ConfigListener` of every
    virtual host; :meth:`queue_row` and :meth:`binding_row` are what a snapshot asks
    (:class:`~broker.ha.config_objects.EncodedRows`)."""

    def __init__(
        self,
        default: ReplicateLevel,
        encode: Callable[[dict[str, Any]], bytes] = encode_snapshot_row,
    ) -> None:
        #: The broker's replication level for a queue that names none.
        self.default = default
        #: The encoder of the rows kept: a link whose codec writes rows with another
        #: function is sent rows made there (:meth:`writes_as`).
        self.encode = encode
        self._queues: dict[Queue, tuple[ReplicateLevel, Encoded]] = {}
        self._bindings: dict[Binding, Encoded] = {}

    def __len__(self) -> int:
        """Rows kept."""
        return len(self._queues) + len(self._bindings)

    def writes_as(self, encode: Callable[[dict[str, Any]], bytes] | None) -> bool:
        """Are the rows kept what ``encode`` (a link codec's) would write?"""
        return encode is self.encode

    # -- what a snapshot asks --------------------------------------------------------------
    def queue_row(self, queue: Queue, level: ReplicateLevel) -> Encoded | None:
        """``queue``'s row at ``level``, encoded (kept, else made and kept now); None when
        it cannot be encoded (the snapshot's own encoding then says why)."""
        kept = self._queues.get(queue)
        if kept is not None and kept[0] is level:
            return kept[1]
        try:
            row = Encoded(self.encode(queue_config(queue, level)))
        except ValueError:
            self._queues.pop(queue, None)
            return None
        self._queues[queue] = (level, row)
        return row

    def binding_row(self, binding: Binding) -> Encoded | None:
        """``binding``'s row, encoded (kept, else made and kept now); None as
        :meth:`queue_row`."""
        row = self._bindings.get(binding)
        if row is not None:
            return row
        try:
            row = Encoded(self.encode(binding_config(binding)))
        except ValueError:
            return None
        self._bindings[binding] = row
        return row

    def warm_steps(self, vhosts: Sequence[VirtualHost], size: int = SLICE) -> Steps[None]:
        """Every row not kept yet made now, ``size`` objects a slice (the objects recovered
        from the store before this broker listened)."""
        queues = [q for vhost in vhosts for q in vhost.queues.values()]
        bindings = [b for vhost in vhosts for b in vhost.bindings()]
        for start in range(0, len(queues), size):
            if start:
                yield
            for queue in queues[start : start + size]:
                self.queue_declared(queue)
        for start in range(0, len(bindings), size):
            yield
            for binding in bindings[start : start + size]:
                if binding not in self._bindings:
                    self.binding_row(binding)

    # -- the virtual hosts' changes (ConfigListener) -----------------------------------------
    def queue_declared(self, queue: Queue) -> None:
        if queue.deleted:
            return
        try:
            level = queue_level(queue, self.default)
        except AmqpError:  # a bad qpid.replicate: the snapshot refuses it, not the declare
            return
        if level is not ReplicateLevel.NONE:
            self.queue_row(queue, level)

    def queue_deleted(self, queue: Queue) -> None:
        self._queues.pop(queue, None)

    def exchange_declared(self, exchange: Exchange) -> None:
        pass  # a few: made at each snapshot

    def exchange_deleted(self, exchange: Exchange) -> None:
        pass

    def bound(self, binding: Binding) -> None:
        self.binding_row(binding)

    def unbound(self, binding: Binding) -> None:
        self._bindings.pop(binding, None)
