"""The health check of the local broker, through its management API only.

:Status: Beta

:func:`broker_view` turns the answers of ``GET /api/status`` and ``GET /api/ha`` into a
:class:`~ha_agent.promotion.BrokerView` (pure); :class:`BrokerCheck` makes the calls and
:meth:`BrokerCheck.promote` asks the broker to become primary with an epoch.

The replication position is the sum over replicated queues of the last replication id the
backup holds (``/api/ha`` ``queues[].last_id``): within one epoch, a backup that holds more
of the primary's stream has a larger sum. A primary reports its queues' last ids the same way.

A primary's ``/api/ha`` ``in_sync`` (``wanted``, ``pending_removal``) becomes the view's
:class:`~ha_agent.promotion.BrokerInSync`; :meth:`BrokerCheck.commit_in_sync` tells the
primary which in-sync set ZooKeeper committed (``POST /api/ha/in-sync``), so that it releases
the confirms it holds for the backups removed from it.

The agent's own broker: a check made with ``agent`` (the agent's node name) reads
``/api/ha?manager=1&agent=NODE``, which marks the broker as managed by this agent until it
restarts, and its :meth:`BrokerCheck.promote` carries the mark (``"agent": NODE``): such a
broker refuses a promotion without it (``qpid-ha promote`` by hand,
:mod:`broker.management.promote_guard`). The mark is sent only to a broker whose last
``/api/ha`` answered ``managed_by`` (one that knows the mark: an older broker would refuse
the unknown field). A designated agent's checks of its ``--peer`` brokers send no ``agent``.

Error Handling
==============

:meth:`BrokerCheck.check` never raises for a broker that is down, slow or answering
nonsense: it returns None (the broker does not answer) and keeps the reason in
:attr:`BrokerCheck.last_error`. :meth:`BrokerCheck.promote` raises :class:`PromoteRefused`
with the broker's reason (a 409 from a broker in catch-up, an older epoch ...) or the
:class:`~broker.management.client.ManagementError` of an unreachable broker.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from broker.management.client import ManagementClient, ManagementError
from common.url import parse_url
from ha_agent.cluster_records import PRIMARY_STATES
from ha_agent.loop_liveness import LoopTimes
from ha_agent.promotion import BrokerInSync, BrokerView
from ha_agent.takeover import GrantView

__all__ = [
    "DEFAULT_MGMT_PORT",
    "BrokerCheck",
    "LivenessView",
    "PromoteRefused",
    "broker_view",
    "grant_view",
    "liveness_view",
]

#: The header that carries the lease token (broker.liveness_server).
TOKEN_HEADER = "X-Qpidd-Lease-Token"


@dataclass(frozen=True)
class LivenessView:
    """What the broker's off-loop liveness answer said (``GET /liveness``)."""

    last_progress: float  # seconds since its event loop last made progress
    ha_state: str
    epoch: int = 0
    pid: int | None = None
    broker_id: str = ""
    #: the broker fenced itself: it serves no more and stops (a broker that does not say:
    #: False)
    fenced: bool = False
    #: the loop thread's clocks (None: a broker that does not say; ha_agent.loop_liveness)
    times: LoopTimes | None = None
    #: the loop thread's id (None: a broker that does not say): its agent reads the
    #: thread's clocks from the kernel when the broker cannot answer (ha_agent.loop_witness)
    loop_tid: int | None = None

    @property
    def is_primary(self) -> bool:
        """A primary that may serve: never one that fenced itself (it stops)."""
        return self.ha_state in PRIMARY_STATES and not self.fenced


