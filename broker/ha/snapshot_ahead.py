"""SnapshotAhead: a promoted broker's first snapshot, encoded while it is being promoted.

A member of the in-sync set links to a freshly promoted primary and asks for the
configuration stream; the primary's confirms on the busy queues wait for the member's
streams of them, which it subscribes as it reads their rows (docs/ha-design.md, "Who a
confirm waits for"). At 10,000 queues and 5,000 bindings, building and encoding that
snapshot once the member asked for it was 30-46 ms of a 160-210 ms fail-over (its rows
already encoded ahead: :mod:`broker.ha.snapshot_rows`), against 90 ms at one queue
(docs/benchmarks.md, "Fail-over at 10,000 queues against one, quiet"). Most of a promotion
is spent waiting for the disk (the epoch's and the era's fsyncs), when the loop is free:
the HA broker makes the snapshot then (:meth:`SnapshotAhead.make_steps`, a slice a turn),
and a configuration stream opened later sends those bytes instead of making them again
(:meth:`SnapshotAhead.made`).

**Why the bytes are the snapshot now**: a snapshot is a function of the replicated
configuration (virtual hosts, queues, exchanges, bindings: each object's fields never
change for its life, see :mod:`broker.ha.snapshot_rows`) and of the replication rules,
fixed for the broker's life; its only other input, the order of the queues (busiest first,
a hint to the member), is not part of what it promises. This object hears every change of
that configuration (a configuration listener of every virtual host, and a listener of the
virtual hosts themselves) and counts them; bytes are kept only when no change came while
they were made, and are served only while none has come since (:attr:`changes`). Any
change forgets them: the next stream makes its snapshot as before. They are kept by the
link format's encoders that made them: a link writing another way is never sent them.

Costs: the snapshot's bytes (1.8 MB at 10,000 queues) from a promotion until the next
change of the configuration; its CPU (the same as one stream's snapshot) once a promotion.

THREAD UNSAFE: the broker's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from broker.core.exchange import Binding, Exchange
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.link_format import Codec
from common.slices import Steps

__all__ = ["SnapshotAhead", "ahead_key"]


def ahead_key(codec: Codec) -> Hashable:
    """What a link's snapshot bytes depend on of its format: how it encodes the event and
    its rows, and whether it carries the bindings to the standard exchanges (formats 2
    and 3 write the same bytes)."""
    return (codec.encode_config_steps, codec.encode_snapshot_row, codec.standard_bindings)


class SnapshotAhead:
    """See the module docstring. A :class:`~broker.core.vhost.ConfigListener` of every
    virtual host and a :class:`~broker.core.vhosts.VhostListener` of the virtual hosts."""

    def __init__(self) -> None:
        #: Changes of the replicated configuration heard so far.
        self.changes = 0
        #: The bytes made, the encoders' key they were made for, and :attr:`changes` then.
        self._made: tuple[Hashable, int, bytes] | None = None
        #: A making in progress (its own count of the changes it began at).
        self._making: int | None = None

    def made(self, key: Hashable) -> bytes | None:
        """The snapshot made ahead for a link whose encoders are ``key``, if nothing has
        changed since it was made (None: make one)."""
        made = self._made
        if made is None or made[0] != key or made[1] != self.changes:
            return None
        return made[2]

    @property
    def making(self) -> bool:
        """A snapshot is being made now, from a configuration unchanged since it began."""
        return self._making is not None and self._making == self.changes

    def make_steps(
        self,
        key: Hashable,
        snapshot: Callable[[], Steps[dict[str, Any]]],
        encode: Callable[[dict[str, Any]], Steps[bytes]],
    ) -> Steps[None]:
        """Make the snapshot (``snapshot()``'s event, encoded by ``encode``) for a link
        whose encoders are ``key``, in their slices; kept when no change came meanwhile. A
        making ended early, or one that fails (an object the format cannot carry: the
        stream's own snapshot says why), keeps nothing."""
        began = self._making = self.changes
        try:
            event = yield from snapshot()
            if self.changes != began:
                return
            body = yield from encode(event)
        except ValueError:
            return
        finally:
            if self._making == began:
                self._making = None
        if self.changes == began:
            self._made = (key, began, body)

    def _changed(self) -> None:
        self.changes += 1
        self._made = None

    # -- the virtual hosts' changes (ConfigListener, VhostListener) -----------------------
    def queue_declared(self, queue: Queue) -> None:
        self._changed()

    def queue_deleted(self, queue: Queue) -> None:
        self._changed()

    def exchange_declared(self, exchange: Exchange) -> None:
        self._changed()

    def exchange_deleted(self, exchange: Exchange) -> None:
        self._changed()

    def bound(self, binding: Binding) -> None:
        self._changed()

    def unbound(self, binding: Binding) -> None:
        self._changed()

    def vhost_created(self, vhost: VirtualHost) -> None:
        self._changed()

    def vhost_deleted(self, vhost: VirtualHost) -> None:
        self._changed()
