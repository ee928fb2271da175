"""The HA endpoints: ``GET /api/ha``, ``POST /api/ha/promote``, ``POST /api/ha/lease``,
``POST /api/ha/in-sync``, ``POST /api/ha/members``, ``POST /api/ha/shutdown``,
``GET /api/ha/replications`` and ``POST /api/ha/replicate``.

Handlers only translate HTTP into calls on the broker's HA role (``broker.ha``, a
:class:`broker.ha.ha_broker.HaBroker`) and back; the role decides. A broker that is not an
HA cluster member answers 404. ``promote``, ``lease`` and ``in-sync`` are cluster-manager
commands (``members`` too: the replication formats of the members ZooKeeper lists, which
the replication contract's limits follow, :class:`broker.ha.replication_contract.ContractFloor`):
the body must say ``"cluster_manager": true`` (else 403), as qpid-ha reserves ``promote`` for
the cluster manager; a promotion or lease the role refuses (``PromoteError``) is a 409.
A granted promotion is logged (``ha_promote_requested``) with the user and the new epoch.
Leases are seconds, more than 0 and at most :data:`MAX_LEASE`.

A broker a qpid-ha-agent manages (started with ``ha-agent=NODE``, or its health check read
``GET /api/ha?manager=1&agent=NODE`` since it started; ``managed_by`` in the answer)
refuses, 409, a promotion without the agent's mark (``"agent": NODE``) or ``"force":
true``: the rule and why are :mod:`broker.management.promote_guard`. A refusal is logged
``ha_promote_refused``, a forced promotion ``ha_promote_forced`` (both warning).

A clean all-stop and the cluster manager (issue 12): once ``POST /api/ha/shutdown`` asked
for one, ``GET /api/ha`` and every lease answer carry ``cluster_shutdown`` (the
shutdown-id). A broker with an agent answers a shutdown step (the primary's quiesce, each
stop) only once its agent was told: by a lease answer (a leased primary) or by the agent's
health check, ``GET /api/ha?manager=1`` (a broker whose agent read it in the last 2 s); at
most 5 s. So every agent knows before any broker stops: the primary's commits no backup's
removal from the in-sync set (every clean store stays a candidate for the restart), and
none contends, fences the stopping broker (a SIGKILL would leave its store dirty) or
restarts it (``ha_agent.agent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.management.admin import stop_this_process
from broker.management.auth import current_user
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker
from broker.management.promote_guard import PromoteGuard, check_agent_name
from broker.management.request_input import Body, check_name, read_json_object
from broker.management.responses import json_response, json_response_sliced, run_sliced
from broker.security.roles import allows, required_permission
from broker.store.identity import parse_id
from common.formats import parse_range

#: The longest lease a cluster manager may grant at once (seconds).
MAX_LEASE = 3600.0

#: How long a leased primary's cluster shutdown waits for a lease answer to tell its cluster
#: manager (seconds).
MAX_TELL_WAIT = 5.0

#: A broker whose agent read /api/ha this recently (seconds) has a cluster manager to tell.
MANAGER_SEEN_WITHIN = 2.0

#: The largest fencing epoch accepted (a signed 64-bit integer, as ZooKeeper keeps it).
MAX_EPOCH = 2**63 - 1

#: The most ``ended_epochs`` a promotion may name (the agents' record keeps 8).
MAX_ENDED = 16


async def _manager_command(request: web.Request, fields: set[str], refusal: str) -> dict[str, Any]:
    """The JSON body of a cluster manager's command (promote, lease, in-sync, members,
    shutdown): 400 for a field outside ``fields``, then 403 with ``refusal`` unless it says
    ``cluster_manager: true``."""
    data = await read_json_object(request)
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"unknown field(s): {', '.join(unknown)}")
    if data.get("cluster_manager") is not True:
        raise ApiError(HTTPStatus.FORBIDDEN, refusal)
    return data


def _lease_seconds(data: dict[str, Any]) -> float | None:
    lease = data.get("lease")
    if lease is None:
        return None
    if (
        isinstance(lease, bool)
        or not isinstance(lease, int | float)
        or not 0 < lease <= MAX_LEASE  # before isfinite: a 400-digit int overflows a float
        or not math.isfinite(lease)
    ):
        raise ApiError(
            HTTPStatus.BAD_REQUEST,
            f"lease must be seconds, more than 0 and at most {MAX_LEASE:g}: {lease!r}",
        )
    return float(lease)


def _ended_epochs(data: dict[str, Any]) -> frozenset[int]:
    """``ended_epochs``: older epochs whose primary's broker process exited, as the
    cluster manager saw it reaped (absent: none); 400 for anything but a list of epochs."""
    ended = data.get("ended_epochs", [])
    if not isinstance(ended, list) or len(ended) > MAX_ENDED or not all(map(_is_epoch, ended)):
        raise ApiError(
            HTTPStatus.BAD_REQUEST,
            f"ended_epochs must be a list of at most {MAX_ENDED} epochs 0..{MAX_EPOCH}: {ended!r}",
        )
    return frozenset(ended)


def _is_epoch(epoch: Any) -> bool:
    return not isinstance(epoch, bool) and isinstance(epoch, int) and 0 <= epoch <= MAX_EPOCH


def _agent(value: Any, where: str) -> str:
    name = check_agent_name(value)
    if name is None:
        raise ApiError(
            HTTPStatus.BAD_REQUEST,
            f"{where} must be the agent's node name (1 to 255 printable characters, no white"
            f" space): {value!r}",
        )
    return name


def _broker_ids(data: dict[str, Any], name: str) -> list[str]:
    value = data.get(name)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name} must be a list of broker ids: {value!r}")
    return sorted(set(value))


class HaEndpoints:
    """The HA handlers, bound to one broker."""

    def __init__(
        self,
        broker: ManagedBroker,
        log: FilteringBoundLogger,
        stop: Callable[[], None] = stop_this_process,
    ) -> None:
        self.broker = broker
        self.log = log
        self._stop = stop
        #: the shutdown-id of a clean all-stop asked for (None: none)
        self.cluster_shutdown: str | None = None
        #: set once a lease answer or the agent's health check (``GET /api/ha?manager=1``)
        #: told the cluster manager of ``cluster_shutdown``
        self._manager_told = asyncio.Event()
        #: when the agent's health check last read /api/ha (the event loop's clock)
        self._manager_read_at: float | None = None
        #: the agent that manages this broker, sticky until it restarts; who may promote it
        self.promote_guard = PromoteGuard(managed_by=broker.options.ha_agent)

    def _ha(self) -> Any:
        ha = getattr(self.broker, "ha", None)
        if ha is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "this broker is not an HA cluster member")
        return ha

    async def get_ha(self, request: web.Request) -> web.Response:
        """GET /api/ha[?queues=summary]: ``summary`` leaves out the per-queue rows (the
        broker's and each backup's ``queues``), ``replication_position`` says their sum."""
        shown = request.query.get("queues", "rows")
        if shown not in ("rows", "summary"):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"queues must be rows or summary: {shown!r}")
        # a slice of rows a turn of the loop: 10,000 queues at once held it 0.5-0.8 s
        status = await run_sliced(self._ha().status_steps(rows=shown == "rows"))
        status["store_id"] = self.broker.store_id  # the data directory's, not the role's
        status["cluster_shutdown"] = self.cluster_shutdown
        if request.query.get("manager") == "1":  # the agent's health check
            if "agent" in request.query:  # this broker's own agent: it manages the broker
                self.promote_guard.agent_seen(_agent(request.query["agent"], "agent"))
            self._manager_read_at = asyncio.get_running_loop().time()
            if self.cluster_shutdown is not None:
                self._manager_told.set()
        status["managed_by"] = self.promote_guard.managed_by
        status["liveness"] = self._liveness()
        return await json_response_sliced(status)

    def _liveness(self) -> dict[str, Any] | None:
        """Where liveness and lease renewals are answered off the event loop: the port,
        and the lease token for a user who may renew the lease (None: not served)."""
        liveness = getattr(self.broker, "liveness", None)
        if liveness is None or liveness.port is None:
            return None
        user = current_user.get()
        may_renew = user is None or allows(
            self.broker.context.authenticator.roles(user),
            required_permission("POST", "/api/ha/lease"),
        )
        return {"port": liveness.port, "token": liveness.token if may_renew else None}

    async def promote(self, request: web.Request) -> web.Response:
        """POST /api/ha/promote {"cluster_manager": true, "epoch": N}: cluster managers only;
        on a broker an agent manages, only with the agent's mark (``"agent": NODE``) or
        ``"force": true``. ``"committed_store": ID``: the agent's committed in-sync record
        names this broker's store (refused, 409, when this broker's store is another): a
        joining broker is then refused only beside a serving primary (issue 25, item 3).
        ``"ended_epochs": [N, ...]``: older epochs whose primary's broker process its agent
        saw reaped (ha_agent.ended): this broker's grants to them are not waited out before
        it serves (issue 26). The answer names the instance promoted (``pid``,
        ``broker_id``)."""
        began = time.monotonic()
        ha = self._ha()
        data = await _manager_command(
            request,
            {
                "cluster_manager",
                "epoch",
                "lease",
                "in_sync",
                "agent",
                "force",
                "committed_store",
                "ended_epochs",
            },
            "promote is a cluster-manager command: only the cluster manager may promote"
            " (send cluster_manager: true)",
        )
        epoch = data.get("epoch")
        if epoch is not None and not _is_epoch(epoch):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"epoch must be 0..{MAX_EPOCH}: {epoch!r}")
        lease = _lease_seconds(data)
        in_sync = _broker_ids(data, "in_sync") if "in_sync" in data else None
        agent = _agent(data["agent"], "agent") if "agent" in data else None
        force = data.get("force", False)
        if not isinstance(force, bool):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"force must be true or false: {force!r}")
        named = data.get("committed_store")
        if named is not None and not isinstance(named, str):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"committed_store must be a string: {named!r}")
        if named is not None and named != self.broker.store_id:
            raise ApiError(
                HTTPStatus.CONFLICT,
                f"the committed in-sync record names store {named!r}; this broker's store is"
                f" {self.broker.store_id!r}",
            )
        ended = _ended_epochs(data)
        managed_by = self.promote_guard.managed_by
        refusal = self.promote_guard.refusal(agent, force)
        user = current_user.get()
        if refusal is not None:
            self.log.warning("ha_promote_refused", user=user, managed_by=managed_by)
            raise ApiError(HTTPStatus.CONFLICT, refusal)
        if force and agent is None and managed_by is not None:
            self.log.warning("ha_promote_forced", user=user, managed_by=managed_by)
        from broker.ha.ha_broker import PromoteError

        try:
            if named is None and not ended:
                state = await ha.promote(epoch, in_sync)
            else:
                state = await ha.promote(epoch, in_sync, store_named=named is not None, ended=ended)
            if lease is not None:
                ha.grant_lease(lease)
        except PromoteError as exc:
            raise ApiError(HTTPStatus.CONFLICT, str(exc)) from exc
        # took_ms: from the request's handler to here (the promotion itself); its
        # arrival is the log line's time less it (issue 25: a fail-over's phases)
        took_ms = round((time.monotonic() - began) * 1000.0, 1)
        self.log.info(
            "ha_promote_requested", user=user, epoch=ha.epoch, agent=agent, took_ms=took_ms
        )
        # pid and broker_id: the instance promoted, which its agent may later record as
        # ended once it saw that very process reaped (ha_agent.ended)
        return json_response(
            {
                "state": state.value,
                "epoch": ha.epoch,
                "pid": os.getpid(),
                "broker_id": ha.broker_id,
            }
        )

    async def lease(self, request: web.Request) -> web.Response:
        """POST /api/ha/lease {"cluster_manager": true, "lease": seconds}: renew the primary's
        lease (cluster managers only); a primary whose lease runs out fences itself."""
        ha = self._ha()
        data = await _manager_command(
            request,
            {"cluster_manager", "lease"},
            "the lease is a cluster-manager command (send cluster_manager: true)",
        )
        lease = _lease_seconds(data)
        if lease is None:
            raise ApiError(HTTPStatus.BAD_REQUEST, "lease (seconds) is required")
        from broker.ha.ha_broker import PromoteError

        try:
            ha.grant_lease(lease)
        except PromoteError as exc:
            raise ApiError(HTTPStatus.CONFLICT, str(exc)) from exc
        answer = {
            "state": ha.state.value,
            "lease": lease,
            "cluster_shutdown": self.cluster_shutdown,
        }
        if self.cluster_shutdown is not None:
            self._manager_told.set()
        return json_response(answer)

    async def in_sync(self, request: web.Request) -> web.Response:
        """POST /api/ha/in-sync {"cluster_manager": true, "epoch": E, "members": [ids]}: the
        in-sync set committed at epoch E; the primary releases the confirms it holds for
        every backup that went away and is not in it (cluster managers only). On a broker
        an agent manages, only with the agent's mark (``"agent": NODE``) or ``"force":
        true`` (:func:`broker.management.promote_guard.commit_refusal`)."""
        ha = self._ha()
        data = await _manager_command(
            request,
            {"cluster_manager", "epoch", "members", "agent", "force"},
            "the in-sync set is the cluster manager's (send cluster_manager: true)",
        )
        epoch = data.get("epoch")
        if not _is_epoch(epoch):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"epoch must be 0..{MAX_EPOCH}: {epoch!r}")
        members = _broker_ids(data, "members")
        agent = _agent(data["agent"], "agent") if "agent" in data else None
        force = data.get("force", False)
        if not isinstance(force, bool):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"force must be true or false: {force!r}")
        refusal = self.promote_guard.commit_refusal(agent, force)
        if refusal is not None:
            self.log.warning(
                "ha_in_sync_refused",
                user=current_user.get(),
                managed_by=self.promote_guard.managed_by,
            )
            raise ApiError(HTTPStatus.CONFLICT, refusal)
        from broker.ha.ha_broker import PromoteError

        try:
            released = ha.commit_in_sync(epoch, members)
        except PromoteError as exc:
            raise ApiError(HTTPStatus.CONFLICT, str(exc)) from exc
        self.log.info("ha_in_sync_set", user=current_user.get(), epoch=epoch, members=members)
        return json_response(
            {"released": released, "pending_removal": ha.in_sync_status()["pending_removal"]}
        )

    async def members(self, request: web.Request) -> web.Response:
        """POST /api/ha/members {"cluster_manager": true, "replication_formats": {node:
        "LOW-HIGH"}}: the formats of every member ZooKeeper lists; a client's declare is
        held to the lowest format a link to one of them would use (cluster managers only).
        Answers that floor: ``{"format": N, "why": ...}``."""
        ha = self._ha()
        data = await _manager_command(
            request,
            {"cluster_manager", "replication_formats"},
            "the members' formats are the cluster manager's (send cluster_manager: true)",
        )
        raw = data.get("replication_formats")
        if not isinstance(raw, dict):
            raise ApiError(HTTPStatus.BAD_REQUEST, "replication_formats must be an object")
        try:
            ranges = {str(node): parse_range(text) for node, text in raw.items()}
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"replication_formats: {exc}") from exc
        before = ha.contract_floor.members_floor
        floor = ha.contract_floor.members(ranges)
        if floor != before:
            self.log.info("ha_contract_format", format=floor.format, reason=floor.why or None)
        return json_response({"format": floor.format, "why": floor.why})

    async def shutdown(self, request: web.Request) -> web.StreamResponse:
        """POST /api/ha/shutdown {"cluster_manager": true, "shutdown_id": UUID, "quiesce":
        bool}: one step of a clean all-stop (``qpid-ha shutdown --all``, cluster managers
        only). ``quiesce``: stop serving clients (the primary, first) and answer; else answer,
        then stop as on SIGTERM, leaving the store clean with ``shutdown_id``."""
        self._ha()
        data = await _manager_command(
            request,
            {"cluster_manager", "shutdown_id", "quiesce"},
            "shutdown is a cluster-manager command (send cluster_manager: true)",
        )
        shutdown_id = data.get("shutdown_id")
        if not isinstance(shutdown_id, str) or parse_id(shutdown_id) != shutdown_id:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"shutdown_id must be a UUID: {shutdown_id!r}")
        quiesce = data.get("quiesce", False)
        if not isinstance(quiesce, bool):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"quiesce must be true or false: {quiesce!r}")
        self.cluster_shutdown = shutdown_id
        liveness = getattr(self.broker, "liveness", None)
        if liveness is not None:  # lease answers off the loop tell the manager too
            liveness.cluster_shutdown = shutdown_id
            if liveness.server is not None:
                told, loop = self._manager_told, asyncio.get_running_loop()
                liveness.server.on_told = lambda: loop.call_soon_threadsafe(told.set)
        closed = self.broker.prepare_cluster_shutdown(shutdown_id, quiesce=quiesce)
        self.log.info(
            "ha_shutdown_requested",
            user=current_user.get(),
            shutdown_id=shutdown_id,
            quiesce=quiesce,
            clients_closed=closed,
        )
        # Before the answer: qpid-ha stops the backups only after the primary's quiesce
        # answered, so the primary's agent knows before a backup goes (it then commits no
        # removal: the in-sync set keeps every clean store) and before the primary stops.
        await self._tell_the_manager(self._ha())
        answer = {"shutdown_id": shutdown_id, "stopping": not quiesce, "clients_closed": closed}
        response = json_response(answer)
        if not quiesce:
            await response.prepare(request)
            await response.write_eof()  # the answer is out before the broker stops
            self._stop()
        return response

    async def _tell_the_manager(self, ha: Any) -> None:
        """Wait until the cluster manager was told of the shutdown: a primary it leases, by a
        lease answer (at most the lease left: a lease not renewed ends the primary anyway);
        a backup whose agent checks it, by the agent's next ``/api/ha``. At most
        :data:`MAX_TELL_WAIT` (within qpid-ha's call timeout; an agent renews and checks
        every check interval, 0.5 s by default). A broker nobody manages does not wait."""
        wait = 0.0
        left = ha.status().get("lease_remaining")
        if ha.state.value in ("active", "recovering") and isinstance(left, int | float):
            wait = left
        read_at, now = self._manager_read_at, asyncio.get_running_loop().time()
        if read_at is not None and now - read_at <= MANAGER_SEEN_WITHIN:
            wait = MAX_TELL_WAIT
        if wait <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._manager_told.wait(), timeout=min(wait, MAX_TELL_WAIT))

    async def list_replications(self, request: web.Request) -> web.Response:
        replications = getattr(self.broker, "replications", {})
        return json_response([r.status() for _, r in sorted(replications.items())])

    async def replicate(self, request: web.Request) -> web.Response:
        """POST /api/ha/replicate {"queue": Q, "broker": "host:port", "vhost": V}
        (ha-queue-replication; ``vhost``, "/" when absent: the queue's vhost, the same on
        both brokers)."""
        body = Body(await read_json_object(request), ("queue", "broker", "vhost"))
        queue = check_name("queue", body.string("queue"))
        remote = body.string("broker")
        vhost = body.string("vhost", "/")
        start = getattr(self.broker, "replicate", None)
        if start is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "this broker cannot replicate queues")
        try:
            replication = await start(queue, remote, vhost)
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from exc
        return json_response(replication.status(), 201)
