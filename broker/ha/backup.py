"""Backup side, asyncio shell: the backup's link to its primary (seed 001's "federation link").

Every ``link-maintenance-interval`` the backup dials the addresses of ``ha-brokers-url`` in
turn until one accepts it as primary (a broker that is not the primary refuses with 530, as
it refuses clients); after a lost link it redials sooner, from :data:`LINK_RETRY_MIN`
doubling up to that interval (:func:`~broker.ha.redial.dial_loop`). Over the link it
subscribes to the configuration stream and, per queue replicated with level ``all``, to
that queue's stream, announcing the replication ids it already holds (the reconnect
handshake; :class:`~broker.ha.queue_subscriptions.QueueSubscriptions`, one a link). It
applies what arrives with the sans-I/O :class:`~broker.ha.broker_replicator.BrokerReplicator` and
:class:`~broker.ha.queue_replicator.QueueReplicator` and acknowledges each delivery once
applied, which is what releases the primary's held publisher confirms.

A dial that fails is logged (``ha_link_dial_failed``) when its reason at that address
changes, else at most once a minute with a ``repeated`` count
(:class:`~broker.ha.redial.DialFailures`); a refusal by a broker that is not (yet) the
primary, normal while a cluster starts, and a dial of this broker itself at debug level.
:meth:`BackupLink.link_error` is the failure to show in ``/api/ha`` until a link comes up.
Without ``ha-username`` (or with authentication off on this broker) the link logs in with
ANONYMOUS where the primary offers it and ``ha-mechanism`` cannot be used:
docs/ha-design.md, "The link".

The backup is *caught up* when every queue named in the first snapshot of this link has
reported ``Ready``; the link then tells its owner (CATCHUP -> READY). A primary whose epoch
is lower than the highest this backup has seen is refused (fencing). When the link drops,
the backup keeps its state (a READY backup stays eligible for promotion) and dials again.

THREAD UNSAFE: runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from broker.amqp.client import (
    AmqpClient,
    ClientChannel,
    ClientError,
    ConnectionClosedByBroker,
    Delivery,
)
from broker.amqp.client.handshake import NoUsableMechanism
from broker.core.errors import ReplyCode
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts
from broker.ha.backup_dial import (
    DIAL_PATIENCE,
    PRIMARY_STATES,
    answer_bound,
    connect_as_backup,
)
from broker.ha.broker_replicator import BrokerReplicator
from broker.ha.config_apply import ConfigApplier
from broker.ha.dial_failure import NotPrimary, describe_dial_failure, format_refusal
from broker.ha.lease_stream import decode_request
from broker.ha.link_format import CODECS, NoCommonFormat, codec_of, link_format
from broker.ha.link_reach import ReachTimes, watch_reach
from broker.ha.names import (
    BASE_EPOCH_PROPERTY,
    BROKER_ID_PROPERTY,
    CLUSTER_ID_PROPERTY,
    CONFIG_STREAM,
    EPOCH_PROPERTY,
    LEASE_STREAM,
    PROMOTING_PROPERTY,
    STATUS_PROPERTY,
)
from broker.ha.queue_replicator import BatchAcks, CatchUpGc
from broker.ha.queue_subscriptions import QueueSubscriptions
from broker.ha.redial import Backoff, DialFailures, DialRefused, dial_loop
from broker.ha.replication_errors import (
    ReplicationErrors,
    described,
    event_object,
)
from broker.ha.state import HaState
from common.formats import FormatRange
from common.log import get_logger
from common.url import Address
from common.version import REPLICATION_FORMATS


class DiskSync(Protocol):
    """The part of the store's journal a backup needs to acknowledge only what its own disk
    has (:class:`~broker.store.journal.Journal`)."""

    @property
    def appended(self) -> int:
        """Records appended so far."""
        ...

    def after_durable(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` once every record appended so far is durable."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """The records appended inside go to the disk as one record, all or none."""
        ...


class LinkOwner(Protocol):
    """What the link needs of the HA broker that owns it."""

    @property
    def broker_id(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    def link_up(self, address: Address, primary_epoch: int) -> None: ...

    def caught_up(self) -> None: ...

    def link_down(self, reason: str) -> None: ...

    def store_failed(self, reason: str) -> None: ...

    def check_history(
        self, primary_epoch: int, base_epoch: int | None, address: str
    ) -> str | None: ...

    def log(self, event: str, **fields: Any) -> None: ...

    def member_grant(self, epoch: int, duration: float) -> None:
        """Grant the primary of ``epoch`` a member lease of ``duration`` (its count),
        received now (broker.ha.member_lease)."""
        ...

    def member_asked(self, epoch: int) -> None:
        """The primary of ``epoch`` asked for no promise (it does not count this backup)."""
        ...


#: The HA states of a backup, as its connection.start names them.
BACKUP_STATES = frozenset(state.value for state in HaState if state.is_backup)

#: First redial delay after a lost link (seconds); it doubles up to link-maintenance-interval.
LINK_RETRY_MIN = 0.01

#: Seconds after a lost link during which every redial pause is :data:`LINK_RETRY_MIN`
#: (:class:`~broker.ha.redial.Backoff`'s ``steady``): a fail-over is under way, and the
#: broker being promoted is dialled every 10 ms, its refusals before the login cheap, so
#: this backup links to it within ~10 ms of its promotion's end, not a doubled pause later
#: (issue 26: ~35 ms of a 163 ms broker kill). A broker kill's fail-over ends within
#: 0.1-0.3 s on a quiet machine, 0.3-3 s at load 20-30; after the window the pause doubles
#: up to link-maintenance-interval as before.
LINK_FAILOVER_REDIAL = 2.0

#: At most one ``ha_link_dial_failed`` line per address in this many seconds, unless the
#: reason changes.
DIAL_FAILURE_LOG_INTERVAL = 60.0


class OwnAddress(DialRefused):
    """The address is this broker's own (``ha-brokers-url`` names it too): not dialled, as
    it never finds the primary there, and not logged. Dialling it cost a handshake on this
    broker's own loop each round (issue 25: 100 ms once, at a fail-over of 10,000 queues,
    on a member whose loop was ending its old link). Known by :attr:`LinkOwner.url`, or
    by the first dial's connection.start naming this broker's id (a broker listening on
    ``0.0.0.0`` has its node name as its URL, ``ha-brokers-url`` its IP address): that
    dial ends there, before the login, and the address is not dialled again."""


def _promoting(server_properties: dict[str, Any]) -> bool:
    """connection.start says a backup's state and a promotion under way."""
    status = server_properties.get(STATUS_PROPERTY)
    return status in BACKUP_STATES and server_properties.get(PROMOTING_PROPERTY) is True


