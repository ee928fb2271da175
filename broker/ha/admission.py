"""Whom an HA broker serves: the refusals of its connection admission (sans-I/O), and
:class:`HaAdmission`, the admission policy an HA broker hands its connections.

:meth:`HaAdmission.admit` asks these at connection.open for every
connection but HA admin ones (``qpid.ha-admin``): a backup, or a primary that is fenced
or may not confirm, refuses clients with 530 NOT_ALLOWED and words that send them on to the
next address of their URL list; a replication link (``qpid.ha-backup``) is served only to
``ha-username`` (issue 13), only if it speaks a replication format this broker speaks
(:func:`link_format_refusal`), and only if that format carries every replicated object this
broker holds (:func:`link_carry_refusal`: a backup of an older release joining a cluster
whose primary accepted what only a newer format carries).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from broker.core.errors import AmqpError, ReplyCode, RoutineRefusal
from broker.core.vhost import VirtualHost
from broker.ha.lease_keeper import LeaseKeeper
from broker.ha.link_format import NoCommonFormat, link_format
from broker.ha.manager_lease import ManagerLease
from broker.ha.names import ADMIN_PROPERTY, BACKUP_PROPERTY, EPOCH_PROPERTY, URL_PROPERTY
from broker.ha.redial import DialFailures
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.replication_contract import ContractFloor, Uncarried
from broker.ha.role_events import EpochSeen, Event
from broker.ha.state import HaState
from common.formats import FormatRange
from common.url import Address, parse_url

if TYPE_CHECKING:
    from broker.amqp.context import AdmittedConnection


def client_refusal(
    state: HaState, not_serving: bool, public_url: str, redirect: Address | None = None
) -> AmqpError | None:
    """None when a client (or a backup's link) may connect: a primary that serves. A
    refusal is routine (:class:`RoutineRefusal`, logged at info): clients with a URL list
    meet it whenever they try a backup first. A backup's refusal names ``redirect`` (see
    :func:`redirect_address`) for the clients that can be told where to go (AMQP 1.0's
    ``amqp:connection:redirect``)."""
    if not_serving:
        return RoutineRefusal(ReplyCode.NOT_ALLOWED, "HA broker fenced: not serving")
    if state.is_primary:
        return None
    return RoutineRefusal(
        ReplyCode.NOT_ALLOWED,
        f"HA backup: not the primary (state {state.value}); clients connect to {public_url}",
        redirect=None if redirect is None else (redirect.host, redirect.port),
    )


def redirect_address(explicit_public_url: str | None, primary: str | None) -> Address | None:
    """Where a backup sends a client that can be redirected: the first address of
    ``ha-public-url`` when it is set (``explicit_public_url``: a virtual IP or a name that
    follows the primary), else the primary this backup replicates from (``primary``, its
    link's ``host:port``), else None (no link: the client tries its next address)."""
    for text in (explicit_public_url, primary):
        if text:
            try:
                return parse_url(text).addresses[0]
            except ValueError:
                continue
    return None


def link_user_refusal(link_user: str | None, user: str | None) -> AmqpError | None:
    """Replication links only from ``ha-username``: another user is refused at
    connection.open, so the backup's dial fails, says why and stays joining."""
    if link_user is None or user is None or user == link_user:
        return None
    return AmqpError(
        ReplyCode.ACCESS_REFUSED,
        f"replication links are served to user '{link_user}' only (ha-username), not '{user}'",
    )


def link_format_refusal(
    ours: FormatRange, properties: Mapping[str, Any], peer: str
) -> AmqpError | None:
    """None when a backup's link speaks a replication format this broker speaks, else the
    refusal at connection.open: 540 NOT_IMPLEMENTED, its text the one line both sides log
    (:func:`broker.ha.link_format.link_format`)."""
    try:
        link_format(ours, properties, f"backup {properties.get(URL_PROPERTY) or peer}")
    except NoCommonFormat as exc:
        return AmqpError(ReplyCode.NOT_IMPLEMENTED, str(exc))
    return None


def link_carry_refusal(
    vhosts: Iterable[VirtualHost],
    default: ReplicateLevel,
    format_: int,
    backup: str,
    uncarried: Uncarried | None = None,
) -> AmqpError | None:
    """None when replication format ``format_`` (a backup's link) carries every replicated
    object in ``vhosts``, else the refusal at connection.open: 540 NOT_IMPLEMENTED naming
    the backup, its format and the first object it could not apply (never a link that
    stalls on it: a declare-ok or confirm held, a stream that cannot be named).
    ``uncarried``: the broker's memory of earlier scans (each dial of a refused backup
    scans again)."""
    found = (uncarried or Uncarried()).first(vhosts, default, format_)
    if found is None:
        return None
    return AmqpError(
        ReplyCode.NOT_IMPLEMENTED,
        f"no common replication format carries this primary's configuration: backup {backup}"
        f" speaks replication format {format_} at most: upgrade it; {found}",
    )


#: A refused backup that dialled no more for this long (s) is forgotten (stopped, or gone).
REFUSED_FOR = 30.0


class RefusedLinks:
    """The backups whose links a primary refuses (no common replication format, or one that
    cannot carry what it holds), by the address each announced; a link admitted, or no
    dial for :data:`REFUSED_FOR` s, forgets one. Sans I/O: the caller gives the clock."""

    def __init__(self) -> None:
        #: address -> [reason, since, count, last dial] (the caller's clock)
        self._records: dict[str, list[Any]] = {}

    def dialled(self, address: str, refusal: str | None, now: float) -> None:
        """A backup at ``address`` dialled: refused for ``refusal``, or admitted (None)."""
        if refusal is None:
            self._records.pop(address, None)
            return
        record = self._records.get(address)
        if record is None or record[0] != refusal:
            self._records[address] = [refusal, now, 1, now]
        else:
            record[2] += 1
            record[3] = now

    def views(self, now: float, wall: float) -> list[dict[str, Any]]:
        """What is refused at ``now`` (the caller's clock; ``wall``: the same instant in
        seconds since 1970, for ``since``)."""
        for address in [a for a, r in self._records.items() if now - r[3] > REFUSED_FOR]:
            del self._records[address]
        return [
            {"url": address, "reason": r[0], "since": _iso(wall - (now - r[1])), "count": r[2]}
            for address, r in sorted(self._records.items())
        ]


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class AdmissionHost(Protocol):
    """What :class:`HaAdmission` needs of the HA broker that owns it."""

    @property
    def state(self) -> HaState: ...

    @property
    def fenced(self) -> bool: ...

    def handle(self, event: Event) -> None:
        """Feed the role one event and carry out its actions."""
        ...

    @property
    def primary_address(self) -> str | None:
        """On a backup: the primary its link replicates from (``host:port``), if linked."""
        ...

    def now(self) -> float: ...

    def tell(self, event: str, fields: dict[str, Any]) -> None:
        """Hand an HA event just logged to the broker's listeners."""
        ...


class HaAdmission:
    """The connection admission policy of an HA broker (``BrokerContext.admission``): a
    backup refuses every connection except HA admin ones with 530 NOT_ALLOWED ("HA backup:
    not the primary ..."), so clients move on to the next address of their URL list; the
    primary accepts clients and backup links of ``ha-username`` whose format carries what
    it holds (counted in the contract's floor while open). It logs a new primary's first
    client connection and first publisher confirm (the console's client outage).

    THREAD UNSAFE: the broker's event loop owns it."""

    def __init__(
        self,
        host: AdmissionHost,
        log: Any,
        *,
        public_url: str,
        explicit_public_url: str | None = None,
        link_user: str | None,
        formats: FormatRange,
        vhosts: Iterable[VirtualHost],
        replicate_default: ReplicateLevel,
        contract_floor: ContractFloor,
        lease: LeaseKeeper,
        manager_lease: ManagerLease,
    ) -> None:
        self._host = host
        #: The member lease (may the primary serve?) and the cluster manager's (does it
        #: vouch for this primary?), both asked as queries.
        self._lease = lease
        self._manager_lease = manager_lease
        self._log = log
        self._public_url = public_url
        self._explicit_public_url = explicit_public_url
        self._link_user = link_user
        self._formats = formats
        self._vhosts = vhosts
        self._default = replicate_default
        self._floor = contract_floor
        #: What a backup of a lower format could not apply, remembered per object.
        self._uncarried = Uncarried()
        #: Format refusals logged: the same one (backup and ranges) once a minute at most.
        self._refusals = DialFailures(60.0)
        #: Backups whose links are refused now, by address (``GET /api/ha``).
        self._refused = RefusedLinks()
        #: Still to log since this broker's promotion: its first client connection and
        #: first publisher confirm (the console's client outage, docs/log-schema.md).
        self._clients_back: set[str] = set()
        #: Clients closed because the primary does not serve: their connection.close goes
        #: out (what was held was dropped first: :meth:`let_close`).
        self._closing: weakref.WeakSet[AdmittedConnection] = weakref.WeakSet()

    def recovering(self) -> None:
        """The broker was just promoted: log its first client connection and confirm."""
        self._clients_back = {"ha_first_client_connection", "ha_first_client_confirm"}

    def known_hosts(self) -> str:
        """connection.open-ok's known-hosts for an admitted client: the public URL."""
        return self._public_url

    def admit(self, connection: AdmittedConnection) -> AmqpError | None:
        host = self._host
        props = connection.client_properties
        if props.get(ADMIN_PROPERTY):
            return None
        link = bool(props.get(BACKUP_PROPERTY))
        state = host.state
        redirect = None
        if not state.is_primary:
            redirect = redirect_address(self._explicit_public_url, host.primary_address)
        refusal = client_refusal(
            state, host.fenced or not self._manager_lease.holds(), self._public_url, redirect
        )
        if refusal is None and not link and not self._lease.may_serve():
            # The member lease lapsed (or a promotion waits for its own): clients go on to
            # the next address; backup links are admitted (their grants restore it).
            refusal = RoutineRefusal(ReplyCode.NOT_ALLOWED, self._lease.not_serving_reason())
        if refusal is None and link:
            refusal = link_user_refusal(self._link_user, connection.user)
            if refusal is None:
                host.handle(EpochSeen(int(props.get(EPOCH_PROPERTY) or 0)))
                if host.fenced:
                    return AmqpError(ReplyCode.NOT_ALLOWED, "HA broker fenced: newer epoch")
                refusal = link_format_refusal(self._formats, props, connection.peer)
                if refusal is None:
                    refusal = self._link_carry(connection)
                now, text = host.now(), refusal and refusal.reply_text
                if text and self._refusals.failed(text, text, now):
                    self._log.warning("ha_link_format_refused", peer=connection.peer, reason=text)
                refused = refusal.reply_text if refusal is not None else None
                self._refused.dialled(str(props.get(URL_PROPERTY) or connection.peer), refused, now)
        elif refusal is None:
            self._client_back("ha_first_client_connection", connection)
        return refusal

    def refusal_before_login(self, client_properties: Mapping[str, Any]) -> AmqpError | None:
        """The refusal :meth:`admit` would give a client, decided before its login from
        what connection.start already told it (a backup's state and the public URL are
        its server properties ``qpid.ha-status`` and ``qpid.ha-public-url``), so a backup
        spends no password hash on the clients a fail-over sends it; None: go on with the
        login. A backup's refusal is word for word the one after a login, with the same
        redirect (an AMQP 1.0 client's ``amqp:connection:redirect``: ``ha-public-url``,
        else the primary, which an unauthenticated client can find anyway by dialling the
        public URL's addresses and reading their state); a primary
        waiting out a promotion or whose member lease lapsed refuses without naming the
        members. Never for an HA admin or a backup's link (their login decides), nor for
        a fenced primary (the login goes on and :meth:`admit` says so to the
        authenticated only)."""
        if client_properties.get(ADMIN_PROPERTY) or client_properties.get(BACKUP_PROPERTY):
            return None
        host = self._host
        state = host.state
        if not state.is_primary:
            redirect = redirect_address(self._explicit_public_url, host.primary_address)
            return client_refusal(state, False, self._public_url, redirect)
        if host.fenced or not self._manager_lease.holds() or self._lease.may_serve():
            return None
        return RoutineRefusal(ReplyCode.NOT_ALLOWED, self._lease.not_serving_reason(named=False))

    def _link_carry(self, connection: AdmittedConnection) -> AmqpError | None:
        """Admit a backup's link of a format that carries what this broker holds (and
        count it in the contract's floor from now on), else refuse it (540)."""
        props = connection.client_properties
        backup = str(props.get(URL_PROPERTY) or connection.peer)
        format_ = link_format(self._formats, props, f"backup {backup}")
        refusal = link_carry_refusal(self._vhosts, self._default, format_, backup, self._uncarried)
        if refusal is None:
            self._floor.link_admitted(connection, format_, backup)
        return refusal

    def refused_links(self) -> list[dict[str, Any]]:
        """The backups whose last dial this primary refused for their replication format,
        within :data:`REFUSED_FOR` seconds: ``url``, ``reason``, ``since``, ``count``."""
        return self._refused.views(self._host.now(), time.time())

    def released(self, connection: AdmittedConnection) -> None:
        self._floor.link_released(connection)

    def may_confirm(self) -> bool:
        """Publisher confirms go out only while both leases hold (a query)."""
        return self._manager_lease.holds() and self._lease.may_serve()

    def holds_output(self, connection: AdmittedConnection) -> bool:
        """Whether a client's output waits (deliveries, get-oks, confirms: everything it
        would be sent) because the member lease lapsed; never a backup link's or an HA
        admin's (the link carries the grants that restore it)."""
        if self._lease.may_serve() or connection in self._closing:
            return False
        props = connection.client_properties
        return not (props.get(BACKUP_PROPERTY) or props.get(ADMIN_PROPERTY))

    def let_close(self, connection: AdmittedConnection) -> None:
        """``connection`` (a client whose output is held) is being closed while the primary
        does not serve: its output is no longer held, so its connection.close goes out (the
        broker drops what was held first: nothing else is left to write)."""
        self._closing.add(connection)

    def confirms_sent(self, connection: AdmittedConnection) -> None:
        if self._clients_back and not connection.client_properties.get(BACKUP_PROPERTY):
            self._client_back("ha_first_client_confirm", connection)

    def _client_back(self, event: str, connection: AdmittedConnection) -> None:
        """Log (and tell the listeners) a client's first ``event`` since the promotion."""
        if event in self._clients_back:
            self._clients_back.discard(event)
            self._log.info(event, connection=connection.name, user=connection.user)
            self._host.tell(event, {"connection": connection.name})
