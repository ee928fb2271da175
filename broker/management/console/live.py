"""The console's live feed: a sampler, the snapshot it builds, and the event stream.

:Status: Beta

The HA role's events go to the fail-over timeline as they are logged
(:class:`~broker.management.console.timeline.Timeline`, a listener of
``HaBroker.listeners``). The sampler (one asyncio task per management app, started and
stopped with it) reads the broker every :data:`PERIOD` seconds: the queues' counters (for
the rates and charts, :data:`HISTORY` samples kept per queue), each backup's lag per queue
(messages still to send, for the sparklines) and since when it has left batches
unacknowledged (``unacknowledged_for``: a backup that stopped reading, whose lag hides in
the socket buffers); then it builds a snapshot for the streams. With ``--console-zk`` and
``--console-cluster``, a second task reads the agents' view from ZooKeeper
(:class:`~broker.management.console.agents_view.AgentsView`).

A snapshot holds the bodies of the endpoints the CLI reads, built by the same functions
(``/api/status``'s fields, ``/api/ha``, ``/api/queues``, ``/api/exchanges``,
``/api/bindings``, ``/api/connections``: :mod:`broker.management.views`), plus what the
console derives: rates, histories, the timeline.

``GET /api/console/live`` is a stream of server-sent events (``text/event-stream``), one
``snapshot`` event a second, for any user with the monitoring role (authentication as for
every ``/api`` path). The stream ends when the client goes or the management API stops
(the app's shutdown wakes every stream, so a stop never waits on an open console).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker import __version__
from broker.core.vhost import VHOST
from broker.core.vhosts import key_of, queue_key
from broker.management.auth import current_user
from broker.management.console.agent_log import promotion_instants, read_tail
from broker.management.console.agents_view import AgentsView, zk_access
from broker.management.console.timeline import Timeline
from broker.management.managed import ManagedBroker, vhosts_of
from broker.management.responses import dumps, dumps_sliced, run_sliced
from broker.management.views import (
    binding_view,
    connection_view,
    exchange_view,
    queue_view,
)
from broker.security.roles import Role
from common.slices import SLICE, Steps, rows_in_slices, run_steps

__all__ = ["HISTORY", "PERIOD", "LiveFeed"]

#: Seconds between two samples (and two snapshots).
PERIOD = 1.0
#: Reads of the agent's log for one promotion, a sample apart, before giving up.
AGENT_LOG_TRIES = 30
#: Samples (seconds) of history kept per queue and per backup's queue.
HISTORY = 60


def _agents_view(broker: ManagedBroker) -> AgentsView | None:
    """The agents' view when ``--console-zk`` and ``--console-cluster`` name it."""
    hosts = getattr(broker.options, "console_zk", None)
    cluster = getattr(broker.options, "console_cluster", None)
    if not isinstance(hosts, str) or not isinstance(cluster, str):
        return None
    return AgentsView(hosts, cluster, access=zk_access(broker.options))


#: Entries counted at most per backup and queue for ``lag_bytes`` (past it: a lower bound).
LAG_BYTES_SCAN = 100_000


def lag_bytes(queue: Any, last_sent: int) -> tuple[int, bool]:
    """Body bytes of ``queue``'s messages past ``last_sent`` (what the primary still has to
    send a backup), and whether the count stopped at :data:`LAG_BYTES_SCAN` entries."""
    total = 0
    for counted, entry in enumerate(reversed(queue.entries())):
        if entry.position <= last_sent:
            return total, False
        if counted >= LAG_BYTES_SCAN:
            return total, True
        total += len(entry.message.body)
    return total, False


def _with_lag_bytes(queues: Mapping[str, Any], ha_status: dict[str, Any] | None) -> Any:
    """``/api/ha``'s body with each backup's queue rows given ``lag_bytes`` (and
    ``lag_bytes_partial``): the primary counts its backlog in messages only."""
    if not ha_status or not ha_status.get("backups"):
        return ha_status
    backups = []
    for backup in ha_status["backups"]:
        rows = []
        for row in backup.get("queues", []):
            queue = queues.get(queue_key(str(row.get("vhost") or VHOST), str(row.get("queue"))))
            last_sent = row.get("last_sent_id")
            if queue is None or not isinstance(last_sent, int) or not row.get("lag"):
                rows.append({**row, "lag_bytes": 0, "lag_bytes_partial": False})
                continue
            counted, partial = lag_bytes(queue, last_sent)
            rows.append({**row, "lag_bytes": counted, "lag_bytes_partial": partial})
        backups.append({**backup, "queues": rows})
    return {**ha_status, "backups": backups}