def liveness_view(answer: Any) -> LivenessView | None:
    """A :class:`LivenessView` from the JSON of ``GET /liveness`` (None: not one)."""
    if not isinstance(answer, dict) or answer.get("alive") is not True:
        return None
    ms = answer.get("last_progress_ms")
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not ms >= 0:
        return None
    pid = answer.get("pid")
    return LivenessView(
        last_progress=float(ms) / 1000.0,
        ha_state=str(answer.get("ha_state", "unknown")),
        epoch=_non_negative(answer.get("epoch")),
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
        broker_id=str(answer.get("broker_id") or ""),
        fenced=answer.get("fenced") is True,
        times=_loop_times(answer),
        loop_tid=_positive_int(answer.get("loop_tid")),
    )


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _loop_times(answer: dict[str, Any]) -> LoopTimes | None:
    """The loop thread's clocks of a liveness answer (None: not all of them, or not
    numbers; the wait may be null: the broker's system does not say)."""
    names = ("loop_clock_ms", "loop_cpu_ms", "loop_cpu_since_progress_ms", "loop_wait_ms")
    clock, cpu, since, wait = (_seconds(answer.get(name)) for name in names)
    if clock is None or cpu is None or since is None:
        return None
    if wait is None and answer.get("loop_wait_ms") is not None:
        return None
    return LoopTimes(clock, cpu, wait, since)


def _seconds(ms: Any) -> float | None:
    """Milliseconds as seconds (None: not a number from 0 to 1e18)."""
    if isinstance(ms, int | float) and not isinstance(ms, bool) and 0 <= ms <= 1e18:
        return float(ms) / 1000.0
    return None


def grant_view(answer: Any) -> GrantView | None:
    """A :class:`GrantView` from the JSON of ``GET /grant`` (None: not one)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("lapsed"), bool):
        return None
    ms = answer.get("remaining_ms")
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not ms >= 0:
        return None
    grants = answer.get("grants")
    needed = frozenset(
        g["epoch"]
        for g in (grants if isinstance(grants, list) else [])
        if isinstance(g, dict) and g.get("needed") is True and _non_negative(g.get("epoch"))
    )
    formats = answer.get("formats")
    linked = answer.get("linked_epoch")
    return GrantView(
        answer["lapsed"],
        float(ms) / 1000.0,
        needed,
        formats if isinstance(formats, str) else "",
        linked if isinstance(linked, int) and not isinstance(linked, bool) else None,
    )


DEFAULT_MGMT_PORT = 8672


class PromoteRefused(Exception):
    """The broker answered the promotion with an error (the message is its reason)."""


def _non_negative(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _ids(value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        return frozenset()
    return frozenset(v for v in value if isinstance(v, str) and v)


def broker_in_sync(ha: dict[str, Any]) -> BrokerInSync | None:
    """The primary's ``in_sync`` from its ``/api/ha`` (None when it reports none)."""
    in_sync = ha.get("in_sync")
    if not isinstance(in_sync, dict):
        return None
    urls = []
    for backup in ha.get("backups") or []:
        if isinstance(backup, dict) and isinstance(backup.get("id"), str):
            urls.append((backup["id"], str(backup.get("url") or "")))
    told = in_sync.get("committed")
    committed = None  # a broker that does not say
    if isinstance(told, dict) and _non_negative(told.get("epoch")):
        committed = (int(told["epoch"]), _ids(told.get("members")))
    elif "committed" in in_sync and told is None:
        committed = (0, frozenset())  # told nothing since its promotion
    return BrokerInSync(
        wanted=_ids(in_sync.get("wanted")),
        pending_removal=_ids(in_sync.get("pending_removal")),
        urls=tuple(sorted(urls)),
        awaited=_ids(in_sync.get("awaited")),
        committed=committed,
    )


