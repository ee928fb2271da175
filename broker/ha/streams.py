"""The primary's replication streams, carried over AMQP channels of a backup's link.

A backup asks for a stream with basic.consume of a reserved queue name on a channel of its
own (see docs/ha-design.md):

- ``qpid.ha-config``: a :class:`~broker.ha.config_stream.ConfigStream`, a snapshot of the
  replicated configuration (virtual hosts, queues, exchanges, bindings) followed by every
  change, one field-table event a delivery; an object outside vhost ``/`` carries a
  ``vhost`` field (none: ``/``);
- ``qpid.ha-queue:<name>`` (replication format 1), or ``qpid.ha-queue`` with the name in
  argument ``qpid.ha-queue`` (format 2: any name fits), its vhost in argument
  ``qpid.ha-vhost`` (absent for ``/``), with argument ``qpid.ha-ids`` (the ids the backup
  holds):
  :class:`QueueStream`, one :class:`~broker.ha.replicating_subscription.ReplicatingSubscription`
  whose batches travel as deliveries; the backup's acks release the queue guards.

:class:`PrimaryStreams` is the hook the AMQP channel calls for those names
(:class:`broker.amqp.context.StreamHooks`: it serves every name with
:data:`~broker.ha.names.STREAM_PREFIX`). A stream sees its channel only as a
:class:`~broker.amqp.stream_sink.StreamSink`: who asked, credit, deliver a body, ask for a
pump. Streams never write in the queue's observer callbacks: they ask the sink for a
*pump* and write everything pending when it runs, so one flush carries many messages.
Credit is the channel's basic.qos prefetch, counted in deliveries (batches): the part every
kind shares is :class:`~broker.ha.channel_stream.ChannelStream`. On a link with a lease
stream (format 3), the queue streams also share the link's
:class:`~broker.ha.link_credit.LinkCredit`: a bound, per link, on the bytes ahead of a lease
request (issue 25).

THREAD UNSAFE: the primary's event loop owns the streams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from broker.core.errors import AmqpError, ReplyCode, access_refused, not_found
from broker.core.exchange import Binding, Exchange
from broker.core.queue import Queue
from broker.core.vhost import VHOST
from broker.core.vhosts import VirtualHosts, key_of, queue_key
from broker.ha.channel_stream import ChannelStream
from broker.ha.config_guard import NEXT_STREAM, ReplyHandle
from broker.ha.config_objects import snapshot_head, snapshot_steps
from broker.ha.config_stream import ConfigStream
from broker.ha.id_set import IdSet
from broker.ha.lease_stream import LeaseStream
from broker.ha.link_credit import LinkCredit
from broker.ha.link_format import Codec, NoCommonFormat, codec_of, link_format
from broker.ha.names import (
    BACKUP_PROPERTY,
    BROKER_ID_PROPERTY,
    CONFIG_STREAM,
    IDS_ARGUMENT,
    LEASE_STREAM,
    QUEUE_ARGUMENT,
    QUEUE_STREAM,
    QUEUE_STREAM_PREFIX,
    STREAM_PREFIX,
    URL_PROPERTY,
    VHOST_ARGUMENT,
)
from broker.ha.primary import Primary
from broker.ha.primary_start import loop_call_soon
from broker.ha.remote_backup import RemoteBackup
from broker.ha.replicate_level import (
    ReplicateLevel,
    binding_replicated,
    destination_replicated,
    exchange_admits_bindings,
    exchange_replicated,
    queue_level,
)
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.replication_errors import object_named
from broker.ha.snapshot_rows import SnapshotRows
from broker.ha.users_on_streams import UsersOnStreams
from common.formats import FormatRange
from common.slices import SLICE, SliceQueue, Steps, rows_in_slices, run_steps
from common.version import REPLICATION_FORMATS

if TYPE_CHECKING:
    from broker.amqp.stream_sink import StreamSink

__all__ = ["BackupEvents", "ConfigStream", "LeaseEvents", "PrimaryStreams", "QueueStream"]

#: A backup's list of queue streams is pruned of closed ones once this long, then at twice
#: what it kept.
PRUNE_FROM = 64
#: How a backup's connection.close reads when it gave up on a stream (541 INTERNAL_ERROR,
#: text ``replication error: <object>: <reason>``; ``broker.ha.backup``): the connection's
#: close reason starts so.
_BACKUP_GAVE_UP = "client closed: 541 replication error: "


class QueueStream(ChannelStream):
    """One queue's replication to one backup over one channel."""

    def __init__(
        self,
        sink: StreamSink,
        subscription: ReplicatingSubscription,
        on_ready: Callable[[], None],
        detach_later: Callable[[Callable[[], None]], None] | None = None,
        link: LinkCredit | None = None,
    ) -> None:
        super().__init__(sink)
        self.subscription = subscription
        #: The link's bound on what is ahead of a lease request (None: no lease stream).
        self.link = link
        self._on_ready = on_ready
        #: Runs its leaving of the queue once closed (:meth:`close`) at a later turn
        #: (``PrimaryStreams``: a slice of a link's streams a turn); None: at once.
        self._detach_later = detach_later
        self._reported_ready = False
        self._batches: dict[int, int] = {}
        self._sizes: dict[int, int] = {}  # delivery tag -> body bytes (with a link credit)
        subscription.wake = self.request_pump  # a new delivery watermark to announce
        # new work in the queue: pump soon (asked once until the pump runs)
        subscription.on_work = self.request_pump
        self.request_pump()

    def pump(self) -> None:
        subscription = self.subscription
        subscription.work_taken()  # work from now on asks for a pump again
        link = self.link
        while self.can_send and subscription.has_work:
            if link is not None and not link.open:
                link.wait(self.key, self.request_pump)  # pumped again once it is
                return
            try:
                batch = subscription.next_batch()
            except (ValueError, TypeError) as exc:  # a message the batch format cannot carry
                queue = subscription.queue
                self._failed(object_named("queue", queue.name, queue.vhost), str(exc))
                return
            if batch is None:
                break
            batch_tag, body = batch
            tag = self._deliver(body)
            self._batches[tag] = batch_tag
            if link is not None:
                self._sizes[tag] = len(body)
                link.sent(len(body))

    def acknowledged(self, delivery_tag: int, multiple: bool) -> None:
        tags = [t for t in self._batches if t <= delivery_tag] if multiple else [delivery_tag]
        for tag in tags:
            batch_tag = self._batches.pop(tag, None)
            if batch_tag is not None:
                self.in_flight -= 1
                self.subscription.acknowledged(batch_tag)
                size = self._sizes.pop(tag, None)
                if size is not None and self.link is not None:
                    self.link.acknowledged(size)
        if self.subscription.ready and not self._reported_ready:
            self._reported_ready = True
            self._on_ready()
        self.request_pump()

    def close(self) -> None:
        """Stop at once: from now on nothing the queue does has an effect here (the
        subscription notes nothing and sends nothing, the stream pumps nothing). Leaving the
        queue's observers (:meth:`detach`) is done now, or later by ``detach_later``."""
        if self.closed:
            return
        self.subscription.stop()
        if self.link is not None:  # its batches will not be acknowledged: not ahead of one
            self.link.forget(self.key)
            self.link.acknowledged(sum(self._sizes.values()))
            self._sizes.clear()
        self._closed()
        if self._detach_later is None:
            self.detach()
        else:
            self._detach_later(self.detach)

    def detach(self) -> None:
        """Leave the queue: the closed subscription (and so this stream) no longer hear it."""
        self.subscription.close()
        self.subscription.on_work = None