def refuse_before_login(server_properties: dict[str, Any]) -> None:
    """A broker whose connection.start says it is not the primary is not logged into: the
    dial ends there (:class:`NotPrimary`), as it would at connection.open a login later (a
    backup refuses links), without the login nor its two round trips on that broker. One
    whose promotion is under way (``qpid.ha-promoting``) is refused so too, saying
    ``soon``: the next round comes after the shortest pause and dials it first
    (:meth:`~broker.ha.redial.Backoff.soon`). Logging into it gained nothing: refused at
    open while the promotion lasted, or admitted after its end with connection.start's
    stale state and epoch, then closed and dialled again at once, a second whole handshake
    (issue 26: 100-200 ms of a one-queue fail-over at load 30); and each login was loop
    turns of the broker being promoted."""
    status = server_properties.get(STATUS_PROPERTY)
    if status in PRIMARY_STATES:
        return
    raise NotPrimary(
        None if status is None else str(status), promoting=_promoting(server_properties)
    )


class BackupLink:
    """Keeps this backup connected to the primary and replicating."""

    def __init__(
        self,
        owner: LinkOwner,
        vhost: VirtualHost | VirtualHosts,
        addresses: list[Address],
        *,
        user: str | None,
        password: str | None,
        mechanism: str,
        maintenance_interval: float,
        heartbeat: float,
        flow_messages: int,
        auth_here: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        tls: ssl.SSLContext | None = None,
        check_cluster: Callable[[str | None, str], str | None] | None = None,
        disk: DiskSync | None = None,
        formats: FormatRange = REPLICATION_FORMATS,
    ) -> None:
        """``auth_here``: whether this broker requires authentication; off, or without a
        ``user``, the link falls back to ANONYMOUS where its mechanism cannot be used.
        ``disk``: this broker's store; a batch that wrote to it is acknowledged only once
        what it wrote is durable. ``formats``: the replication formats it speaks; each link
        reads the highest its primary speaks too (:mod:`broker.ha.link_format`)."""
        self.owner = owner
        self.vhost = vhost
        self.addresses = addresses
        self.user = user
        self.password = password
        self.mechanism = mechanism
        self.anonymous_fallback = user is None or not auth_here
        #: The context ``ssl:`` addresses are dialled with (the broker's CA and certificate).
        self.tls = tls
        #: ``check_cluster(primary's cluster id, address)``: None to join, else why not
        self.check_cluster = check_cluster
        self.disk = disk
        self.formats = formats
        #: The codec of the link's replication format (set at each dial).
        self.codec = codec_of(formats.highest if formats.highest in CODECS else 1)
        self.maintenance_interval = maintenance_interval
        self.heartbeat = heartbeat
        self.credit = max(1, min(flow_messages // 32 or 1, 1000))
        self.replicator = BrokerReplicator(vhost)
        if disk is not None:  # a replicated transaction: one TX record, as on the primary
            self.replicator.staging.store_transaction = disk.transaction
        self.client: AmqpClient | None = None
        self._task: asyncio.Task[None] | None = None
        #: The link's queue streams and its catch-up (a new one each link).
        self._subscriptions: QueueSubscriptions | None = None
        self._subscribing: set[asyncio.Task[None]] = set()
        #: The link's configuration stream, applied in slices.
        self._config: ConfigApplier | None = None
        #: Set once the link's end is reported (None: no end under way): :meth:`settled`.
        self._ending: asyncio.Event | None = None
        self._broken: asyncio.Event | None = None
        self._gc = CatchUpGc()
        self._clock = clock
        self._wall_clock = wall_clock
        self._failures = DialFailures(DIAL_FAILURE_LOG_INTERVAL)
        #: The addresses of ``ha-brokers-url`` whose connection.start named this broker's
        #: id: not dialled again (:class:`OwnAddress`).
        self._own: set[Address] = set()
        #: This link's latest replication error (``/api/ha``'s ``replication_error``).
        self.errors = ReplicationErrors(wall_clock)
        #: Why this link gave up replicating (a stream it could not apply): closed with it.
        self._gave_up: str | None = None
        #: The primary's 541 text when it closed the link for a stream it could not send.
        self._primary_gave_up: str | None = None
        self._log = get_logger("ha")

    def _new_batch_acks(self) -> BatchAcks:
        """Acknowledge a batch once it is applied, not staged, and what it stored is durable
        on this backup: the primary's confirm of a persistent message then means every
        in-sync store has it, so a total failure (a power cut of every node) loses none
        (issue 12). A store that cannot write stops this backup (fail-stop): acknowledging
        would be a lie; restarted, it recovers what its disk has and fetches the rest."""
        disk = self.disk
        return BatchAcks(None if disk is None else disk.after_durable, self.owner.store_failed)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ha-backup-link")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The dial loop ends only when cancelled, or on a bug: never silently."""
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            self.owner.log("ha_link_error", reason=f"the link stopped: {described(exc)}")
            self.errors.failed("link", f"the link stopped: {described(exc)}")

    def replication_error(self) -> dict[str, Any] | None:
        """The latest replication error of this backup, until a link catches up."""
        return self.errors.view("link")

    def link_error(self) -> dict[str, Any] | None:
        """Why the link is not up (``/api/ha``'s ``link_error``): the latest failed dial that
        is not a routine refusal, else the latest; None while a link is up, and before any
        dial failed."""
        failure = self._failures.current()
        if self.client is not None or failure is None:
            return None
        started = self._wall_clock() - (self._clock() - failure.since)
        return {
            "address": failure.address,
            "reason": failure.reason,
            "since": datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "count": failure.count,
        }

    async def stop(self, abort: bool = False) -> None:
        """Stop replicating; ``abort``: drop the link at once without the close handshake
        (at promotion: the old primary may be gone or cut off and never answer)."""
        task, self._task = self._task, None
        client = self.client
        if abort and client is not None:
            await client.abort("promoted: this broker is the primary now")
        # A configuration event half applied is applied to its end first, a slice a turn
        # (the link's own end may be doing so too: they share it): the promotion that
        # stops the link never starts from half a snapshot. The task cancelled after it
        # finds nothing left to apply.
        config = self._config
        if config is not None:
            await config.end()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.client is not None:
            await self._close_client(self.client)

    async def _close_client(self, client: AmqpClient, gave_up: str | None = None) -> None:
        """Close the link; ``gave_up``: a replication error, sent to the primary as
        connection.close 541 ``replication error: <object>: <reason>`` (its ``/api/ha``
        shows it on this backup's row)."""
        code, text = ReplyCode.REPLY_SUCCESS, ""
        if gave_up is not None:
            code = ReplyCode.INTERNAL_ERROR
            text = f"replication error: {gave_up}".encode()[:250].decode("utf-8", "ignore")
        # asyncio.timeout, never wait_for: Python 3.11's wait_for returns normally when it
        # is cancelled just as the close ends. The link task's cancellation was lost, it
        # dialled on, and stop() (at promotion: DropLink) waited for it for ever.
        with contextlib.suppress(ClientError, OSError, TimeoutError):
            async with asyncio.timeout(2.0):
                await client.close(code, text)

    # -- dialling ----------------------------------------------------------------------
    async def _run(self) -> None:
        # After a lost link the new primary is usually promoted within a few hundred ms,
        # and while it recovers it holds its clients' confirms until this backup is ready
        # again: redial every LINK_RETRY_MIN for LINK_FAILOVER_REDIAL seconds, then from
        # LINK_RETRY_MIN doubling up to the maintenance interval, rather than wait a whole
        # interval. Until a link first comes up, dial every maintenance interval.
        await dial_loop(
            self.addresses,
            self._dial,
            self._session,
            Backoff(LINK_RETRY_MIN, self.maintenance_interval, LINK_FAILOVER_REDIAL),
            dial_errors=(ClientError,),
            on_dial_failed=self._dial_failed,
            clock=self._clock,
            # a busy primary's handshake is waited for (DIAL_PATIENCE), not begun again
            answer_within=answer_bound(self.heartbeat),
            discard=self._close_client,
        )

    def _dial_failed(self, address: Address, exc: Exception) -> None:
        """A dial failed or was refused: log it if it is news (the next round dials again)."""
        if isinstance(exc, OwnAddress):
            return  # not dialled: nothing failed
        reason, routine = describe_dial_failure(address, exc)
        if isinstance(exc, NoUsableMechanism) and self.user is None:
            reason += " (set ha-username and ha-password)"
        line = self._failures.failed(str(address), reason, self._clock(), routine=routine)
        if line is None:
            return
        log = self._log.debug if routine else self._log.warning
        event = "ha_link_format_refused" if format_refusal(exc) else "ha_link_dial_failed"
        log(event, address=str(address), reason=reason, repeated=line.repeated)

    async def _dial(self, address: Address) -> AmqpClient:
        owner = self.owner
        if str(address) == owner.url or address in self._own:
            raise OwnAddress("this broker's own address")

        def read_start(server_properties: dict[str, Any]) -> None:
            if server_properties.get(BROKER_ID_PROPERTY) == owner.broker_id:
                self._own.add(address)
                raise OwnAddress("this broker's own address")
            refuse_before_login(server_properties)

        try:
            client = await connect_as_backup(
                address,
                user=self.user,
                password=self.password,
                mechanism=self.mechanism,
                heartbeat=self.heartbeat,
                product="qpidd HA backup link",
                broker_id=owner.broker_id,
                url=owner.url,
                epoch=owner.epoch,
                anonymous_fallback=self.anonymous_fallback,
                tls=self.tls,
                formats=self.formats,
                on_start=read_start,
                timeout=DIAL_PATIENCE,
            )
        except ValueError as exc:  # e.g. ha-username without ha-password
            raise DialRefused(f"link configuration: {exc}") from exc
        status = client.server_properties.get(STATUS_PROPERTY)
        if status not in PRIMARY_STATES:
            # Not (yet) an HA primary: e.g. a broker still starting, listening before its
            # HA role admits or refuses connections. Following it would mean catch-up forever.
            # (read_start ends such a dial before the login; this stays the guard it was.)
            # A backup's state in connection.start, yet the link was admitted at open
            # (a backup refuses links there): promoted during the handshake, its start's
            # epoch stale; dialled again at once.
            await self._close_client(client)
            promoted = status in BACKUP_STATES  # (not a stand-alone broker: None)
            raise NotPrimary(None if status is None else str(status), promoted=promoted)
        try:  # a primary that speaks formats refuses this link itself at connection.open
            wire_format = link_format(self.formats, client.server_properties, f"primary {address}")
        except NoCommonFormat:
            await self._close_client(client)
            raise
        self.codec = codec_of(wire_format)
        epoch = int(client.server_properties.get(EPOCH_PROPERTY) or 0)
        if epoch < owner.epoch:
            owner.log(
                "ha_primary_refused",
                address=str(address),
                primary_epoch=epoch,
                reason="its epoch is older than one this backup has seen",
            )
            await self._close_client(client)
            raise DialRefused(f"older epoch {epoch} < {owner.epoch}")
        if self.check_cluster is not None:
            cluster_id = client.server_properties.get(CLUSTER_ID_PROPERTY)
            refusal = self.check_cluster(str(cluster_id) if cluster_id else None, str(address))
            if refusal is not None:  # a store of another cluster: never replicate into it
                await self._close_client(client)
                raise DialRefused(refusal)
        raw_base = client.server_properties.get(BASE_EPOCH_PROPERTY)
        base = raw_base if isinstance(raw_base, int) and not isinstance(raw_base, bool) else None
        refusal = owner.check_history(epoch, base, str(address))
        if refusal is not None:  # this store holds an era the primary's never saw
            await self._close_client(client)
            raise DialRefused(refusal)
        return client

    async def _session(self, client: AmqpClient, address: Address) -> bool:
        """Replicate over ``client`` until the link drops: True, unless this backup gave
        up on a stream (a replication error: the next dial backs off, never at once).

        The link's end is reported (``link_down``) only once a configuration event it left
        half applied is applied to its end, a slice a turn (:meth:`_end_applying`); a
        promotion meanwhile waits for it (:meth:`settled`). Cancelled (the broker stops, or
        a promotion's :meth:`stop` once that end is done), the rest is applied at once."""
        self._gave_up = self._primary_gave_up = None
        self._config = None
        try:
            try:
                reason = await self._replicate(client, address)
            except (ClientError, ValueError, OSError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # a bug: an event, the link closed, dialled again later
                self._fail("the link", described(exc))
                reason = f"replication error: {described(exc)}"
            await self._link_ended(reason)
        finally:
            self._stop_applying()
            self.client = None
            if self._subscriptions is not None:
                self._subscriptions.end()
            self._gc.end()
            self.abandon_transactions("link down")
            await self._close_client(client, self._gave_up)
        return self._gave_up is None and self._primary_gave_up is None

    def abandon_transactions(self, reason: str) -> None:
        """Drop the staged transactions not yet whole (a promoted backup must hold all of a
        transaction or none; a new link sends again what is missing), logging each."""
        for tx in self.replicator.staging.abandon():
            self.owner.log(
                "ha_tx_discarded",
                tx=tx.tx,
                queues=tx.queues,
                messages=tx.messages,
                total=tx.total,
                reason=reason,
            )

    # -- replicating -------------------------------------------------------------------
    async def _replicate(self, client: AmqpClient, address: Address) -> str:
        """Replicate over ``client`` until the link drops; why it dropped."""
        self.client = client
        subscriptions = self._subscriptions = QueueSubscriptions(
            client,
            self.replicator,
            self.codec,
            credit=self.credit,
            disk=self.disk,
            batch_acks=self._new_batch_acks(),
            gc=self._gc,
            spawn=self._spawn,
            failed=self._fail,
            log=self.owner.log,
            caught_up=self._caught_up,
        )
        self._broken = asyncio.Event()
        epoch = int(client.server_properties.get(EPOCH_PROPERTY) or 0)
        self._failures.succeeded()
        self.owner.link_up(address, epoch)
        # Two round trips with the primary, not five: the channels opened together, then
        # the lease stream consumed, the configuration stream's qos and consume, sent
        # together (the primary handles a connection's methods in order: the lease stream
        # first). At a fail-over each round trip waits behind the new primary's busy loop
        # (10,000 queues: ~10 ms each, issue 25), and the member's first confirms wait for
        # its configuration stream.
        lease: ClientChannel | None = None
        if self.codec.member_lease:  # replication format 3: grant the primary its lease
            lease, config = await asyncio.gather(client.open_channel(), client.open_channel())
        else:
            config = await client.open_channel()
        self._config = ConfigApplier(
            config.ack,
            self.codec,
            self.replicator,
            self.disk,
            spawn=self._spawn,
            failed=lambda event, exc: self._fail(event_object(event), described(exc)),
            store_failed=self.owner.store_failed,
            applied=subscriptions.config_applied,
            decoded=subscriptions.config_decoded,
            seen=subscriptions.config_field_decoded,
            hold=subscriptions.early_streams_open,
        )
        delivered = self._config.delivered

        def on_config(delivery: Delivery) -> None:
            # the first delivery: the snapshot, or its head (format 4)
            subscriptions.mark("snapshot_received")
            delivered(delivery)

        async def lease_consumed(channel: ClientChannel) -> None:
            await channel.consume(LEASE_STREAM, self._lease_callback(channel))
            subscriptions.mark("lease_consumed")

        calls: list[Awaitable[object]] = [] if lease is None else [lease_consumed(lease)]
        calls += [config.qos(self.credit), config.consume(CONFIG_STREAM, on_config)]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        for answer in answers:
            # A snapshot that fails on the primary closes the link (541) at once: the wait
            # below reads that close (a consume still answered raises only "closed").
            if isinstance(answer, BaseException) and not (
                isinstance(answer, ClientError) and client.is_closed
            ):
                raise answer
        subscriptions.mark("config_consumed")
        closed = asyncio.ensure_future(client.wait_closed())
        broken = asyncio.ensure_future(self._broken.wait())
        # a silent link is probed: a primary's host that acknowledges nothing is cut off
        reach = asyncio.ensure_future(watch_reach(client, self._reach_times(client)))
        try:
            await asyncio.wait({closed, broken, reach}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (closed, broken, reach):
                waiter.cancel()
        reason = "link closed"
        if reach.done() and not reach.cancelled() and not closed.done():
            reason = reach.result()  # (a bug in the probe raises: the session logs it)
            await client.abort(reason)  # dropped at once: the host answers nothing
        elif closed.done() and not closed.cancelled():
            result = closed.result()
            reason = str(result) if result is not None else reason
            if (
                isinstance(result, ConnectionClosedByBroker)
                and result.reply_code == ReplyCode.INTERNAL_ERROR
                and self._primary_gave_up is None
            ):
                # The primary could not send a stream (its 541 names the object): back off.
                text = result.reply_text.removeprefix(f"{ReplyCode.INTERNAL_ERROR.name} - ")
                self._primary_gave_up = text
                self._log.warning("ha_replication_error", object="primary", reason=reason)
                self.errors.failed("link", f"closed by the primary: {text}")
        return reason

    async def _link_ended(self, reason: str) -> None:
        """The link is down: the rest of what it left half applied is applied, a slice a
        turn (:meth:`_end_applying`), then its end is reported (``link_down``); a promotion
        meanwhile waits (:meth:`settled`). Cancelled, the rest is applied at once."""
        self._ending = ending = asyncio.Event()
        try:
            await self._end_applying()
            self.owner.link_down(reason)
        finally:
            self._stop_applying()
            self._ending = None
            ending.set()

    async def _end_applying(self) -> None:
        """The link is down: its subscribes and the stream's applying stop, and the
        configuration event it left half applied is applied to its end, a slice a turn of
        the loop (never half a snapshot after the link: :mod:`broker.ha.config_apply`)."""
        for task in list(self._subscribing):
            task.cancel()
        if self._config is not None:
            await self._config.end()

    def _stop_applying(self) -> None:
        """:meth:`_end_applying` at once (the link's task cancelled: the broker stops)."""
        for task in list(self._subscribing):
            task.cancel()
        if self._config is not None:
            self._config.finish()

    async def settled(self) -> None:
        """Return once no link's end is under way: the rest of a configuration event the
        link left half applied is applied and the link's end reported (``link_down``). A
        promotion awaits it first (:meth:`~broker.ha.ha_broker.HaBroker.promote`): the
        role then knows whether this backup is ready, and nothing promotes half a
        snapshot."""
        while (ending := self._ending) is not None:
            await ending.wait()

    def _reach_times(self, client: AmqpClient) -> ReachTimes:
        """The probe's times, from the link's heartbeat (negotiated, else configured)."""
        return ReachTimes.for_heartbeat(float(client.heartbeat) or max(1.0, self.heartbeat))

    def _fail(self, what: str, reason: str) -> None:
        """This backup cannot apply what the primary sent about ``what`` (an object: ``queue
        'q' in vhost '/'``): log it, show it, and close the link saying why. The primary
        then counts this backup gone, as any whose link went: it leaves the in-sync set
        only by the cluster manager's committed removal."""
        if self._gave_up is None:
            self._gave_up = f"{what}: {reason}"
        self._log.warning("ha_replication_error", object=what, reason=reason)
        self.errors.failed("link", f"{what}: {reason}")
        if self._broken is not None:
            self._broken.set()

    def _lease_callback(self, channel: ClientChannel) -> Callable[[Delivery], None]:
        """Answer each lease request at once: the grant is noted, then acknowledged
        (broker.ha.lease_stream; nothing waits for the disk or for replication)."""

        def on_request(delivery: Delivery) -> None:
            try:
                _seq, epoch, duration, needed = decode_request(delivery.body)
            except ValueError as exc:
                self._fail("the lease stream", str(exc))
                return
            if needed:  # a promise only when the primary counts it
                self.owner.member_grant(epoch, duration)
            else:  # that primary does not count this backup (now)
                self.owner.member_asked(epoch)
            with contextlib.suppress(ClientError):  # the link is going down
                channel.ack(delivery.delivery_tag)

        return on_request

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._subscribing.add(task)
        task.add_done_callback(self._spawned_done)

    def _spawned_done(self, task: asyncio.Future[Any]) -> None:
        """A subscribe or a channel close ended: an exception it let through is a
        replication error (an event), never asyncio's "exception was never retrieved"."""
        self._subscribing.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None and not isinstance(exc, ClientError):
            self._fail("a queue stream", described(exc))

    def _caught_up(self) -> None:
        """Every queue of the link's first snapshot caught up (CATCHUP -> READY)."""
        self.errors.cleared("link")
        self._gc.end()
        self.owner.caught_up()