def broker_view(status: dict[str, Any], ha: dict[str, Any] | None) -> BrokerView:
    """A :class:`BrokerView` from the JSON of ``/api/status`` and ``/api/ha`` (None if none)."""
    state = str(status.get("ha_state", "unknown"))
    epoch = position = 0
    url = broker_id = store_id = formats = ""
    in_sync = None
    if ha is not None:
        url = str(ha.get("url") or "")
        raw_formats = ha.get("replication_formats")
        formats = raw_formats if isinstance(raw_formats, str) else ""
        raw_id = ha.get("broker_id")
        broker_id = raw_id if isinstance(raw_id, str) else ""
        raw_store = ha.get("store_id")
        store_id = raw_store if isinstance(raw_store, str) else ""
        in_sync = broker_in_sync(ha)
        epoch = _non_negative(ha.get("epoch"))
        if "replication_position" in ha:
            position = _non_negative(ha.get("replication_position"))
        else:  # a broker before replication_position: its rows
            for queue in ha.get("queues") or []:
                if isinstance(queue, dict):
                    position += _non_negative(queue.get("last_id"))
    link_up: bool | None = None
    link_error = ""
    if ha is not None and state in ("ready", "catch-up"):
        # a backup's ``primary`` is the address of its link's primary while the link is up
        link_up = bool(ha.get("primary"))
        error = ha.get("link_error")
        if isinstance(error, dict):
            link_error = str(error.get("reason") or "")
    lease = ha.get("member_lease") if ha is not None else None
    on_grants = (
        isinstance(lease, dict)
        and lease.get("enabled") is True
        and bool(lease.get("members"))
        and lease.get("fenced") is False
    )
    fenced = isinstance(lease, dict) and lease.get("fenced") is True
    pid = status.get("pid")
    # empty, clean or dirty; a broker without a store says none, the member record unknown
    store = str(status.get("store_status", "unknown"))
    return BrokerView(
        ha_state=state,
        epoch=epoch,
        replication_position=position,
        store_status=store if store in ("empty", "clean", "dirty") else "unknown",
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
        url=url,
        broker_id=broker_id,
        store_id=store_id,
        in_sync=in_sync,
        link_up=link_up,
        link_error=link_error,
        replication_formats=formats,
        on_grants=on_grants and state in PRIMARY_STATES,
        fenced=fenced,
    )


