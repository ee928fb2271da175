"""The console's live feed: a sampler, the snapshot it builds, and the event stream.

:Status: Beta

The HA role's events go to the fail-over timeline as they are logged
(:class:`~broker.management.console.timeline.Timeline`, a listener of
``HaBroker.listeners``). The sampler (one asyncio task per management app, started and
stopped with it) reads the broker every :data:`PERIOD` seconds: the queues' counters (for
the rates and charts), each backup's lag per queue (messages still to send, for the
sparklines) and since when it has left batches unacknowledged (``unacknowledged_for``: a
backup that stopped reading, whose lag hides in the socket buffers), kept by
:class:`~broker.management.console.samples.Samples`; then it builds a snapshot for the
streams. With ``--console-zk`` and
``--console-cluster``, a second task reads the agents' view from ZooKeeper
(:class:`~broker.management.console.agents_view.AgentsView`).

The state the pages show is built by the functions of the endpoints the CLI reads
(``/api/status``'s fields, ``/api/ha``), plus what the console derives: histories, the
timeline. The lists (queues, exchanges, bindings, connections) are followed by
:class:`~broker.management.console.live_lists.LiveLists`: a journal of what changed each
tick, while someone follows them.

``GET /api/console/live`` is a stream of server-sent events (``text/event-stream``) for any
user with the monitoring role (authentication as for every ``/api`` path); its query is the
queue table's (the list query of :mod:`broker.management.list_query`, 400 when bad), and
for each other list the viewer pages rather than holds whole, the same parameters prefixed
with the list's name and a dot (``exchanges.page=1&exchanges.page_size=50&exchanges.name=x``).
A viewer that starts, or fell behind, gets a ``snapshot`` event (the state, every row of
the lists it holds whole, ``me``) and a whole ``page`` event per list it pages (the queues
with their histories); then each tick a ``page`` event for each of its pages where
something changed and a ``delta`` event (the state and what changed in the lists it holds
whole), encoded once for every viewer. When the broker stops, a ``stopping`` event says
why. ``GET /api/changes?since=V`` is the same journal for any reader: what changed in
every list since version V (docs/management.md). The stream ends when the client goes or
the management API stops (the app's shutdown wakes every stream, so a stop never waits on
an open console).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker import __version__
from broker.core.vhost import VHOST
from broker.core.vhosts import key_of
from broker.management.auth import current_user
from broker.management.console.agent_log import promotion_instants, read_tail
from broker.management.console.agents_view import AgentsView, zk_access
from broker.management.console.ha_view import (
    agent_option,
    with_lag_bytes_steps,
    with_managed_by,
)
from broker.management.console.live_lists import (
    CONSOLE_KINDS,
    CONSOLE_QUEUES,
    LIVE_LISTS,
    PAGED_ONLY,
    ListPage,
    LiveLists,
    channels_wanted_by,
)
from broker.management.console.overview import RANGES, Overview
from broker.management.console.samples import Samples
from broker.management.console.timeline import Timeline
from broker.management.errors import ApiError
from broker.management.lists import parse_query
from broker.management.managed import ManagedBroker, vhosts_of
from broker.management.responses import (
    dumps,
    dumps_sliced,
    json_response,
    json_response_sliced,
    run_sliced,
)
from broker.management.views import queue_view
from broker.security.roles import Role
from common.slices import SLICE, Steps, run_steps

__all__ = ["PERIOD", "LiveFeed"]

#: Seconds between two samples (and two snapshots).
PERIOD = 1.0
#: Reads of the agent's log for one promotion, a sample apart, before giving up.
AGENT_LOG_TRIES = 30


def _agents_view(broker: ManagedBroker) -> AgentsView | None:
    """The agents' view when ``--console-zk`` and ``--console-cluster`` name it."""
    hosts = getattr(broker.options, "console_zk", None)
    cluster = getattr(broker.options, "console_cluster", None)
    if not isinstance(hosts, str) or not isinstance(cluster, str):
        return None
    return AgentsView(hosts, cluster, access=zk_access(broker.options))


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
        self.overview = Overview(broker)  # RabbitMQ's Overview: totals, rates, node figures
        #: what the sampler read: rates and histories per queue, lags per backup
        self.samples = Samples()
        #: the agent that manages this broker (``GET /api/ha``'s ``managed_by``): the
        #: management app sets it to its promote guard's (a promotion by hand is refused)
        self.managed_by: Callable[[], str | None] = lambda: agent_option(broker)
        self._changed = asyncio.Condition()
        self._version = 0
        #: the pages' state (status, HA, agents, timeline...) of the last tick followed
        self.state: dict[str, Any] | None = None
        #: the state encoded (the state, its JSON text), shared by every viewer
        self._text: tuple[dict[str, Any], str] | None = None
        self._encoding = asyncio.Lock()
        self._sampling = asyncio.Lock()
        self.lists = LiveLists(
            broker, self._queue_row, self.samples.history, self.samples.connection_rates_of
        )
        self._followed = False  #: the lists were followed at the last tick
        self.viewers = 0  #: open streams
        self._agent_tries: dict[int, int] = {}  #: epoch -> reads of the agent's log
        self.closing = False
        self._task: asyncio.Task[None] | None = None
        self.agents = _agents_view(broker)
        self._agents_task: asyncio.Task[None] | None = None

    @property
    def queue_history(self) -> dict[str, deque[dict[str, float]]]:
        """Each queue's history (:class:`Samples`)."""
        return self.samples.queue_history

    @property
    def lag_history(self) -> dict[str, dict[str, deque[int]]]:
        """Each backup's lag history per queue (:class:`Samples`)."""
        return self.samples.lag_history

    @property
    def unacknowledged_since(self) -> dict[str, float]:
        """Since when each backup has left batches unacknowledged (:class:`Samples`)."""
        return self.samples.unacknowledged_since

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
            if self._quiet():
                await asyncio.sleep(PERIOD / 10)  # a promotion's quiet: sample after it
                continue
            try:
                async with self._sampling:  # one begun before a promotion waits it out
                    await run_sliced(self.sample_steps(), self._quiet, PERIOD / 10)
                async with self._changed:
                    self._version += 1
                    self._changed.notify_all()
            except Exception:
                self.log.exception("console_sample_failed")
            await asyncio.sleep(PERIOD)

    def _quiet(self) -> bool:
        """A promotion's quiet (:mod:`broker.ha.promotion_quiet`): no sampling."""
        ha = getattr(self.broker, "ha", None)
        return ha is not None and hasattr(ha, "quiet") and bool(ha.quiet.holds(ha.now()))

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
        vhosts = vhosts_of(self.broker)
        items = list(vhosts.queues.items())  # by key: the name in "/"
        samples = self.samples
        samples.queues_gone(vhosts.missing_queues(samples.queue_history.keys()))
        following = self.following(now)
        samples.tick()
        for start in range(0, len(items), SLICE):
            if start:
                yield
            # each slice's own time: a slice after a pause reads counters of later
            samples.queues(self.clock(), items[start : start + SLICE], following)
        ha = getattr(self.broker, "ha", None)
        # nobody viewing: the backups' positions (the lag histories), not a row per queue
        ha_status = None if ha is None else (yield from _status_steps(ha, rows=following))
        yield from samples.backups_steps(now, ha_status)
        context = self.broker.context  # byte rates: two counters a connection
        samples.connections(now, [*context.connections.values(), *context.connections_1_0.values()])
        self._agent_instants()
        # only while someone follows: the lists' journal and the pages' state
        if following:
            yield from self._follow_steps(now, ha_status, items)
        else:
            if self._followed:
                self.lists.release()
            self.state, self._text, self._followed = None, None, False

    def following(self, now: float) -> bool:
        """Whether someone follows the lists: a viewer, or a recent reader of
        ``GET /api/changes``."""
        return self.viewers > 0 or now < self.lists.followed_until

    def _follow_steps(
        self,
        now: float,
        ha_status: dict[str, Any] | None,
        queues: list[tuple[str, Any]] | None = None,
    ) -> Steps[None]:
        """The lists into the journal (every row rebuilt when they were not followed at
        the last tick: the versions before are forgotten), then the state."""
        if not self._followed:
            self.lists.journal.forget()
            moved: set[str] | None = None
        else:  # a rate that fell to 0 moves a queue once more after its counters stop
            moved = self.samples.moved | self.samples.moved_before
        yield from self.lists.update_steps(moved, queues, self.lists.channels_wanted(now))
        self.lists.prune_texts()
        self._followed = True
        self.state = yield from self._build_steps(now, ha_status)

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
        """The state and every list now, in the lists' order (the journal brought up to
        date at once: for tests and tools, not the event loop)."""
        ha = getattr(self.broker, "ha", None)
        run_steps(self._follow_steps(self.clock(), ha.status() if ha is not None else None))
        return self.whole()

    async def fresh_sliced(self) -> None:
        """The journal and the state brought up to date now, a slice a turn of the event
        loop (a viewer that starts while nobody followed, a reader of the changes)."""
        async with self._sampling:
            ha = getattr(self.broker, "ha", None)
            ha_status = None if ha is None else await run_sliced(_status_steps(ha))
            await run_sliced(self._follow_steps(self.clock(), ha_status))
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    def whole(self) -> dict[str, Any]:
        """The state with every list as an array in its order (queues by vhost and name,
        each with its history)."""
        assert self.state is not None
        rows = self.lists.journal.rows
        queues = [
            {**rows["queues"][k], "history": self.samples.history(k)}
            for k in sorted(rows["queues"], key=lambda k: _order(rows["queues"][k]))
        ]
        exchanges = sorted(rows["exchanges"].values(), key=_order)
        bindings = sorted(
            rows["bindings"].values(),
            key=lambda b: (
                b["vhost"] != VHOST,
                b["vhost"],
                b["source"],
                b["destination_type"],
                b["destination"],
            ),
        )
        connections = sorted(rows["connections"].values(), key=lambda c: int(c["id"]))
        return {
            **self.state,
            "queues": queues,
            "exchanges": exchanges,
            "bindings": bindings,
            "connections": connections,
        }

    def _build(self, now: float, ha_status: dict[str, Any] | None) -> dict[str, Any]:
        return run_steps(self._build_steps(now, ha_status))

    def _queue_row(self, queue: Any) -> dict[str, Any]:
        """A queue's row in the console's lists: the API's view, its replication level
        and the rates of the last sample (per second)."""
        view = queue_view(queue)
        view["replication"] = _replication(self.broker, queue)
        view.update(self.samples.rates(key_of(queue)))
        return view

    def _build_steps(self, now: float, ha_status: dict[str, Any] | None) -> Steps[dict[str, Any]]:
        """The pages' state (everything but the lists), in slices where the HA status
        offers them."""
        broker = self.broker
        vhosts = sorted(vhosts_of(broker), key=lambda v: (v.name != VHOST, v.name))
        limits = broker.context.authenticator.cluster_users.limits
        yield
        lagged = yield from with_lag_bytes_steps(vhosts_of(broker).queues, ha_status)
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
            "ha": with_managed_by(lagged, self.managed_by()),
            "agents": None if self.agents is None else self.agents.view,
            "configured_members": [
                str(a) for a in getattr(getattr(broker, "ha", None), "addresses", [])
            ],
            "lag_history": self.samples.lags(),
            "unacknowledged_for": self.samples.unacknowledged_for(now),
            "timeline": self.timeline.view(),
            "overview": (yield from self.overview.sample_steps(now)),
            "vhosts": [
                {
                    "name": v.name,
                    "queues": len(v.queues),
                    "exchanges": len(v.exchanges),
                    "limits": limits.of(v.name),  # max-connections, max-queues
                }
                for v in vhosts
            ],
        }

    # the stream -------------------------------------------------------------------------
    async def _state_text(self) -> str:
        """The state's JSON text, encoded once for every viewer, a slice a turn of the
        event loop (the HA status of thousands of queues is megabytes)."""
        async with self._encoding:
            state = self.state
            if state is None:
                await self.fresh_sliced()
                state = self.state
                assert state is not None
            if self._text is None or self._text[0] is not state:
                self._text = (state, await dumps_sliced(state))
            return self._text[1]

    def viewer(self, user: str | None) -> dict[str, Any]:
        """Who is watching: the user and roles (every role with authentication off)."""
        if user is None or not self.broker.options.auth:
            return {"user": user, "roles": sorted(role.value for role in Role), "auth": False}
        roles = self.broker.context.authenticator.roles(user)
        return {"user": user, "roles": sorted(role.value for role in roles), "auth": True}

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """GET /api/console/live: a snapshot and the viewer's page, then each tick what
        changed, until the client goes."""
        pages = [ListPage(parse_query(request.query, CONSOLE_QUEUES))]
        for name in LIVE_LISTS[1:]:
            prefix = f"{name}."
            params = {k[len(prefix) :]: v for k, v in request.query.items() if k.startswith(prefix)}
            if params:
                pages.append(ListPage(parse_query(params, CONSOLE_KINDS[name]), name))
        paged = {page.name for page in pages}
        whole_lists = tuple(n for n in LIVE_LISTS[1:] if n not in paged and n not in PAGED_ONLY)
        pages_channels = bool(paged & set(PAGED_ONLY))
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        me = dumps(self.viewer(current_user.get()))
        held = -1  # the journal version this viewer holds
        seen = -1

        def news() -> bool:
            return self.closing or self._version != seen

        self.viewers += 1
        self.lists.channel_viewers += pages_channels
        wanted = channels_wanted_by(pages)  # which channels its pages may show
        if pages_channels:
            self.lists.channel_filters.append(wanted)
        try:
            if not self._followed or pages_channels:
                await self.fresh_sliced()
            while not self.closing:
                seen = self._version
                state = await self._state_text()
                lists = self.lists
                version = lists.journal.version
                if version != held:
                    whole = held != version - 1  # starts, or fell behind: a snapshot
                    texts = [await run_sliced(lists.page_steps(page, whole)) for page in pages]
                    if whole:
                        snapshot = await run_sliced(lists.shared_snapshot_steps(state, whole_lists))
                        data = f'{snapshot[:-1]}, "me": {me}}}'  # "me" last
                        await response.write(f"event: snapshot\ndata: {data}\n\n".encode())
                    for text in texts:
                        if text is not None:
                            await response.write(f"event: page\ndata: {text}\n\n".encode())
                    if not whole:
                        delta = await run_sliced(lists.shared_delta_steps(state, whole_lists))
                        await response.write(f"event: delta\ndata: {delta}\n\n".encode())
                    held = version
                async with self._changed:
                    await self._changed.wait_for(news)
            # the broker stops: the page is told why, so that it does not show the last
            # state as the present (a broker killed says nothing: the page sees it gone)
            stopping = dumps({"node": self.broker.options.node_name, "reason": _why(self.broker)})
            await response.write(f"event: stopping\ndata: {stopping}\n\n".encode())
        except ConnectionResetError:
            pass  # the client went
        finally:
            self.viewers -= 1
            self.lists.channel_viewers -= pages_channels
            if pages_channels:
                self.lists.channel_filters.remove(wanted)
        return response

    async def history(self, request: web.Request) -> web.Response:
        """GET /api/console/history?range=1m|1h|1d: the Overview's points over that range
        (queued messages, message rates), oldest first."""
        wanted = request.query.get("range", "1m")
        if wanted not in RANGES:
            raise ApiError(400, f"range must be one of {', '.join(RANGES)}, not {wanted!r}")
        return json_response({"range": wanted, "points": self.overview.history(wanted)})

    async def changes(self, request: web.Request) -> web.Response:
        """GET /api/changes[?since=V]: what changed in the lists since version V, or every
        row when V is absent or older than the journal holds (``"snapshot": true``)."""
        text = request.query.get("since")
        if text is not None and not text.isdigit():
            raise ApiError(400, f"since must be a version (an integer of 0 or more), not {text!r}")
        self.lists.follow(self.clock())
        if not self._followed or not self.lists.channels_whole:  # every channel, now
            await self.fresh_sliced()
        journal = self.lists.journal
        delta = None if text is None else journal.since(int(text))
        if delta is not None:
            return await json_response_sliced({**delta.view(), "snapshot": False})
        return await json_response_sliced(
            {
                "version": journal.version,
                "snapshot": True,
                "lists": journal.snapshot(),
                "totals": journal.totals(),
            }
        )


def _why(broker: ManagedBroker) -> str:
    """Why the broker stops, as its ``broker_stopped`` event says (fenced, refused...)."""
    fenced = getattr(broker, "fenced_reason", None)
    if isinstance(fenced, str):
        return f"fenced: {fenced}"
    refused = getattr(broker, "refused_reason", None)
    if isinstance(refused, str):
        return f"refused: {refused}"
    reason = getattr(broker, "stop_reason", None)
    return reason if isinstance(reason, str) and reason else "stopped"


def _order(row: Any) -> tuple[bool, str, str]:
    return (row["vhost"] != VHOST, row["vhost"], row["name"])


def _status_steps(ha: Any, rows: bool = True) -> Steps[dict[str, Any]]:
    """The HA role's status (``GET /api/ha``'s body) in slices where the role offers them
    (:func:`broker.ha.ha_status.ha_status_steps`), else at once; ``rows`` False: without
    the broker's own row per queue (each backup's positions kept)."""
    steps = getattr(ha, "status_steps", None)
    if steps is None:
        return dict(ha.status())
    status: dict[str, Any] = yield from (steps() if rows else steps(rows=False, positions=True))
    return status
