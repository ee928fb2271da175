"""A backup link's subscriptions to its primary's queue streams, and its catch-up.

One :class:`QueueSubscriptions` a link session (the :class:`~broker.ha.backup.BackupLink`
makes a new one each time a link comes up). The configuration stream says which queues
are replicated (:meth:`QueueSubscriptions.config_applied`); it subscribes each such queue's
stream, :data:`SUBSCRIBERS` at a time (at a new link's first snapshot, the queues with the
most recent traffic first: :func:`~broker.ha.queue_replicator.catch_up_order`; those of
them the snapshot keeps as they are already once it is decoded, before it is applied:
:meth:`QueueSubscriptions.config_decoded`), announcing
the replication ids the backup already holds (the reconnect handshake), applies each batch
with the queue's :class:`~broker.ha.queue_replicator.QueueReplicator` and has it
acknowledged by the link's :class:`~broker.ha.queue_replicator.BatchAcks`. The backup is
*caught up* when every queue named in the link's first snapshot has reported ``Ready``: it
then calls ``caught_up`` once (CATCHUP -> READY).

What it needs of its link is given at construction, as callables and parts: the client,
the replicator, the codec, the disk, the acknowledgements, a way to run a task the link
cancels when it goes (``spawn``), a replication error (``failed(object, reason)``) and a
log line (``log``). It never imports the link.

THREAD UNSAFE: runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker.amqp.client import AmqpClient, ClientChannel, ClientError, Delivery
from broker.core.vhost import VHOST
from broker.ha.broker_replicator import BrokerReplicator, ConfigChanges
from broker.ha.id_set import IdSet
from broker.ha.link_format import Codec
from broker.ha.names import IDS_ARGUMENT, VHOST_ARGUMENT
from broker.ha.queue_replicator import (
    AckCoalescer,
    BatchAcks,
    CatchUpGc,
    QueueReplicator,
    catch_up_order,
)
from broker.ha.replication_errors import described, queue_object

#: Queues named in a log line at most (``ha_snapshot_applied``'s ``busiest``).
LOGGED_QUEUES = 10

#: Queue streams subscribed at a time (each: channel.open, then basic.qos and basic.consume
#: together).
SUBSCRIBERS = 64

#: Seconds a new link's first snapshot waits at most, from its first wait, for the streams
#: of the queues subscribed before it is applied (:meth:`QueueSubscriptions.early_streams_open`).
EARLY_HOLD = 2.0
#: A queue holding this many messages or more has its reconnect handshake's id set taken
#: one at a time, a pause of :data:`BIG_IDS_PAUSE` after each (:class:`IdsPacer`).
BIG_IDS = 10_000
#: The pause after a big queue's id set (seconds): longer than the loop's step tick while
#: it works (broker.loop_steps.TICK_INTERVAL, 10 ms: an id set is a step of work), so two
#: never fall in one step.
BIG_IDS_PAUSE = 0.011


class IdsPacer:
    """The reconnect handshake's id sets of big queues, one a step of the loop.

    A new link's subscribers (:data:`SUBSCRIBERS` of them) resume together when the
    primary's channel.open-oks come in one read; each took its queue's id set
    (:meth:`QueueReplicator.ids`, a walk of every message it holds). The scale soak's ten
    backlog queues of 50,000 messages each were subscribed first (busy queues first) and
    their id sets made one loop step of 145 ms of CPU on a backup at load 25. A big queue's
    id set is now taken under a lock, and the lock kept a pause longer than the step tick
    after it: the next big one comes in another step. Small queues pass at once. Only when
    the handshake goes out changes: the set is still taken just before its subscribe, from
    what the queue holds then. THREAD UNSAFE: the loop's thread."""

    def __init__(self, big: int = BIG_IDS, pause: float = BIG_IDS_PAUSE) -> None:
        self.big = big
        self.pause = pause
        self._lock: asyncio.Lock | None = None
        #: when the last big queue's id set was taken (the loop's clock; None: none yet)
        self._last: float | None = None

    async def ids(self, replicator: QueueReplicator) -> IdSet:
        """``replicator``'s id set, taken once no other big queue's was taken within
        :attr:`pause` (a small queue's at once)."""
        if replicator.queue.message_count < self.big:
            return replicator.ids()
        if self._lock is None:
            self._lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._last is not None and (wait := self._last + self.pause - loop.time()) > 0:
                await asyncio.sleep(wait)  # the loop's step tick runs first
            ids = replicator.ids()
            self._last = loop.time()
        return ids