def _replication(broker: ManagedBroker, queue: Any) -> str | None:
    ha = getattr(broker, "ha", None)
    if ha is None:
        return None
    from broker.ha.replicate_level import queue_level

    try:
        return str(queue_level(queue, ha.replicate_default).value)
    except Exception:  # a bad qpid.replicate argument: shown, not raised
        return "invalid"


class LiveFeed:
    """The sampler, its histories and the snapshot streams of one broker."""

    def __init__(
        self,
        broker: ManagedBroker,
        log: FilteringBoundLogger,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.broker = broker
        self.log = log
        self.clock = wall_clock
        self.timeline = Timeline()
        self.queue_history: dict[str, deque[dict[str, float]]] = {}
        self.lag_history: dict[str, dict[str, deque[int]]] = {}
        #: backup id -> since when it has had batches sent and not acknowledged (a backup
        #: that stopped reading: its lag in messages stays in the socket buffers).
        self.unacknowledged_since: dict[str, float] = {}
        self._counters: dict[str, tuple[float, int, int, int]] = {}
        self._changed = asyncio.Condition()
        self._version = 0
        self.snapshot: dict[str, Any] | None = None
        #: the snapshot encoded (the snapshot, its JSON text), shared by every viewer
        self._text: tuple[dict[str, Any], str] | None = None
        self._encoding = asyncio.Lock()
        self.viewers = 0  #: open streams
        self._agent_tries: dict[int, int] = {}  #: epoch -> reads of the agent's log
        self.closing = False
        self._task: asyncio.Task[None] | None = None
        self.agents = _agents_view(broker)
        self._agents_task: asyncio.Task[None] | None = None

    # app lifecycle ----------------------------------------------------------------------
    async def start(self, app: web.Application) -> None:
        listeners = getattr(getattr(self.broker, "ha", None), "listeners", None)
        if isinstance(listeners, list):
            listeners.append(self.on_ha_event)
        self._task = asyncio.create_task(self._run(), name="console-sampler")
        if self.agents is not None:
            self._agents_task = asyncio.create_task(self._read_agents(), name="console-agents")

    async def shutdown(self, app: web.Application) -> None:
        self.closing = True
        async with self._changed:
            self._changed.notify_all()

    async def stop(self, app: web.Application) -> None:
        await self.shutdown(app)
        for task in (self._task, self._agents_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.agents is not None:
            await self.agents.aclose()

    async def _run(self) -> None:
        while not self.closing:
            try:
                await run_sliced(self.sample_steps())
                async with self._changed:
                    self._version += 1
                    self._changed.notify_all()
            except Exception:
                self.log.exception("console_sample_failed")
            await asyncio.sleep(PERIOD)

    async def _read_agents(self) -> None:
        assert self.agents is not None
        while not self.closing:
            try:
                await self.agents.refresh()
            except Exception:
                self.log.exception("console_sample_failed", what="agents' view")
            await asyncio.sleep(PERIOD)

    # sampling ---------------------------------------------------------------------------
    def on_ha_event(self, event: str, fields: dict[str, Any]) -> None:
        """An HA event as the broker logs it (``HaBroker.listeners``): to the timeline."""
        ha = getattr(self.broker, "ha", None)
        if ha is None:
            return
        failover = self.timeline.observe(
            self.clock(), event, fields, int(ha.epoch), str(getattr(ha, "url", ""))
        )
        if failover is not None:
            view = failover.view()
            self.log.info(
                "console_failover_seen",
                new_epoch=view["epoch"],
                seen_by=view["seen_by"],
                old_primary=view["old_primary"],
                new_primary=view["new_primary"],
                until_promoted_ms=view["until_promoted_ms"],
            )

    def sample(self) -> None:
        """Counters to rates and histories; then a new snapshot."""
        run_steps(self.sample_steps())

    def sample_steps(self) -> Steps[None]:
        """:meth:`sample` in slices of :data:`~common.slices.SLICE` queues (the sampler
        runs a slice a turn of the event loop: 10,000 queues at once held it 0.1-0.25 s
        every second). The queues are listed when the first slice runs."""
        now = self.clock()
        queues = vhosts_of(self.broker).queues  # by key: the name in "/"
        for name in list(self.queue_history):
            if name not in queues:
                del self.queue_history[name]
                self._counters.pop(name, None)
        items = list(queues.items())
        for start in range(0, len(items), SLICE):
            if start:
                yield
            self._sample_queues(now, items[start : start + SLICE])
        ha = getattr(self.broker, "ha", None)
        ha_status = None if ha is None else (yield from _status_steps(ha))
        self._sample_backups(now, ha_status)
        self._agent_instants()
        # only while someone watches: a snapshot of every object each second costs
        self.snapshot = (yield from self._build_steps(now, ha_status)) if self.viewers else None
        if self.snapshot is None:
            self._text = None  # megabytes at 10,000 queues: not kept for nobody

    def _sample_queues(self, now: float, items: list[tuple[str, Any]]) -> None:
        for name, queue in items:
            counters = (now, queue.enqueued_total, queue.delivered_total, queue.acked_total)
            before = self._counters.get(name, counters)
            self._counters[name] = counters
            span = max(now - before[0], 1e-3)
            point = {
                "messages": queue.message_count,
                "unacked": queue.unacked,
                "publish": round(max(0, counters[1] - before[1]) / span, 2),
                "deliver": round(max(0, counters[2] - before[2]) / span, 2),
                "ack": round(max(0, counters[3] - before[3]) / span, 2),
            }
            self.queue_history.setdefault(name, deque(maxlen=HISTORY)).append(point)

    def _sample_backups(self, now: float, ha_status: dict[str, Any] | None) -> None:
        seen: set[str] = set()
        for backup in (ha_status or {}).get("backups", []):
            backup_id = str(backup["id"])
            lags = self.lag_history.setdefault(backup_id, {})
            seen.add(backup_id)
            waiting = 0
            for row in backup.get("queues", []):
                lags.setdefault(str(row["queue"]), deque(maxlen=HISTORY)).append(int(row["lag"]))
                waiting += int(row.get("unacknowledged_batches") or 0)
            if waiting:
                self.unacknowledged_since.setdefault(backup_id, now)
            else:
                self.unacknowledged_since.pop(backup_id, None)
        for gone in set(self.lag_history) - seen:
            del self.lag_history[gone]
        for gone in set(self.unacknowledged_since) - seen:
            del self.unacknowledged_since[gone]

    def _agent_instants(self) -> None:
        """A new primary's fail-overs get this node's agent's won and promoted (its log may
        be a moment behind: tried each second, :data:`AGENT_LOG_TRIES` times)."""
        path = getattr(self.broker.options, "console_agent_log", None)
        if not isinstance(path, str):
            return
        wanting = [
            f
            for f in self.timeline.failovers
            if f.seen_by == "new primary"
            and f.instants.get("promoted") is None
            and self._agent_tries.get(f.epoch, 0) < AGENT_LOG_TRIES
        ]
        if not wanting:
            return
        lines = read_tail(path)
        for failover in wanting:
            self._agent_tries[failover.epoch] = self._agent_tries.get(failover.epoch, 0) + 1
            found = promotion_instants(lines, failover.epoch)
            if found["promoted"] is not None:
                failover.instants.update(found)

    def fresh(self) -> dict[str, Any]:
        """A snapshot now (for a stream that starts while nobody watched)."""
        ha = getattr(self.broker, "ha", None)
        self.snapshot = self._build(self.clock(), ha.status() if ha is not None else None)
        return self.snapshot

    async def fresh_sliced(self) -> dict[str, Any]:
        """:meth:`fresh`, a slice a turn of the event loop."""
        ha = getattr(self.broker, "ha", None)
        ha_status = None if ha is None else await run_sliced(_status_steps(ha))
        self.snapshot = await run_sliced(self._build_steps(self.clock(), ha_status))
        return self.snapshot

    def _build(self, now: float, ha_status: dict[str, Any] | None) -> dict[str, Any]:
        return run_steps(self._build_steps(now, ha_status))

    def _queue_view(self, queue: Any) -> dict[str, Any]:
        view = queue_view(queue)
        view["replication"] = _replication(self.broker, queue)
        view["history"] = list(self.queue_history.get(key_of(queue), ()))
        return view

    def _build_steps(self, now: float, ha_status: dict[str, Any] | None) -> Steps[dict[str, Any]]:
        """The snapshot in slices of :data:`~common.slices.SLICE` objects: the objects are
        listed when the first slice runs, each read when its slice runs."""
        broker = self.broker
        vhosts = sorted(vhosts_of(broker), key=lambda v: (v.name != VHOST, v.name))
        listed = [q for v in vhosts for q in sorted(v.queues.values(), key=lambda q: q.name)]
        queues = yield from rows_in_slices(listed, self._queue_view)
        exchanges = [e for v in vhosts for e in sorted(v.exchanges.values(), key=lambda e: e.name)]
        bindings = [
            b
            for v in vhosts
            for b in sorted(
                v.bindings(), key=lambda b: (b.exchange, b.destination_type, b.destination.name)
            )
        ]
        yield
        exchange_views = yield from rows_in_slices(exchanges, exchange_view)
        binding_views = yield from rows_in_slices(bindings, binding_view)
        connections = sorted(broker.context.connections.values(), key=lambda c: c.id)
        connection_views = yield from rows_in_slices(connections, connection_view)
        return {
            "at": now,
            "status": {
                "node": broker.options.node_name,
                "version": __version__,
                "pid": os.getpid(),
                "uptime": round(max(0.0, now - broker.started_at), 3),
                "ha_state": broker.ha_state,
                "store_status": broker.store_status,
                "amqp_port": broker.amqp_port,
                "connections": len(broker.context.connections),
                "queues": sum(len(v.queues) for v in vhosts),
                "exchanges": sum(len(v.exchanges) for v in vhosts),
            },
            "ha": _with_lag_bytes(vhosts_of(broker).queues, ha_status),
            "agents": None if self.agents is None else self.agents.view,
            "configured_members": [
                str(a) for a in getattr(getattr(broker, "ha", None), "addresses", [])
            ],
            "lag_history": {
                backup: {queue: list(lags) for queue, lags in by_queue.items()}
                for backup, by_queue in self.lag_history.items()
            },
            "unacknowledged_for": {
                backup: round(now - since, 1) for backup, since in self.unacknowledged_since.items()
            },
            "timeline": self.timeline.view(),
            "queues": queues,
            "exchanges": exchange_views,
            "bindings": binding_views,
            "vhosts": [
                {"name": v.name, "queues": len(v.queues), "exchanges": len(v.exchanges)}
                for v in vhosts
            ],
            "connections": connection_views,
        }

    # the stream -------------------------------------------------------------------------
    async def _encoded(self) -> str:
        """The current snapshot's JSON text, encoded once for every viewer, a slice a turn
        of the event loop (a snapshot of 10,000 queues is megabytes of text)."""
        async with self._encoding:
            snapshot = self.snapshot or await self.fresh_sliced()
            if self._text is None or self._text[0] is not snapshot:
                self._text = (snapshot, await dumps_sliced(snapshot))
            return self._text[1]

    def viewer(self, user: str | None) -> dict[str, Any]:
        """Who is watching: the user and roles (every role with authentication off)."""
        if user is None or not self.broker.options.auth:
            return {"user": user, "roles": sorted(role.value for role in Role), "auth": False}
        roles = self.broker.context.authenticator.roles(user)
        return {"user": user, "roles": sorted(role.value for role in roles), "auth": True}

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """GET /api/console/live: a ``snapshot`` event a second until the client goes."""
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        viewer = self.viewer(current_user.get())
        seen = -1

        def news() -> bool:
            return self.closing or self._version != seen

        self.viewers += 1
        me = dumps(viewer)
        try:
            while not self.closing:
                text = await self._encoded()
                data = f'{text[:-1]}, "me": {me}}}'  # the snapshot's object, with "me" last
                await response.write(f"event: snapshot\ndata: {data}\n\n".encode())
                seen = self._version
                async with self._changed:
                    await self._changed.wait_for(news)
        except ConnectionResetError:
            pass  # the client went
        finally:
            self.viewers -= 1
        return response


def _status_steps(ha: Any) -> Steps[dict[str, Any]]:
    """The HA role's status (``GET /api/ha``'s body) in slices where the role offers them
    (:func:`broker.ha.ha_status.ha_status_steps`), else at once."""
    steps = getattr(ha, "status_steps", None)
    if steps is None:
        return dict(ha.status())
    status: dict[str, Any] = yield from steps()
    return status