class BackupEvents(Protocol):
    """Whom the streams tell about backups: the HA role's shell (or, without a role,
    :class:`~broker.ha.primary.StandaloneBackups`)."""

    def backup_connected(self, backup_id: str, url: str) -> RemoteBackup:
        """A backup opened a stream; its guards (created if it is new)."""
        ...

    def backup_queue_ready(self, backup_id: str, queue: str) -> None: ...

    def backup_gone(self, backup_id: str) -> None:
        """The backup's last stream closed: its link is gone."""
        ...

    def backup_failed(self, backup_id: str, reason: str) -> None:
        """Replication to the backup failed: a stream here could not send (``reason``
        names the object), or the backup closed its link with a replication error (its
        text). The link closes; the backup leaves the in-sync set only as any backup whose
        link went does (the committed removal)."""
        ...


class LeaseEvents(Protocol):
    """What the lease streams tell the HA broker (an HA primary only)."""

    def lease_granted(self, backup_id: str, seq: int) -> None:
        """The backup answered lease request ``seq`` (broker.ha.lease_stream)."""
        ...

    def lease_stream_opened(self, backup_id: str) -> None:
        """The backup's lease stream is open: ask it for a grant now."""
        ...


class PrimaryStreams:
    """The channel hook serving ``qpid.ha-*`` consumes on the primary."""

    def __init__(
        self, primary: Primary, events: BackupEvents, formats: FormatRange = REPLICATION_FORMATS
    ) -> None:
        self.primary = primary
        self.events = events
        #: The replication formats served; each link gets the highest its backup speaks too.
        self.formats = formats
        vhost = primary.vhost
        self.vhosts = vhost if isinstance(vhost, VirtualHosts) else VirtualHosts(default=vhost)
        self.vhost = self.vhosts.default
        self.default = primary.replicate_default
        self._streams_of: dict[str, int] = {}
        #: The only user whose replication links are served (ha-username; None: any).
        self.link_user: str | None = None
        self.config_streams: list[ConfigStream] = []
        #: The last membership event broadcast (for streams opened after it).
        self._membership: dict[str, Any] | None = None
        #: The newest configuration stream of each backup.
        self.config_stream_of: dict[str, ConfigStream] = {}
        self.queue_streams: dict[str, list[QueueStream]] = {}
        self._prune_at: dict[str, int] = {}  #: backup id -> length that prunes its list
        #: The newest queue stream of each (backup, queue key).
        self.queue_stream_of: dict[tuple[str, str], QueueStream] = {}
        #: The lease stream of each backup whose link speaks replication format 3, and who
        #: hears their grants (None: no member lease, a stand-alone broker's replica).
        self.lease_streams: dict[str, LeaseStream] = {}
        self.lease_events: LeaseEvents | None = None
        #: The cluster's users on links of format 4 (``users.serve``: the HA primary's).
        self.users = UsersOnStreams(lambda: self.config_streams)
        #: Closed queue streams leaving their queues, a slice a turn of the loop: a link's
        #: end closes its thousands of streams in one step (issue 25: 10,000 queues left
        #: in one step were a step of 141 ms); each stops at once (QueueStream.close).
        self.detaching = SliceQueue(loop_call_soon)
        #: The queues' and bindings' snapshot rows encoded ahead (the HA broker's; None:
        #: every snapshot makes its rows).
        self.rows: SnapshotRows | None = None

    # replication rules, with this broker's default
    def queue_level(self, queue: Queue) -> ReplicateLevel:
        return queue_level(queue, self.default)

    def exchange_level(self, exchange: Exchange) -> ReplicateLevel:
        return exchange_replicated(exchange, self.default)

    def binding_replicated(self, binding: Binding, standard_exchanges: bool = True) -> bool:
        """Whether ``binding`` is sent on a link (``standard_exchanges``: one whose format
        carries bindings to ``amq.topic`` and the like)."""
        vhost = self.vhosts.get(binding.destination.vhost)
        exchange = None if vhost is None else vhost.exchanges.get(binding.exchange)
        return exchange is not None and binding_replicated(
            binding, self.default, exchange=exchange, standard_exchanges=standard_exchanges
        )

    def snapshot(self, standard_exchanges: bool = True) -> dict[str, Any]:
        """The replicated configuration now, at once (:meth:`snapshot_steps`)."""
        return run_steps(self.snapshot_steps(standard_exchanges=standard_exchanges))

    def snapshot_steps(
        self,
        size: int = SLICE,
        *,
        standard_exchanges: bool = True,
        encode_row: Callable[[dict[str, Any]], bytes] | None = None,
    ) -> Steps[dict[str, Any]]:
        """The replicated configuration as of this call, in slices
        (:func:`broker.ha.config_objects.snapshot_steps`), for a link that carries bindings
        to the standard exchanges or not (``standard_exchanges``), with the rows
        :attr:`rows` encoded ahead when ``encode_row`` (the link codec's) is their encoder."""
        return snapshot_steps(
            list(self.vhosts),
            self.queue_level,
            self.exchange_level,
            self._snapshot_binding_rule(standard_exchanges),
            size,
            self._rows_for(encode_row),
        )

    def snapshot_head(
        self, encode_row: Callable[[dict[str, Any]], bytes] | None = None
    ) -> dict[str, Any] | None:
        """The busiest queues' rows, sent before the snapshot made at the same moment
        (:func:`broker.ha.config_objects.snapshot_head`); None: no busy queue."""
        return snapshot_head(
            list(self.vhosts), self.queue_level, encoded=self._rows_for(encode_row)
        )

    def _rows_for(
        self, encode_row: Callable[[dict[str, Any]], bytes] | None
    ) -> SnapshotRows | None:
        """:attr:`rows` when ``encode_row`` (a link codec's) is the encoder that made them."""
        rows = self.rows
        return rows if rows is not None and rows.writes_as(encode_row) else None

    def _snapshot_binding_rule(self, standard_exchanges: bool) -> Callable[[Binding], bool]:
        """:meth:`binding_replicated` for one snapshot, each exchange's part asked once: a
        snapshot asks it of every binding (5,000 on one exchange at 10,000 queues), and the
        answer is a function of the exchange object and of the destination alone
        (:func:`~broker.ha.replicate_level.binding_replicated`)."""
        default = self.default
        admits: dict[tuple[str, str], Exchange | None] = {}  # (vhost, name) -> exchange

        def replicated(binding: Binding) -> bool:
            destination = binding.destination
            where = (destination.vhost, binding.exchange)
            if where in admits:
                exchange = admits[where]
            else:
                vhost = self.vhosts.get(destination.vhost)
                found = None if vhost is None else vhost.exchanges.get(binding.exchange)
                admits[where] = exchange = (
                    found
                    if found is not None
                    and exchange_admits_bindings(found, default, standard_exchanges)
                    else None
                )
            return exchange is not None and destination_replicated(destination, default)

        return replicated

    def serves(self, name: str) -> bool:
        return name.startswith(STREAM_PREFIX)

    def subscribe(
        self, sink: StreamSink, name: str, arguments: dict[str, Any]
    ) -> ConfigStream | QueueStream | LeaseStream:
        props = sink.client_properties
        if not props.get(BACKUP_PROPERTY):
            raise access_refused(f"'{name}' is reserved for HA backup links")
        if self.link_user is not None and sink.user not in (None, self.link_user):
            raise access_refused(
                f"replication links are served to user '{self.link_user}' only (ha-username),"
                f" not '{sink.user}'"
            )
        backup_id = str(props.get(BROKER_ID_PROPERTY) or sink.connection_name)
        backup_url = str(props.get(URL_PROPERTY) or sink.peer)
        try:  # an HA primary refused such a link at connection.open: a stand-alone did not
            wire_format = link_format(self.formats, props, f"backup {backup_url}")
        except NoCommonFormat as exc:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, str(exc)) from None
        stream = self._open(sink, name, arguments, backup_id, backup_url, codec_of(wire_format))
        self._streams_of[backup_id] = self._streams_of.get(backup_id, 0) + 1
        stream.on_close = lambda: self._stream_closed(backup_id, stream)
        stream.on_failed = lambda what, reason: self.events.backup_failed(
            backup_id, f"primary: {what}: {reason}"
        )
        return stream

    def after_replicated(self, reply: Callable[[], None], queues: Iterable[Queue] = ()) -> None:
        """Call ``reply`` once every guarded backup holds the configuration as it is now
        (at once when none lacks anything): synchronous configuration; and, for each of
        ``queues``, has applied every dequeue of it so far (purge-ok, the commit-ok of a
        transaction's acknowledgements: :meth:`QueueGuard.hold_removal
        <broker.ha.queue_guard.QueueGuard.hold_removal>`)."""
        handle = ReplyHandle(reply)
        keys = [(key_of(queue), queue) for queue in queues]
        for backup_id, backup in self.primary.backups.items():
            stream = self.config_stream_of.get(backup_id)
            if stream is None or stream.closed:
                # Its next stream's snapshot will have the change.
                backup.config.hold(0 if stream is None else stream.key, NEXT_STREAM, handle)
            elif stream.pushed > stream.acked:
                backup.config.hold(stream.key, stream.pushed, handle)
            for key, queue in keys:
                self._hold_removal(backup_id, backup, key, queue, handle)
        handle.arm()

    def _hold_removal(
        self, backup_id: str, backup: RemoteBackup, key: str, queue: Queue, handle: ReplyHandle
    ) -> None:
        queue.first_use()  # a promotion's expected backups are guarded from it on
        guard = backup.guards.get(key)
        if guard is None or guard.queue is not queue:
            return  # not replicated to this backup (or deleted: the deletion is configuration)
        stream = self.queue_stream_of.get((backup_id, key))
        if stream is None or stream.subscription.guard is not guard:
            # Its next stream's handshake dequeues what the backup holds and the queue not.
            guard.hold_removal(handle, 0, NEXT_STREAM)
        else:
            stream.subscription.hold_removal(handle)

    def broadcast(self, event: dict[str, Any]) -> None:
        """Send an event (membership) on every open configuration stream; a stream opened
        later gets the last membership right after its snapshot."""
        if event.get("type") == "membership":
            self._membership = event
        self.config_streams = [s for s in self.config_streams if not s.closed]
        for stream in self.config_streams:
            stream.push(event)

    def _stream_closed(
        self, backup_id: str, stream: ConfigStream | QueueStream | LeaseStream
    ) -> None:
        if isinstance(stream, LeaseStream) and self.lease_streams.get(backup_id) is stream:
            del self.lease_streams[backup_id]
        if isinstance(stream, QueueStream):
            key = (backup_id, key_of(stream.subscription.queue))
            if self.queue_stream_of.get(key) is stream:
                del self.queue_stream_of[key]
        left = self._streams_of.get(backup_id, 0) - 1
        if left > 0:
            self._streams_of[backup_id] = left
            return
        self._streams_of.pop(backup_id, None)
        closed = stream.sink.close_reason or ""
        if closed.startswith(_BACKUP_GAVE_UP):  # the backup's own replication error
            self.events.backup_failed(backup_id, "backup: " + closed[len(_BACKUP_GAVE_UP) :])
        self.events.backup_gone(backup_id)  # its link is gone

    def _open(
        self,
        sink: StreamSink,
        name: str,
        arguments: dict[str, Any],
        backup_id: str,
        backup_url: str,
        codec: Codec,
    ) -> ConfigStream | QueueStream | LeaseStream:
        events = self.lease_events
        if name == LEASE_STREAM and codec.member_lease and events is not None:
            lease = LeaseStream(
                sink,
                backup_id,
                lambda seq: events.lease_granted(backup_id, seq),
                lambda: events.lease_stream_opened(backup_id),
                LinkCredit(),  # this link's, shared with its queue streams
            )
            self.lease_streams[backup_id] = lease
            return lease
        if name == CONFIG_STREAM:
            backup = self.events.backup_connected(backup_id, backup_url)
            stream = ConfigStream(sink, self, backup.config, codec)
            self.config_streams.append(stream)
            self.config_stream_of[backup_id] = stream
            if self._membership is not None:
                # Sent before this stream existed (its own connection may have changed it).
                stream.push(self._membership)
            self.users.opened(stream)  # format 4: the cluster's users
            return stream
        if name == QUEUE_STREAM:  # format 2: the name in an argument, any name fits
            plain = arguments.get(QUEUE_ARGUMENT)
            if isinstance(plain, bytes | bytearray):
                plain = bytes(plain).decode("utf-8", "replace")
            if not isinstance(plain, str) or not plain:
                raise AmqpError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"'{QUEUE_STREAM}' needs the queue's name in argument '{QUEUE_ARGUMENT}'",
                )
        elif name.startswith(QUEUE_STREAM_PREFIX):  # format 1
            plain = name[len(QUEUE_STREAM_PREFIX) :]
        else:
            raise not_found(f"no HA stream '{name}'")
        vhost = str(arguments.get(VHOST_ARGUMENT) or VHOST)
        queue_name = queue_key(vhost, plain)
        queue = self.vhosts.queue(queue_name)
        if queue is None:
            raise not_found(f"no queue '{plain}' in vhost '{vhost}'")
        if self.queue_level(queue) is not ReplicateLevel.ALL:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"queue '{queue.name}' in vhost '{queue.vhost}' is not replicated with level all",
            )
        raw_ids = arguments.get(IDS_ARGUMENT, b"")
        if isinstance(raw_ids, str):
            raw_ids = raw_ids.encode("latin-1")
        try:
            backup_ids = IdSet.decode(bytes(raw_ids)) if raw_ids else IdSet()
        except (ValueError, TypeError) as exc:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED, f"bad {IDS_ARGUMENT} argument: {exc}"
            ) from exc
        backup = self.events.backup_connected(backup_id, backup_url)
        subscription = ReplicatingSubscription(
            queue, backup.guard(queue), backup_ids, wire_format=codec.format
        )
        queue_stream = QueueStream(
            sink,
            subscription,
            on_ready=lambda: self.events.backup_queue_ready(backup_id, queue_name),
            detach_later=self.detaching.add,
            link=self._link_credit(backup_id, sink),
        )
        streams = self.queue_streams.setdefault(backup_id, [])
        if len(streams) >= self._prune_at.get(backup_id, PRUNE_FROM):
            # closed streams are dropped when the list doubled: constant time per stream
            # (a backup opens one per queue; a scan at each was 2,500^2 steps)
            streams[:] = [s for s in streams if not s.closed]
            self._prune_at[backup_id] = max(PRUNE_FROM, 2 * len(streams))
        streams.append(queue_stream)
        self.queue_stream_of[(backup_id, key_of(queue))] = queue_stream
        return queue_stream

    def _link_credit(self, backup_id: str, sink: StreamSink) -> LinkCredit | None:
        """The credit of the link ``sink`` is on: its lease stream's (None: it has none)."""
        lease = self.lease_streams.get(backup_id)
        if lease is None or lease.closed or lease.sink.connection_name != sink.connection_name:
            return None
        return lease.link

    def positions(self, backup_id: str) -> list[dict[str, Any]]:
        """Replication position and lag of each queue streamed to a backup."""
        return run_steps(self.positions_steps(backup_id))

    def positions_steps(self, backup_id: str, size: int = SLICE) -> Steps[list[dict[str, Any]]]:
        """:meth:`positions` in slices of ``size`` rows (:mod:`broker.ha.ha_status`): the
        streams are listed at once, each row read when its slice runs."""
        live = [s.subscription for s in self.queue_streams.get(backup_id, []) if not s.closed]
        rows = yield from rows_in_slices(live, _position, size)
        return sorted(rows, key=lambda r: (str(r["vhost"]), str(r["queue"])))


def _position(sub: ReplicatingSubscription) -> dict[str, Any]:
    return {
        "queue": sub.queue.name,
        "vhost": sub.queue.vhost,
        "last_sent_id": sub.last_sent,
        "sent": sub.sent_total,
        "last_id": sub.queue.last_position,
        "lag": sub.backlog,
        "unacknowledged_batches": sub.unacknowledged_batches,
        "caught_up": sub.ready,
    }