def timed_out(exc: BaseException) -> bool:
    """The failure of a call was a time-out (connecting or reading), as opposed to a refused
    connection (nothing listens: the broker is gone) or an error answer."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, TimeoutError):
            return True
        reason = getattr(cause, "reason", None)
        if isinstance(reason, TimeoutError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


class BrokerCheck:
    """Reads the broker at ``address`` (``[user/password@]host[:port]``, the management port)."""

    def __init__(self, address: str, timeout: float = 2.0, agent: str | None = None) -> None:
        url = parse_url(address, default_port=DEFAULT_MGMT_PORT)  # ValueError names it
        if len(url.addresses) != 1:
            raise ValueError(f"expected one broker address, got {address!r}")
        self.client = ManagementClient(url, timeout)
        self.last_error = ""
        #: the last check timed out: the broker may be slow (not refused, not an error)
        self.last_timed_out = False
        #: the shutdown-id of a cluster shutdown the broker announced at the last /api/ha
        #: read (None: none; kept while the broker does not answer)
        self.cluster_shutdown: str | None = None
        #: the node name of the agent whose own broker this is (None: a peer's check)
        self.agent = agent
        #: the broker's last /api/ha answered ``managed_by``: its promotions take the mark
        self.takes_mark = False
        #: its last /api/ha's ``member_lease`` has ``ended``: a promotion may name the
        #: older epochs whose primary's process exited (``ended_epochs``, ha_agent.ended)
        self.takes_ended = False
        #: where the broker answers liveness and leases off its event loop (its last
        #: /api/ha's ``liveness``: None, an older broker or none learnt yet), and the token
        self.liveness_client: ManagementClient | None = None
        self.lease_token: str | None = None
        #: the last liveness probe was refused: nothing listens there (the broker is gone)
        self.liveness_refused = False

    @property
    def address(self) -> str:
        return self.client.address

    def check(self, timeout: float | None = None) -> BrokerView | None:
        """The broker's state now, or None when it does not answer (see :attr:`last_error`);
        ``timeout`` replaces the check timeout for each of its calls (a starved backup)."""
        client = self.client if timeout is None else ManagementClient(self.client.url, timeout)
        try:
            status = client.get("/api/status")
            if not isinstance(status, dict):
                raise ManagementError(f"{self.address}: /api/status is not a JSON object")
            ha = None
            if status.get("ha_state") != "standalone":
                # manager=1: the broker waits for this read before it stops for a cluster
                # shutdown, so the agent learns of it first (broker.management.ha)
                # queues=summary: the position without a row per queue (a broker that
                # does not know it sends the rows, summed below)
                path = "/api/ha?manager=1&queues=summary"
                if self.agent is not None:  # the broker is ours: it refuses hand promotions
                    path += f"&agent={quote(self.agent, safe='')}"
                ha = client.get(path)
                if not isinstance(ha, dict):
                    raise ManagementError(f"{self.address}: /api/ha is not a JSON object")
                self.takes_mark = "managed_by" in ha
                lease = ha.get("member_lease")
                self.takes_ended = isinstance(lease, dict) and "ended" in lease
                self._learn_liveness(ha.get("liveness"))
                shutdown = ha.get("cluster_shutdown")
                self.cluster_shutdown = shutdown if isinstance(shutdown, str) else None
        except ManagementError as exc:
            self.last_error = str(exc)
            self.last_timed_out = timed_out(exc)
            return None
        self.last_error = ""
        self.last_timed_out = False
        return broker_view(status, ha)

    def _learn_liveness(self, liveness: Any) -> None:
        port = liveness.get("port") if isinstance(liveness, dict) else None
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            self.liveness_client, self.lease_token = None, None
            return
        token = liveness.get("token")
        self.lease_token = token if isinstance(token, str) and token else None
        url = self.client.url
        address = replace(url.addresses[0], port=port)
        if self.liveness_client is None or self.liveness_client.url.addresses[0] != address:
            self.liveness_client = ManagementClient(
                replace(url, addresses=(address,)), self.client.timeout
            )

    def liveness(self) -> LivenessView | None:
        """The broker's off-loop liveness answer, or None (none learnt, no answer: then
        :attr:`liveness_refused` says whether nothing listened)."""
        client = self.liveness_client
        self.liveness_refused = False
        if client is None:
            return None
        try:
            return liveness_view(client.get("/liveness"))
        except ManagementError as exc:
            self.liveness_refused = exc.status is None and not timed_out(exc)
            return None

    def serving_on_grants(self) -> bool:
        """Does the broker serve as a primary on its members' grants *now* (a fresh read of
        ``GET /api/ha``: the member lease in force over a non-empty set, not fenced, and
        serving)? False when it does not answer. The session fence asks it: the loop's
        last view may be seconds old while ZooKeeper is gone (its reads block). Asked off
        the broker's event loop (``GET /liveness``'s ``serving_on_grants``: a primary
        busy over 10,000 queues at load 45 did not answer ``GET /api/ha`` in time and was
        killed, issue 25); ``GET /api/ha`` only of a broker whose liveness answer lacks it."""
        client = self.liveness_client
        if client is not None:
            try:
                answer = client.get("/liveness")
            except ManagementError:
                return False
            if isinstance(answer, dict) and "serving_on_grants" in answer:
                return answer["serving_on_grants"] is True
        try:
            ha = self.client.get("/api/ha?queues=summary")
        except ManagementError:
            return False
        lease = ha.get("member_lease") if isinstance(ha, dict) else None
        return (
            isinstance(ha, dict)
            and ha.get("state") in PRIMARY_STATES
            and isinstance(lease, dict)
            and lease.get("enabled") is True
            and bool(lease.get("members"))
            and lease.get("fenced") is False
            and lease.get("serving") is True
        )

    def grant(self, epoch: int) -> GrantView | None:
        """The broker's member-lease grants to epochs older than ``epoch``, answered off its
        event loop (``GET /grant?epoch=N``); None: no liveness port learnt, no answer, or
        an older broker without it (then nothing is known: a takeover waits)."""
        client = self.liveness_client
        if client is None:
            return None
        try:
            return grant_view(client.get(f"/grant?epoch={int(epoch)}"))
        except ManagementError:
            return None

    def promote(
        self,
        epoch: int,
        lease: float | None = None,
        timeout: float | None = None,
        in_sync: list[str] | None = None,
        committed_store: str | None = None,
        ended_epochs: list[int] | None = None,
    ) -> dict[str, Any]:
        """``POST /api/ha/promote`` as the cluster manager, with the primary's first lease
        (seconds) and the backups it must expect (``in_sync``, broker ids) when given; the
        broker's answer. ``timeout`` replaces the check timeout for this call (a promotion
        does more than answer a status). ``committed_store``: the committed in-sync record
        names the broker's store, this one (a joining broker beside backups: issue 25).
        ``ended_epochs``: older epochs whose primary's process exited (ha_agent.ended), sent
        only to a broker that said it takes them."""
        body: dict[str, Any] = {"cluster_manager": True, "epoch": epoch}
        if self.agent is not None and self.takes_mark:
            body["agent"] = self.agent  # the agent's own promotion (not one by hand)
        if lease is not None:
            body["lease"] = lease
        if in_sync is not None:
            body["in_sync"] = in_sync
        if committed_store is not None:
            body["committed_store"] = committed_store
        if ended_epochs and self.takes_ended:
            body["ended_epochs"] = sorted(ended_epochs)
        return self._post("/api/ha/promote", body, timeout)

    def commit_in_sync(self, epoch: int, members: list[str]) -> dict[str, Any]:
        """``POST /api/ha/in-sync``: ZooKeeper committed ``members`` (broker ids) as the
        in-sync set at ``epoch``; the primary releases the confirms it holds for the
        pending-removal backups not among them. Answers ``released`` and
        ``pending_removal``; PromoteRefused (409) when ``epoch`` is not the broker's."""
        body: dict[str, Any] = {"cluster_manager": True, "epoch": epoch, "members": members}
        if self.agent is not None and self.takes_mark:
            body["agent"] = self.agent  # the agent's own commit (not one by hand)
        return self._post("/api/ha/in-sync", body)

    def tell_member_formats(self, formats: dict[str, str]) -> dict[str, Any]:
        """``POST /api/ha/members``: the replication formats of every member ZooKeeper lists
        (node -> "LOW-HIGH"); the broker holds declares to the lowest a link would use
        (:mod:`ha_agent.member_formats`). Answers that ``format`` and ``why``."""
        body = {"cluster_manager": True, "replication_formats": formats}
        return self._post("/api/ha/members", body)

    def renew_lease(self, lease: float) -> dict[str, Any]:
        """The primary may serve ``lease`` seconds more: off the broker's event loop when it
        named where (``POST /lease`` with the token), else ``POST /api/ha/lease``."""
        client, token = self.liveness_client, self.lease_token
        if client is None or token is None:
            return self._post("/api/ha/lease", {"cluster_manager": True, "lease": lease})
        try:
            answer = client.call("/lease", {"lease": lease}, headers={TOKEN_HEADER: token})
        except ManagementError as exc:
            if exc.status is not None:
                raise PromoteRefused(str(exc)) from exc
            raise
        return answer if isinstance(answer, dict) else {}

    def _post(
        self, path: str, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        client = self.client if timeout is None else ManagementClient(self.client.url, timeout)
        try:
            answer = client.post(path, body)
        except ManagementError as exc:
            if exc.status is not None:
                raise PromoteRefused(str(exc)) from exc
            raise
        return answer if isinstance(answer, dict) else {}