class AppendCount(Protocol):
    """The part of the store's journal that tells whether applying a batch wrote to it."""

    @property
    def appended(self) -> int:
        """Records appended so far."""
        ...


@dataclass
class SubscribeQueue:
    """A link's queues waiting to be subscribed, and its subscribers running."""

    names: deque[str] = field(default_factory=deque)
    running: int = 0


class QueueSubscriptions:
    """See the module docstring."""

    def __init__(
        self,
        client: AmqpClient,
        replicator: BrokerReplicator,
        codec: Codec,
        *,
        credit: int,
        disk: AppendCount | None,
        batch_acks: BatchAcks,
        gc: CatchUpGc,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        failed: Callable[[str, str], None],
        log: Callable[..., None],
        caught_up: Callable[[], None],
    ) -> None:
        #: The link's client; None once the link went down (a subscriber still to come
        #: subscribes nothing).
        self.client: AmqpClient | None = client
        self.replicator = replicator
        self.codec = codec
        self.credit = credit
        self.disk = disk
        self.batch_acks = batch_acks
        self._gc = gc
        self._spawn = spawn
        self._failed = failed
        self._log = log
        self._caught_up = caught_up
        self._first_snapshot = True
        #: Caught up once (reported to the link; after that, batches no longer freeze GC).
        self.caught_up_reported = False
        self._waiting: set[str] = set()
        self._queue_channels: dict[str, ClientChannel] = {}
        self._subscribed: set[str] = set()
        self._to_subscribe = SubscribeQueue()
        #: big queues' id sets one a loop step (the link's own: a new link, a new pacer)
        self._ids = IdsPacer()
        #: ``ha_subscriptions_abandoned`` logged (once per link)
        self._abandoned_logged = False
        #: The queues subscribed before the first snapshot was applied (None: none yet),
        #: by key: their replicators, which the snapshot kept.
        self._early: dict[str, QueueReplicator] | None = None
        #: While the first snapshot is decoded: the queues heard live traffic on not yet
        #: seen kept by one of its rows, by key (:meth:`config_field_decoded`).
        self._heard: dict[str, QueueReplicator] | None = None
        #: The event being decoded had rows of queues before its ``type`` (format 1).
        self._queues_seen = False
        #: After a new link's head (format 4: ``snapshot-head``), the queues heard live
        #: traffic on that it did not list, by key: its snapshot's rows may keep them.
        self._after_head: dict[str, QueueReplicator] | None = None
        #: When the link came up, its first snapshot's decoding began, and the first busy
        #: queue's stream was subscribed before it was applied (``ha_snapshot_applied``'s
        #: ``decoding_ms`` and ``first_busy_ms``: a fail-over's phases).
        self._began = time.monotonic()
        self._decoding: float | None = None
        self._first_busy: float | None = None
        #: The queues subscribed before the first snapshot is applied whose streams are
        #: not open yet, the event set when none is left, and when the snapshot's slices
        #: stop waiting for them at the latest (:meth:`early_streams_open`).
        self._opening: set[str] = set()
        self._opened = asyncio.Event()
        self._hold_until: float | None = None
        #: How long the snapshot's slices waited for them (``ha_snapshot_applied``'s
        #: ``held_ms``).
        self._held = 0.0
        #: The link's own steps before its first snapshot, each the first time it came
        #: (:meth:`mark`; ``ha_snapshot_applied``'s ``link_ms``).
        self._marks: dict[str, float] = {}

    def end(self) -> None:
        """The link went down: subscribe nothing more."""
        self.client = None
        self._opening.clear()
        self._opened.set()

    async def early_streams_open(self) -> None:
        """Return once every queue subscribed before the link's first snapshot is applied
        has its stream open (consumed, or its subscription failed, or the link went down),
        or :data:`EARLY_HOLD` seconds after the first wait: the snapshot's decoding and
        applying wait here before each slice (:class:`~broker.ha.config_apply.ConfigApplier`'s
        ``hold``), so that a loaded member's loop turns for those queues' round trips with
        the new primary are not each behind a slice of the rest (their first confirms wait
        for these streams). Waiting delays only the rest of the snapshot, never a rule: the
        same streams, the same handshake, the same guards as without it."""
        if not self._opening or self.client is None:
            return
        loop = asyncio.get_running_loop()
        if self._hold_until is None:
            self._hold_until = loop.time() + EARLY_HOLD
        left = self._hold_until - loop.time()
        if left <= 0:
            return
        began = loop.time()
        self._opened.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await self._opened.wait()
        self._held += loop.time() - began

    def _stream_opened(self, key: str) -> None:
        """``key``'s subscription ended (its stream open, or failed)."""
        opening = self._opening
        if key in opening:
            opening.discard(key)
            if not opening:
                self._opened.set()

    def mark(self, step: str) -> None:
        """The link's ``step`` came now (its first time is logged with the first snapshot:
        the lease and configuration streams consumed, the snapshot received)."""
        if self._first_snapshot and step not in self._marks:
            self._marks[step] = time.monotonic()

    def config_field_decoded(self, name: str, value: Any) -> None:
        """As a configuration event is decoded, each field and each item of an array field
        (:class:`~broker.ha.config_apply.ConfigApplier`'s ``seen``): once a new link's first
        snapshot says it is one (its ``type``, which formats 2 and later send first), each
        queue this backup heard live traffic on is subscribed as soon as a row of its
        ``queues`` keeps it as it is (:meth:`config_decoded`'s rule, a row at a time:
        :meth:`~broker.ha.broker_replicator.BrokerReplicator.kept_by_row`). The primary
        lists its busiest queues first (:func:`~broker.ha.config_objects.snapshot_steps`),
        so theirs open after a slice of the decoding, not after all of it (10,000 queues:
        70-90 ms of CPU, seconds at load 20-30). Format 4 sends the snapshot's head first,
        the busiest queues' rows in an event of their own (``snapshot-head``): those queues
        are subscribed once it is decoded, by the same rule, before the snapshot is made,
        sent and decoded (a new primary's 25 ms of CPU and 1.8 MB at 10,000 queues); the
        snapshot's rows then subscribe the other queues heard on. Format 1 sends ``type``
        last: its queues wait for the whole snapshot (:meth:`config_decoded`)."""
        if name == "type":
            after_head, self._after_head = self._after_head, None
            self._heard = None
            if value not in ("snapshot", "snapshot-head") or not self._first_snapshot:
                return
            if self._early is not None:
                # after a head (format 4) its snapshot's rows subscribe the queues heard on
                # that the head did not list; one head a link
                if value == "snapshot" and after_head is not None and not self._queues_seen:
                    self._heard = after_head
                return
            if self._decoding is None:
                self._decoding = time.monotonic()
            if self._queues_seen:
                return  # format 1 sends the type last: the whole snapshot (config_decoded)
            replicators = self.replicator.replicators
            self._heard = {key: r for key, r in replicators.items() if r.traffic}
            self._early = {}
            return
        if name != "queues":
            return
        self._queues_seen = True
        heard = self._heard
        if not heard:
            return
        key = self.replicator.kept_by_row(value, heard)
        if key is None:
            return
        replicator = heard.pop(key)
        assert self._early is not None  # set with _heard
        self._early[key] = replicator
        self._subscribe_early(key, replicator)
        self._start_subscribers()

    def _subscribe_early(self, key: str, replicator: QueueReplicator) -> None:
        self._opening.add(key)
        replicator.caught_up = False  # caught up again on this link
        self._waiting.add(key)
        self._subscribed.add(key)
        self._to_subscribe.names.append(key)

    def config_decoded(self, event: dict[str, Any]) -> None:
        """Before a configuration event is applied: at a new link's first snapshot, the
        queues this backup heard live traffic on (the busiest first: the ones clients come
        back to after a fail-over) are subscribed at once, those the snapshot keeps as they
        are (:meth:`~broker.ha.broker_replicator.BrokerReplicator.kept_by_snapshot`: the
        same queue on the primary, declared the same, replicated with level ``all``).

        Applying a snapshot of 10,000 queues takes seconds on a loaded machine, and a
        member's guards hold those queues' confirms until its streams of them are open
        (docs/ha-design.md, "Who a confirm waits for"). Those queues exist here already and
        applying the snapshot changes none of them, so their streams need not wait for it:
        each stream is the same reconnect handshake as after the snapshot (the ids held
        here; the primary sends what is missing and removes what it no longer has), and
        the guard of the queue on the primary is the stream's as before. A queue the
        snapshot would replace or delete is left for after it (subscribed then, as every
        other)."""
        if event.get("type") == "snapshot-head" and self._heard is not None:
            self._after_head = self._heard  # for its snapshot's rows
        self._heard, self._queues_seen = None, False  # every row seen (config_field_decoded)
        if event.get("type") != "snapshot" or not self._first_snapshot or self._early is not None:
            return
        replicators = self.replicator.replicators
        heard = [key for key, replicator in replicators.items() if replicator.traffic]
        heard.sort(key=lambda key: -replicators[key].traffic)
        self._early = self.replicator.kept_by_snapshot(event, heard)
        for key in heard:
            replicator = self._early.get(key)
            if replicator is not None:
                self._subscribe_early(key, replicator)
        self._start_subscribers()

    def config_applied(self, event: dict[str, Any], changes: ConfigChanges) -> None:
        """After a configuration event: the queue streams to open and to close."""
        subscribe = list(changes.subscribe)
        for name in changes.unsubscribe:
            self._waiting.discard(name)
            self._subscribed.discard(name)
            queue_channel = self._queue_channels.pop(name, None)
            if queue_channel is not None:
                self._spawn(queue_channel.close())
        if event.get("type") == "snapshot" and self._first_snapshot:
            # A new link: every replicated queue catches up again, including the ones
            # this backup already had from an earlier primary (reconnect handshake); those
            # subscribed before the snapshot was applied (config_decoded) are on their way.
            self._first_snapshot = False
            early = self._early or {}
            replicators = self.replicator.replicators
            subscribe = catch_up_order(replicators)  # busy queues first
            for key, replicator in replicators.items():
                if early.get(key) is not replicator:
                    replicator.caught_up = False
                    self._waiting.add(key)
            before = [key for key in early if key in self._subscribed]  # the busiest first
            self._log(
                "ha_snapshot_applied",
                queues=len(replicators),
                subscribed_before=len(before),
                busiest=before[:LOGGED_QUEUES],
                decoding_ms=self._since_link(self._decoding),
                first_busy_ms=self._since_link(self._first_busy),
                held_ms=round(self._held * 1000.0, 1),
                link_ms={step: self._since_link(at) for step, at in self._marks.items()},
            )
        for name in subscribe:
            if name not in self._subscribed:
                self._subscribed.add(name)
                self._to_subscribe.names.append(name)
        self._start_subscribers()
        self._check_caught_up()

    def _since_link(self, at: float | None) -> float | None:
        return None if at is None else round((at - self._began) * 1000.0, 1)

    def _start_subscribers(self) -> None:
        pending = self._to_subscribe
        while pending.names and pending.running < SUBSCRIBERS:
            pending.running += 1
            self._spawn(self._subscriber(pending))

    async def _subscriber(self, pending: SubscribeQueue) -> None:
        """Subscribe the queues waiting, one at a time, until none waits: with
        :data:`SUBSCRIBERS` of these, a snapshot of 10,000 queues is not 10,000 channels
        opened in one turn of the loop (300 ms of CPU), nor 10,000 ``basic.consume`` in one
        read of the primary's. One that dequeues a queue unsubscribed meanwhile skips it."""
        try:
            while pending.names:
                name = pending.names.popleft()
                if name in self._subscribed:
                    await self._subscribe(name)
                else:
                    self._stream_opened(name)  # unsubscribed meanwhile: nothing to wait for
        finally:
            pending.running -= 1

    async def _subscribe(self, name: str) -> None:
        try:
            await self._subscribe_stream(name)
        finally:
            self._stream_opened(name)

    async def _subscribe_stream(self, name: str) -> None:
        client = self.client
        replicator = self.replicator.replicators.get(name)
        if client is None or replicator is None:
            return
        try:
            channel = await client.open_channel()
            self._queue_channels[name] = channel
            acks = AckCoalescer(
                channel.ack, asyncio.get_running_loop().call_soon, self.credit // 4, (ClientError,)
            )

            disk = self.disk
            batch_acks = self.batch_acks
            decode_batch = self.codec.decode_batch

            def ack(tag: int) -> None:
                with contextlib.suppress(ClientError):  # the link is going down
                    acks.applied(tag)

            def on_batch(delivery: Delivery) -> None:
                appended = 0 if disk is None else disk.appended
                if replicator.caught_up:
                    replicator.heard()  # live traffic: first at the next link's catch-up
                try:
                    replicator.apply(decode_batch(delivery.body))  # the link's format
                except Exception as exc:  # the shell: any failure is an event
                    self._failed(queue_object(replicator.queue), described(exc))
                    return
                wrote = disk is not None and disk.appended != appended
                batch_acks.applied(replicator, ack, delivery.delivery_tag, wrote)
                if not self.caught_up_reported:
                    self._gc.applied()
                if replicator.caught_up and name in self._waiting:
                    self._waiting.discard(name)
                    self._check_caught_up()

            queue = replicator.queue  # name: its key; the stream names it in its vhost
            stream, arguments = self.codec.queue_stream(queue.name)  # the link's format
            ids = await self._ids.ids(replicator)
            if self.client is not client:  # the link went down meanwhile
                return
            arguments[IDS_ARGUMENT] = bytearray(ids.encode())
            if queue.vhost != VHOST:
                arguments[VHOST_ARGUMENT] = queue.vhost
            # basic.qos and basic.consume sent together (the broker handles a channel's
            # methods in order): one round trip less a queue, of four
            answers = await asyncio.gather(
                channel.qos(self.credit),
                channel.consume(stream, on_batch, arguments=arguments),
                return_exceptions=True,
            )
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
            if self._first_busy is None and self._first_snapshot and self._early:
                self._first_busy = time.monotonic()  # a busy queue's stream, before the rest
        except (ValueError, TypeError) as exc:  # e.g. a stream name the link cannot carry
            self._failed(queue_object(replicator.queue), described(exc))
        except ClientError as exc:
            if client.is_closed:
                self._link_closed(exc)
                return
            # The queue may have gone on the primary meanwhile; its deletion event follows.
            self._log("ha_subscribe_failed", queue=name, reason=str(exc))
            if self._first_snapshot and self._early is not None:
                # subscribed before the first snapshot: once it is applied, as any other
                self._early.pop(name, None)
                self._subscribed.discard(name)
            self.replicator.staging.queue_gone(replicator)  # its part of a transaction won't come
            self.batch_acks.forget(replicator)
            self.batch_acks.release()  # batches held behind that transaction
            self._waiting.discard(name)
            self._check_caught_up()

    def _link_closed(self, exc: ClientError) -> None:
        """The link's connection ended with subscriptions pending: none of them can be made
        on it, and the link's end abandons its staging and its waits (a new link subscribes
        again). Logged once, with how many were left (``ha_subscriptions_abandoned``), not
        once per queue: 8,151 ``ha_subscribe_failed`` lines of 10,000 pending queues held a
        backup's loop 371-403 ms in the scale soak."""
        pending = self._to_subscribe
        left = len(pending.names)
        pending.names.clear()
        self._opening.clear()
        self._opened.set()
        if left or not self._abandoned_logged:
            self._abandoned_logged = True
            self._log("ha_subscriptions_abandoned", queues=left + 1, reason=str(exc))

    def _check_caught_up(self) -> None:
        if not self._first_snapshot and not self._waiting and not self.caught_up_reported:
            self.caught_up_reported = True
            self._caught_up()
