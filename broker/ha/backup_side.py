"""BackupSide: an HA broker's side as a backup, the owner of its link to the primary.

The :class:`~broker.ha.ha_broker.HaBroker` carries out the role's ``Dial`` here
(:meth:`BackupSide.dial`) and, at a promotion, its ``DropLink`` (:meth:`BackupSide.drop`).
In between this object is the :class:`~broker.ha.backup.BackupLink`'s
:class:`~broker.ha.backup.LinkOwner`: it turns what the link reports into the role's events
(``LinkUp``, ``CaughtUp``, ``LinkDown``) through its host, checks the primary's cluster and
store history before anything is replicated (a store of another cluster, or one that
diverged, stops the broker: ``on_refused``), stops the broker when the store fails to write
what it acknowledges (``on_fenced``), hands the primary's member-lease requests to the
member lease, and keeps the membership last heard from a primary.

Call direction: the host calls this object and the link calls it back; it reaches the host
only through :class:`BackupHost` (the role's state and epoch, and ``handle``).

THREAD UNSAFE: the broker's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts
from broker.ha.backup import BackupLink, DiskSync
from broker.ha.cluster_identity import ClusterIdentity
from broker.ha.epoch import EpochError
from broker.ha.lease_keeper import LeaseKeeper
from broker.ha.role_events import CaughtUp, Event, LinkDown, LinkUp
from broker.ha.state import HaState
from broker.ha.store_lineage import StoreLineage
from broker.options import BrokerOptions
from broker.security.cluster_users import ClusterUsers
from broker.security.tls import link_context
from common.formats import FormatRange
from common.url import Address


class BackupHost(Protocol):
    """What the backup side needs of the HA broker that owns it."""

    @property
    def broker_id(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def state(self) -> HaState: ...

    def handle(self, event: Event) -> None:
        """Feed the role one event and carry out its actions."""
        ...


class BackupSide:
    """See the module docstring."""

    def __init__(
        self,
        host: BackupHost,
        vhost: VirtualHost | VirtualHosts,
        options: BrokerOptions,
        log: Any,
        *,
        addresses: list[Address],
        identity: ClusterIdentity,
        lineage: StoreLineage,
        lease: LeaseKeeper,
        formats: FormatRange,
        disk: DiskSync | None,
        on_fenced: Callable[[str], None],
        on_refused: Callable[[str], None] | None,
        cluster_users: ClusterUsers | None = None,
    ) -> None:
        self._host = host
        #: What a format-4 link's ``users`` events replace (the authenticator's).
        self._cluster_users = cluster_users
        self._vhost = vhost
        self._options = options
        self._log = log
        self._addresses = addresses
        self._identity = identity
        self._lineage = lineage
        self._lease = lease
        self._formats = formats
        self._disk = disk
        self._on_fenced = on_fenced
        self._on_refused = on_refused
        #: The link to the primary, while a backup.
        self.link: BackupLink | None = None
        #: The membership last heard from a primary (kept when the link goes down).
        self.members: list[dict[str, Any]] = []

    # -- the role's actions ----------------------------------------------------------------
    def dial(self) -> None:
        """Start the link: dial the addresses of ha-brokers-url (the role's ``Dial``)."""
        options = self._options
        self.link = BackupLink(
            self,
            self._vhost,
            self._addresses,
            user=options.ha_username,
            password=options.ha_password,
            mechanism=options.ha_mechanism,
            maintenance_interval=options.link_maintenance_interval,
            heartbeat=options.link_heartbeat_interval,
            flow_messages=options.ha_flow_messages,
            auth_here=options.auth,
            tls=link_context(options),  # for ssl: addresses of ha-brokers-url
            check_cluster=self.check_cluster,
            disk=self._disk,
            formats=self._formats,
        )
        self.link.replicator.cluster_users = self._cluster_users
        self.link.start()

    async def drop(self) -> None:
        """Drop the link at once, without the close handshake (the role's ``DropLink``)."""
        if self.link is None:
            return
        await self.link.stop(abort=True)
        # A transaction staged in part is dropped: the new primary holds all of a
        # transaction or none of it (stop already did so if the link was up).
        self.link.abandon_transactions("promoted")
        # Exclusive queues belonged to client connections of the old primary, which
        # died with it: delete them as their connections' close would have.
        for name in sorted(self.link.replicator.exclusive):
            self._vhost.delete_queue(name)
        self.link = None

    async def settled(self) -> None:
        """Return once no link's end is under way (:meth:`BackupLink.settled`): a
        promotion first waits for the rest of a snapshot the link left half applied."""
        if self.link is not None:
            await self.link.settled()

    async def stop(self) -> None:
        if self.link is not None:
            await self.link.stop()
            self.link = None

    def last_members(self) -> list[dict[str, Any]]:
        """The membership last heard from a primary."""
        if self.link is not None and self.link.replicator.members:
            return list(self.link.replicator.members)
        return self.members

    # -- the link's callbacks (LinkOwner) ---------------------------------------------------
    @property
    def broker_id(self) -> str:
        return self._host.broker_id

    @property
    def url(self) -> str:
        return self._host.url

    @property
    def epoch(self) -> int:
        return self._host.epoch

    def log(self, event: str, **fields: Any) -> None:
        self._log.info(event, **fields)

    def link_up(self, address: Address, primary_epoch: int) -> None:
        try:  # before anything of that era is applied to the store
            self._lineage.replicating(primary_epoch)
        except EpochError as exc:
            self.store_failed(str(exc))
            return
        self._lease.grants.linked = primary_epoch
        self._host.handle(LinkUp(str(address), primary_epoch))

    def check_history(self, primary_epoch: int, base_epoch: int | None, address: str) -> str | None:
        """Before replicating from the primary at ``address``: None to go on, else why not.
        A store that diverged (it holds an era the primary's store never saw) is moved
        aside at the next start: the broker stops now (``on_refused``: exit 1)."""
        reason = self._lineage.check(primary_epoch, base_epoch, address)
        if reason is not None and self._on_refused is not None:
            self._on_refused(reason)
        return reason

    def check_cluster(self, primary_cluster_id: str | None, address: str) -> str | None:
        """Before replicating from the primary at ``address``: None to go on (its cluster
        id recorded in this store), else why not; a store of another cluster stops the
        broker (``on_refused``)."""
        refusal = self._identity.check_primary(primary_cluster_id, address)
        if refusal is not None and self._on_refused is not None:
            self._on_refused(refusal)
        return refusal

    def caught_up(self) -> None:
        self._host.handle(CaughtUp())

    def store_failed(self, reason: str) -> None:
        """A backup's store failed to write what it acknowledges: stop the broker."""
        self._log.error("ha_store_failed", reason=reason)
        self._on_fenced(reason)

    def store_write_failed(self, error: str) -> None:
        """A store write failed: a backup stops (a later acknowledgement, e.g. of a batch
        held behind a staged transaction, may cover what it lost); a primary nacked."""
        if self._host.state.is_backup:
            self.store_failed(f"the store cannot write: {error}")

    def link_down(self, reason: str) -> None:
        self._lease.grants.linked = None
        self._host.handle(LinkDown(reason))
        if self.link is not None:
            self.members = list(self.link.replicator.members)

    def member_grant(self, epoch: int, duration: float) -> None:
        """Grant the primary of ``epoch`` a member lease (received now)."""
        self._lease.member_grant(epoch, duration)

    def member_asked(self, epoch: int) -> None:
        """The primary of ``epoch`` asked for no promise."""
        self._lease.grants.asked(epoch)
