"""Backup side, asyncio shell: one link's configuration stream, applied in order, in slices.

Each delivery of the configuration stream (``qpid.ha-config``) is decoded
(:meth:`~broker.ha.link_format.Codec.decode_config_steps`) and applied
(:meth:`~broker.ha.broker_replicator.BrokerReplicator.apply_steps`) a slice a turn of the
event loop: a snapshot of 10,000 queues at once was one step of 270-380 ms of CPU
(docs/reliability.md, "No long stalls"). Deliveries are applied one after the other, in
the stream's order; the next waits for the one before to be applied. Each is acknowledged
once applied, and once what applying it wrote is durable on this backup's disk.

While a new link's first snapshot is decoded and applied, each slice waits first for
the member's busiest queues' streams to open (``hold``: the queues that snapshot keeps as
they are, subscribed as their rows are decoded: :mod:`broker.ha.queue_subscriptions`), so
that the loop turns of their channel.open and basic.consume round trips are not each
behind a slice of 10,000 queues (issue 25: on 2 cores at load 20 a slice of a few ms of CPU
is tens of ms of wall, and the new primary's first confirms wait for those streams).
Only an event of :data:`HOLD_BYTES` or more waits so: a smaller one is decoded and applied
in a few ms of CPU, and holding it behind the streams' round trips only delays it.

A snapshot's head (format 4: ``snapshot-head``, the busiest queues' rows) is acknowledged
once the streams it had subscribed are open (``hold``), and the primary makes the snapshot
only after that acknowledgement: at a fail-over those streams' round trips with the new
primary are then not each behind a slice of the snapshot (10,000 queues: ~25 ms of its CPU,
issue 25).

Atomic for whoever acts on the configuration: when the link stops with an event half
applied, :meth:`ConfigApplier.end` applies the rest, a slice a turn of the loop, before the
link's end is reported (:class:`~broker.ha.backup.BackupLink`), and nothing after it; a
promotion waits for that end (:meth:`~broker.ha.backup.BackupLink.settled`, and the
promotion's ``DropLink`` awaits :meth:`ConfigApplier.end` before it stops the link), so it
never starts from half a snapshot. The rest of 10,000 queues at once was one step of 198 ms
of CPU at load 12-30 (issue 25). Only a link cancelled in that end (the broker stopping)
has the rest applied at once (:meth:`ConfigApplier.finish`). Management reads meanwhile may
see part of it (they promise nothing).

THREAD UNSAFE: runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from broker.amqp.client import ClientError, Delivery
from broker.ha.broker_replicator import BrokerReplicator, ConfigChanges
from broker.ha.link_format import Codec
from common.slices import SLICE, Steps, run_steps

__all__ = ["AppliedDisk", "ConfigApplier"]

#: A configuration event (a snapshot) of this many bytes or more has its slices wait for
#: the new link's busy streams (``hold``); one under it (some 370 queues at ~176 bytes a
#: queue; a one-queue snapshot is ~370 bytes) does not: held 69-100 ms at one queue at
#: load 30 it only delayed the member's catch-up (issue 26 item 5).
HOLD_BYTES = 64 * 1024


class AppliedDisk(Protocol):
    """What the applier needs of the backup's store (its journal)."""

    @property
    def appended(self) -> int:
        """Records appended so far."""
        ...

    def after_durable(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` once every record appended so far is durable."""
        ...


class ConfigApplier:
    """See the module docstring. :meth:`delivered` is the stream's consumer callback."""

    def __init__(
        self,
        ack: Callable[[int], None],
        codec: Codec,
        replicator: BrokerReplicator,
        disk: AppliedDisk | None,
        *,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        failed: Callable[[dict[str, Any] | None, Exception], None],
        store_failed: Callable[[str], None],
        applied: Callable[[dict[str, Any], ConfigChanges], None],
        decoded: Callable[[dict[str, Any]], None] | None = None,
        seen: Callable[[str, Any], None] | None = None,
        hold: Callable[[], Awaitable[None]] | None = None,
        size: int = SLICE,
    ) -> None:
        """``applied(event, changes)`` after each event is applied; ``decoded(event)``
        after it is decoded, before it is applied, and ``seen(field, value)`` as each field
        and each item of an array field is decoded (the link subscribes the queues a first
        snapshot keeps as they are then: :mod:`broker.ha.queue_subscriptions`);
        ``hold()`` awaited before each slice of the decoding and the applying (it returns
        once those queues' streams are open); ``size``: objects a slice of the applying."""
        self._ack = ack
        self._size = size
        self._codec = codec
        self._replicator = replicator
        self._disk = disk
        self._spawn = spawn
        self._failed = failed
        self._store_failed = store_failed
        self._applied = applied
        self._decoded = decoded
        self._seen = seen
        self._hold = hold
        self._pending: deque[Delivery] = deque()
        self._waiting = 0  # acknowledgements waiting for the disk (later ones wait behind)
        #: The event being applied in slices.
        self._applying: Steps[ConfigChanges] | None = None
        #: The rest of the event the link's end applies (:meth:`end`).
        self._rest: Steps[ConfigChanges] | None = None
        #: The link stopped: nothing more is applied but :attr:`_rest`.
        self._ended = False
        #: The run of :attr:`_rest`, a slice a turn, that callers of :meth:`end` share.
        self._finishing: asyncio.Future[None] | None = None

    def delivered(self, delivery: Delivery) -> None:
        if self._ended:
            return  # the link stopped: the primary sends it again to the next link
        self._pending.append(delivery)
        if len(self._pending) == 1:
            self._spawn(self._apply_pending())

    async def end(self) -> None:
        """The link stops: the event being applied is applied to its end, a slice a turn of
        the loop, and nothing after it begins (neither acknowledged nor reported:
        ``applied``). Returns once it is. Callers at once (the link's end, a promotion's
        ``DropLink``) share one run of it, still a slice a turn; one cancelled leaves it
        running for the others. A failure drops the rest (the next link's snapshot
        repairs)."""
        self._take_rest()
        if self._rest is None:
            return
        if self._finishing is None or self._finishing.done():
            self._finishing = asyncio.ensure_future(self._apply_rest())
        await asyncio.shield(self._finishing)

    async def _apply_rest(self) -> None:
        while (steps := self._rest) is not None:
            try:
                next(steps)
            except Exception:  # StopIteration: applied; else the next link's snapshot repairs
                self._rest = None
                return
            await asyncio.sleep(0)

    def finish(self) -> None:
        """The link stops and cannot wait (cancelled: the broker stops): :meth:`end`, the
        rest applied now, in one step."""
        self._take_rest()
        steps, self._rest = self._rest, None
        if steps is not None:
            with contextlib.suppress(Exception):  # the next link's snapshot repairs
                run_steps(steps)

    def _take_rest(self) -> None:
        """The event being applied is no longer the stream's (its task returns at its next
        slice): the link's end applies its rest (:attr:`_rest`)."""
        self._ended = True
        steps, self._applying = self._applying, None
        if steps is not None:
            self._rest = steps

    async def _apply_pending(self) -> None:
        pending = self._pending
        while pending:
            applied = await self._apply(pending[0])
            pending.popleft()
            if applied is None:
                return  # failed: the link closes
            event, changes, appended, tag = applied
            self._acknowledge(tag, appended)
            self._applied(event, changes)

    async def _apply(
        self, delivery: Delivery
    ) -> tuple[dict[str, Any], ConfigChanges, int, int] | None:
        """(the event, what changed, the disk's records before, its tag), or None when it
        could not be applied (``failed``) or the link's end finished it."""
        appended = 0 if self._disk is None else self._disk.appended
        event: dict[str, Any] | None = None
        hold = self._hold if len(delivery.body) >= HOLD_BYTES else None
        try:
            event = await _sliced(self._codec.decode_config_steps(delivery.body, self._seen), hold)
            if self._ended:
                return None  # the link stopped while it was decoded: nothing applied
            if self._decoded is not None:
                self._decoded(event)
            if event.get("type") == "snapshot-head" and self._hold is not None:
                # acknowledged once the busy streams it opened are open: the primary makes
                # the snapshot after that ack, so their round trips are not behind it
                await self._hold()
                if self._ended:
                    return None
            steps = self._replicator.apply_steps(event, self._size)
            self._applying = steps
            try:
                while True:
                    try:
                        next(steps)
                    except StopIteration as done:
                        changes: ConfigChanges = done.value
                        break
                    await asyncio.sleep(0)
                    if hold is not None:
                        await hold()
                    if self._applying is not steps:
                        return None  # finished by the link's end
            finally:
                if self._applying is steps:
                    self._applying = None
        except Exception as exc:  # the shell: any failure is an event, never a traceback
            self._failed(event, exc)
            return None
        return event, changes, appended, delivery.delivery_tag

    def _acknowledge(self, tag: int, appended: int) -> None:
        disk = self._disk
        if disk is None or not (self._waiting or disk.appended != appended):
            self._ack_now(tag)
            return
        # What applying it wrote (a durable queue deleted with its messages, ...) is on
        # this backup's disk before the primary's delete-ok: a promise.
        self._waiting += 1

        def durable(ok: bool) -> None:
            self._waiting -= 1
            if not ok:
                self._store_failed("configuration stream: the store cannot write")
                return
            self._ack_now(tag)

        disk.after_durable(durable)

    def _ack_now(self, tag: int) -> None:
        with contextlib.suppress(ClientError):  # the link is going down
            self._ack(tag)


async def _sliced(
    steps: Steps[dict[str, Any]], hold: Callable[[], Awaitable[None]] | None = None
) -> dict[str, Any]:
    """The result of ``steps``, a slice a turn of the loop (each after ``hold()``)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: dict[str, Any] = done.value
            return result
        await asyncio.sleep(0)
        if hold is not None:
            await hold()
