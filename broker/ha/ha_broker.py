"""HaBroker: the HA role of one broker (asyncio shell around the sans-I/O parts).

With ``ha-cluster=yes`` a broker always starts as a backup (JOINING) and never decides by
itself to become primary: a cluster manager (our agent, Pacemaker, or an operator with
``qpid-ha promote --cluster-manager``) calls :meth:`promote`. This class

- keeps the HA state and logs every transition (``ha_state_changed``), refusing illegal
  ones by stopping the broker (fail-stop);
- is the connection admission policy: a backup refuses every connection except HA admin
  ones with 530 NOT_ALLOWED ("HA backup: not the primary ..."), so clients move on to the
  next address of their URL list; the primary accepts clients and backup links;
- runs the :class:`~broker.ha.backup.BackupLink` while a backup, and the
  :class:`~broker.ha.primary.Primary` role with its replication streams once promoted;
- keeps the fencing epoch (:class:`~broker.ha.epoch.EpochStore`): a primary that sees a
  higher epoch (a backup link announcing it) stops serving at once;
- publishes its status in Connection.Start server properties (``qpid.ha-status``,
  ``qpid.ha-epoch``), the cheap status check used before promoting a joining broker;
- advertises the cluster's public URL (``ha-public-url``, else ``ha-brokers-url``, without
  credentials) to clients: ``known-hosts`` of connection.open-ok, the server property
  ``qpid.ha-public-url``, a backup's refusal text and ``/api/ha``;
- as a new primary, deletes the replicated auto-delete queues nobody consumes from within
  their grace period (:mod:`broker.ha.auto_delete`), a delete replicated like any other.

THREAD UNSAFE: the broker's event loop owns it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.core.errors import AmqpError, ReplyCode
from broker.ha.auto_delete import grace_of
from broker.ha.backup import BackupLink
from broker.ha.epoch import EpochStore
from broker.ha.names import (
    ADMIN_PROPERTY,
    BACKUP_PROPERTY,
    BROKER_ID_PROPERTY,
    EPOCH_PROPERTY,
    PUBLIC_URL_PROPERTY,
    STATUS_PROPERTY,
)
from broker.ha.primary import Primary
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.state import HaState, IllegalTransition, check_transition
from broker.ha.status_check import check_status
from broker.ha.streams import PrimaryStreams
from broker.options import public_url
from common.log import get_logger, set_log_context
from common.url import Address, parse_url

if TYPE_CHECKING:
    from broker.amqp.connection import Connection
    from broker.options import BrokerOptions


#: Replication ids a new primary skips on every queue (more than any backup may be ahead).
REPLICATION_ID_GAP = 2**32


class PromoteError(Exception):
    """A promotion refused; the message says why (shown by qpid-ha and the API)."""


class HaBroker:
    """See the module docstring."""

    def __init__(
        self,
        vhost: Any,
        context: Any,
        options: BrokerOptions,
        *,
        amqp_port: Callable[[], int],
        on_fenced: Callable[[str], None],
    ) -> None:
        self.vhost = vhost
        self.context = context
        self.options = options
        self.log_ = get_logger("ha")
        self.broker_id = str(uuid.uuid4())
        self._amqp_port = amqp_port
        self._on_fenced = on_fenced
        self.state = HaState.JOINING
        self.epoch_store = EpochStore(options.data_dir)
        self.epoch_store.load()
        self.addresses = list(parse_url(options.ha_brokers_url or "").addresses)
        #: What clients are told to connect to (canonical, no credentials).
        self.public_url = public_url(options) or ""
        self.replicate_default = ReplicateLevel.parse(options.ha_replicate)
        self.primary: Primary | None = None
        self.streams: PrimaryStreams | None = None
        self.link: BackupLink | None = None
        self.primary_address: str | None = None
        self.members: list[dict[str, Any]] = []
        self.fenced = False
        #: Monotonic time until which the cluster manager vouches for this primary (its
        #: ZooKeeper session lease); None until a lease is granted (no agent: no lease).
        self.lease_until: float | None = None
        self._promoting = asyncio.Lock()
        context.admission = self
        context.server_properties = self.server_properties
        set_log_context(epoch=self.epoch_store.current)

    # -- identity ----------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.epoch_store.current

    @property
    def url(self) -> str:
        host = self.options.interface
        if host in ("0.0.0.0", "::", ""):
            host = self.options.node_name
        return str(Address(host, self._amqp_port()))

    def log(self, event: str, **fields: Any) -> None:
        self.log_.info(event, **fields)

    def server_properties(self) -> dict[str, Any]:
        return {
            STATUS_PROPERTY: self.state.value,
            EPOCH_PROPERTY: self.epoch,
            BROKER_ID_PROPERTY: self.broker_id,
            PUBLIC_URL_PROPERTY: self.public_url,
        }

    def known_hosts(self) -> str:
        """connection.open-ok's known-hosts for an admitted client: the public URL."""
        return self.public_url

    # -- state -------------------------------------------------------------------------
    def _move(self, new: HaState, **fields: Any) -> None:
        old = self.state
        if old is new:
            return
        try:
            reason = check_transition(old, new)
        except IllegalTransition as exc:
            self.log_.critical("ha_illegal_transition", old=old.value, new=new.value)
            self.fenced = True
            self._on_fenced(str(exc))
            return
        self.state = new
        self.log_.info("ha_state_changed", old=old.value, new=new.value, reason=reason, **fields)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Start as a backup: dial the primary."""
        self.log_.info(
            "ha_started",
            broker_id=self.broker_id,
            state=self.state.value,
            brokers_url=self.options.ha_brokers_url,
            public_url=self.public_url,
            replicate=self.replicate_default.value,
        )
        self._start_link()

    def _start_link(self) -> None:
        options = self.options
        self.link = BackupLink(
            self,
            self.vhost,
            self.addresses,
            user=options.ha_username,
            password=options.ha_password,
            mechanism=options.ha_mechanism,
            maintenance_interval=options.link_maintenance_interval,
            heartbeat=options.link_heartbeat_interval,
            flow_messages=options.ha_flow_messages,
        )
        self.link.start()

    async def stop(self) -> None:
        if self.link is not None:
            await self.link.stop()
            self.link = None

    def tick(self) -> None:
        primary = self.primary
        if primary is None:
            return
        if not self.may_confirm():
            return
        primary.tick()
        for old, new, _reason in primary.take_transitions():
            if self.state is old:
                self._move(new, dropped=list(primary.dropped))
        for queue in primary.take_orphans():
            if self.vhost.queues.get(queue.name) is queue:
                self.log_.info(
                    "ha_orphan_queue_deleted",
                    queue=queue.name,
                    messages=queue.message_count,
                    grace=grace_of(queue, primary.auto_delete_grace),
                )
                self.vhost.delete_queue(queue.name)
        self._publish_membership()

    # -- backup link callbacks ---------------------------------------------------------
    def link_up(self, address: Address, primary_epoch: int) -> None:
        self.primary_address = str(address)
        if primary_epoch > self.epoch:
            self.epoch_store.observe(primary_epoch)
            set_log_context(epoch=primary_epoch)
        self.log_.info("ha_link_up", primary=str(address), primary_epoch=primary_epoch)
        if self.state is HaState.JOINING or self.state is HaState.READY:
            self._move(HaState.CATCHUP, primary=str(address))

    def caught_up(self) -> None:
        if self.state is HaState.CATCHUP:
            self._move(HaState.READY, primary=self.primary_address)

    def link_down(self, reason: str) -> None:
        if self.primary_address is not None:
            self.log_.warning("ha_link_down", primary=self.primary_address, reason=reason)
        self.primary_address = None
        if self.link is not None:
            self.members = list(self.link.replicator.members)

    # -- admission ---------------------------------------------------------------------
    def admit(self, connection: Connection) -> AmqpError | None:
        props = connection.client_properties
        if props.get(ADMIN_PROPERTY):
            return None
        if self.fenced or not self.may_confirm():
            return AmqpError(ReplyCode.NOT_ALLOWED, "HA broker fenced: not serving")
        if self.state.is_primary:
            if props.get(BACKUP_PROPERTY):
                their_epoch = int(props.get(EPOCH_PROPERTY) or 0)
                if their_epoch > self.epoch:
                    self.fence(f"a backup has seen epoch {their_epoch} > ours {self.epoch}")
                    return AmqpError(ReplyCode.NOT_ALLOWED, "HA broker fenced: newer epoch")
            return None
        return AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"HA backup: not the primary (state {self.state.value}); clients connect to"
            f" {self.public_url}",
        )

    def released(self, connection: Connection) -> None:
        pass

    # -- the cluster manager's lease ----------------------------------------------------
    def grant_lease(self, seconds: float) -> None:
        """The cluster manager vouches for this primary for ``seconds`` more.

        The agent renews it at every check with what is left of its own lease on its
        ZooKeeper session. Once granted, a primary whose lease runs out fences itself
        (stops serving, exits 3; its supervisor restarts it as a backup): a primary whose
        agent died, froze or lost ZooKeeper never serves beside the next one.
        """
        if not self.state.is_primary:
            raise PromoteError(f"a lease is for a primary; this broker is {self.state.value}")
        self.lease_until = self.context.clock() + seconds

    def lease_expired(self) -> bool:
        until = self.lease_until
        return until is not None and self.state.is_primary and self.context.clock() > until

    def may_confirm(self) -> bool:
        """Publisher confirms go out only while the lease holds (admission policy hook)."""
        if self.fenced:
            return False
        if self.lease_expired():
            self.fence("the cluster manager's lease ran out")
            return False
        return True

    def fence(self, reason: str) -> None:
        """Stop serving at once (a newer primary exists)."""
        if self.fenced:
            return
        self.fenced = True
        self.log_.critical("ha_fenced", reason=reason, epoch=self.epoch)
        self._on_fenced(reason)

    # -- promotion ---------------------------------------------------------------------
    async def promote(self, epoch: int | None = None) -> HaState:
        """Become the primary (cluster-manager only). Returns the new state.

        One promotion at a time: a second request waits for the first and then finds the
        broker primary already (or fenced)."""
        async with self._promoting:
            return await self._promote(epoch)

    async def _promote(self, epoch: int | None) -> HaState:
        state = self.state
        if self.fenced:
            raise PromoteError("this broker is fenced; restart it")
        if state.is_primary:
            if epoch is not None and epoch > self.epoch:
                self.epoch_store.observe(epoch)
                set_log_context(epoch=epoch)
            return state
        if state is HaState.CATCHUP:
            raise PromoteError("still catching up: cannot promote a backup in catch-up")
        if epoch is not None and epoch < self.epoch:
            raise PromoteError(f"epoch {epoch} is older than epoch {self.epoch} seen here")
        if state is HaState.JOINING:
            busy = await self._cluster_beyond_joining()
            if busy is not None:
                raise PromoteError(f"cannot promote a joining broker: {busy} is beyond joining")
        new_epoch = epoch if epoch is not None else self.epoch + 1
        await asyncio.to_thread(self.epoch_store.observe, new_epoch)
        set_log_context(epoch=self.epoch)
        expected = {
            str(m["id"]): str(m["url"])
            for m in self._last_members()
            if m.get("state") == HaState.READY.value and m.get("id") != self.broker_id
        }
        if self.link is not None:
            await self.link.stop(abort=True)
            # Exclusive queues belonged to client connections of the old primary, which
            # died with it: delete them as their connections' close would have.
            for name in sorted(self.link.replicator.exclusive):
                self.vhost.delete_queue(name)
            self.link = None
        # Never reuse a replication id: another backup may hold ids past ours for messages
        # of the old primary that never reached us (the reconnect handshake would skip them).
        for queue in self.vhost.queues.values():
            queue.last_position += REPLICATION_ID_GAP
        primary = Primary(
            self.vhost,
            replicate_default=self.replicate_default,
            expected=expected,
            backup_timeout=self.options.ha_backup_timeout,
            clock=self.context.clock,
            auto_delete_grace=self.options.ha_backup_timeout,
        )
        self.primary = primary
        self.streams = PrimaryStreams(primary)
        self.streams.on_change = self._membership_changed
        self.context.streams = self.streams
        self.vhost.listeners.append(_PrimaryListener(primary))
        self._move(HaState.RECOVERING, epoch=self.epoch, expected=sorted(expected.values()))
        orphans = primary.orphans.waiting(self.context.clock())
        if orphans:
            self.log_.info("ha_orphan_queues", queues=orphans)
        for old, new, _ in primary.take_transitions():
            if self.state is old:
                self._move(new)
        self._publish_membership()
        return self.state

    def _last_members(self) -> list[dict[str, Any]]:
        if self.link is not None and self.link.replicator.members:
            return list(self.link.replicator.members)
        return self.members

    async def _cluster_beyond_joining(self) -> str | None:
        """The address of a reachable broker beyond joining, or None (a new cluster)."""
        for address in self.addresses:
            if address.port == self._amqp_port() and address.host in (
                self.options.interface,
                "127.0.0.1",
                "localhost",
                self.options.node_name,
            ):
                continue
            status = await check_status(address)
            if status and status not in (HaState.JOINING.value, HaState.STANDALONE.value):
                return f"{address} ({status})"
        return None

    # -- membership --------------------------------------------------------------------
    def membership(self) -> list[dict[str, Any]]:
        members = [{"id": self.broker_id, "url": self.url, "state": self.state.value}]
        if self.primary is not None:
            for backup in self.primary.backups.values():
                if backup.cancelled:
                    continue
                state = HaState.READY if backup.ready and backup.connected else HaState.CATCHUP
                members.append({"id": backup.id, "url": backup.url, "state": state.value})
        return members

    def _membership_changed(self) -> None:
        primary = self.primary
        if primary is not None:
            for old, new, _reason in primary.take_transitions():
                if self.state is old:
                    self._move(new, dropped=list(primary.dropped))
        self._publish_membership()

    def _publish_membership(self) -> None:
        if self.streams is None:
            return
        members = self.membership()
        if members != self.members:
            self.members = members
            self.streams.broadcast({"type": "membership", "members": members})

    def status(self) -> dict[str, Any]:
        """What GET /api/ha shows."""
        queues: list[dict[str, Any]] = []
        if self.link is not None:
            for name, replicator in sorted(self.link.replicator.replicators.items()):
                queues.append(
                    {
                        "name": name,
                        "caught_up": replicator.caught_up,
                        "messages": replicator.queue.message_count,
                        "last_id": replicator.queue.last_position,
                        "enqueued": replicator.enqueued_total,
                        "dequeued": replicator.dequeued_total,
                    }
                )
        return {
            "state": self.state.value,
            "epoch": self.epoch,
            "broker_id": self.broker_id,
            "url": self.url,
            "public_url": self.public_url,
            "primary": self.primary_address if self.primary is None else self.url,
            "members": self.membership() if self.primary is not None else self._last_members(),
            "queues": queues,
            "held_confirms": self.primary.held_confirms() if self.primary else 0,
            "lease_remaining": (
                None
                if self.lease_until is None
                else round(max(0.0, self.lease_until - self.context.clock()), 3)
            ),
            "orphan_queues": (
                self.primary.orphans.waiting(self.context.clock()) if self.primary else {}
            ),
            "backups": self._backups_status(),
        }

    def _backups_status(self) -> list[dict[str, Any]]:
        primary, streams = self.primary, self.streams
        if primary is None or streams is None:
            return []
        return [
            {
                "id": backup.id,
                "url": backup.url,
                "ready": backup.ready and backup.connected,
                "expected": backup.id in primary.expected,
                "held_confirms": backup.held(),
                "queues": streams.positions(backup.id),
            }
            for backup in sorted(primary.backups.values(), key=lambda b: b.url)
        ]


class _PrimaryListener:
    """Tells the primary role about queues created and deleted (guards)."""

    def __init__(self, primary: Primary) -> None:
        self.primary = primary

    def queue_declared(self, queue: Any) -> None:
        self.primary.queue_declared(queue)

    def queue_deleted(self, queue: Any) -> None:
        self.primary.queue_deleted(queue)

    def exchange_declared(self, exchange: Any) -> None:
        pass

    def exchange_deleted(self, exchange: Any) -> None:
        pass

    def bound(self, binding: Any) -> None:
        pass

    def unbound(self, binding: Any) -> None:
        pass
