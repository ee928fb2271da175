"""The scale scenario of issue 25 (item 2), shared by its test
(``tests/ha/test_loop_steps_scale.py``) and its benchmark (``bench/loop_steps_scale.py``).

A primary and a backup (real qpidd processes, a real store each), or two backups, with
``queues`` durable queues, half of them bound to a topic exchange, a backlog on a few; then,
in order: the backups' catch-up, ``GET /api/status`` and every management list,
``/metrics`` and a console viewer (one snapshot of the live feed) on the primary; the
primary SIGKILLed and the backup promoted (with two backups, with the second as its in-sync
set: an expected backup, guarded on every queue before the new primary serves); the old
primary restarted on its store (recovery) and caught up as the new primary's backup. From
the catch-up to the old primary's return, idle connections to the primary and a publisher
of confirmed messages through the fail-over. Each phase's wall time is kept, and each
broker's event loop steps (``GET /api/status``'s ``loop``: :mod:`broker.loop_steps`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from broker.amqp.client import connect
from common.polling import poll_until
from tests.ha.cluster import AUTH, Cluster, http

#: Queues declared in one pipelined burst on one channel.
BURST = 250
#: Content-header properties: delivery-mode 2 (persistent), nothing else.
PERSISTENT = b"\x10\x00\x02"
#: The exchange half of the queues are bound to.
TOPIC = "scale.topic"
#: The queue the scenario's publisher sends to through the fail-over (no backlog on it).
ACTIVE = "q0"


@dataclass
class ScaleRun:
    """What one run measured: each phase's wall seconds, each broker's loop view."""

    queues: int
    phases: dict[str, float] = field(default_factory=dict)
    loops: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Each phase's start and end (wall clock, seconds since the epoch): the brokers' logs
    #: say what their loops did meanwhile (``bench/loop_steps_scale.py``).
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Each phase's steps of the brokers watched, by bucket (``loop.step_counts`` at its end
    #: less at its start; a broker started during the phase counts from 0).
    counts: dict[str, dict[int, list[list[Any]]]] = field(default_factory=dict)
    #: The publisher's confirmed messages (:class:`Clients`), those after the fail-over, and
    #: how many messages the new primary holds on :data:`ACTIVE` at the end.
    confirmed: int = 0
    confirmed_after: int = 0
    active_messages: int = 0

    @contextmanager
    def phase(self, name: str, cluster: Cluster | None = None, *watched: int) -> Iterator[None]:
        before = {i: _step_counts(cluster, i) for i in watched} if cluster else {}
        started, wall = time.monotonic(), time.time()
        yield
        self.phases[name] = round(time.monotonic() - started, 2)
        self.spans[name] = (wall, time.time())
        if cluster is not None:
            self.counts[name] = {
                i: _counts_between(before[i], _step_counts(cluster, i)) for i in watched
            }

    def long_steps(self) -> list[str]:
        """Every long step a broker kept, one line each (empty: none)."""
        return [
            f"{broker}: {step['cpu_ms']} ms CPU ({step['gc_ms']} ms of it garbage collection),"
            f" {step['ago_s']} s before the end, at {step['where']}"
            for broker, loop in self.loops.items()
            for step in loop["long_steps"]
        ]


def _step_counts(cluster: Cluster, i: int) -> list[list[Any]] | None:
    """A live broker's ``loop.step_counts``; None when it does not answer."""
    try:
        return list(loop_view(cluster, i).get("step_counts") or []) or None
    except OSError:
        return None


def _counts_between(
    before: list[list[Any]] | None, after: list[list[Any]] | None
) -> list[list[Any]]:
    if after is None:
        return []
    if before is None or len(before) != len(after):
        return after
    return [[bound, count - old] for (bound, count), (_b, old) in zip(after, before, strict=True)]


def make_cluster(root: Path, size: int = 2) -> Cluster:
    """The scenario's brokers: a primary and a backup, or a second backup (``size`` 3)."""
    return Cluster(root, size, "--ha-backup-timeout=30", "--max-connections=5000")


async def _declare(
    port: int, queues: int, backlog: dict[str, int], host: str = "127.0.0.1"
) -> None:
    client = await connect(host, port, user="guest", password="guest", timeout=30)
    try:
        channel = await client.open_channel()
        await channel._call(  # no exchange helper in the lean client: the raw method
            _exchange_declare(TOPIC), _exchange_declare_ok()
        )
        for first in range(0, queues, BURST):
            names = [f"q{i}" for i in range(first, min(queues, first + BURST))]
            await asyncio.gather(*(channel.declare_queue(n, durable=True) for n in names))
            await asyncio.gather(
                *(
                    channel.bind_queue(n, TOPIC, f"scale.{n}.#")
                    for n in names
                    if int(n[1:]) % 2 == 0
                )
            )
        await channel.confirm_select()
        for name, count in backlog.items():
            await asyncio.gather(
                *(channel.publish("", name, b"%d" % i, PERSISTENT) for i in range(count))
            )
    finally:
        await client.close()


def _exchange_declare(name: str) -> Any:
    from pamqp import commands

    return commands.Exchange.Declare(exchange=name, exchange_type="topic", durable=True)


def _exchange_declare_ok() -> Any:
    from pamqp import commands

    return commands.Exchange.DeclareOk


def get(port: int, path: str, timeout: float = 30.0) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", AUTH)
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return bytes(answer.read())


def one_console_snapshot(port: int, timeout: float = 30.0) -> int:
    """Read the console's live feed until its first snapshot ends; its size in bytes."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/console/live")
    request.add_header("Authorization", AUTH)
    size = 0
    with urllib.request.urlopen(request, timeout=timeout) as stream:
        for line in stream:
            size += len(line)
            if line == b"\n" and size > 2:
                return size
    return size


class Clients:
    """Clients of the scenario on a thread of their own: ``connections`` idle connections
    to the primary, and a publisher of confirmed persistent messages to :data:`ACTIVE`,
    one at a time, that dials the next broker of its list when its connection is lost
    (the fail-over) and goes on there. :meth:`stop` returns how many were confirmed."""

    def __init__(self, ports: list[int], connections: int) -> None:
        self.ports = ports
        self.connections = connections
        self.confirmed = 0
        #: confirmed on the second broker of the list (after the fail-over)
        self.confirmed_after = 0
        self.opened = 0
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, timeout: float) -> Clients:
        self._thread.start()
        poll_until(
            lambda: self.opened >= self.connections and self.confirmed > 0,
            timeout,
            "the scenario's connections and first confirm",
        )
        return self

    def stop(self) -> int:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(60)
        return self.confirmed

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        idle = []
        for first in range(0, self.connections, 50):
            count = min(50, self.connections - first)
            idle += await asyncio.gather(
                *(
                    connect("127.0.0.1", self.ports[0], user="guest", password="guest", timeout=60)
                    for _ in range(count)
                )
            )
            self.opened = len(idle)
        publisher = asyncio.create_task(self._publish())
        await self._stopping.wait()
        publisher.cancel()
        await asyncio.gather(publisher, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in idle), return_exceptions=True)

    async def _publish(self) -> None:
        for port in itertools.cycle(self.ports):
            try:
                client = await connect(
                    "127.0.0.1", port, user="guest", password="guest", timeout=10
                )
            except Exception:  # refused (not the primary yet) or gone: the next
                await asyncio.sleep(0.05)
                continue
            try:
                channel = await client.open_channel()
                await channel.confirm_select()
                while True:
                    await channel.publish("", ACTIVE, b"m", PERSISTENT)
                    self.confirmed += 1
                    self.confirmed_after += port == self.ports[1]
                    await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.close(), 5)
                raise
            except Exception:  # its broker died: dial the next
                pass


def loop_view(cluster: Cluster, i: int) -> dict[str, Any]:
    status = http("GET", cluster.brokers[i].mgmt_port, "/api/status")
    return dict(status["loop"])


def held(cluster: Cluster, i: int, queues: int) -> bool:
    return int(http("GET", cluster.brokers[i].mgmt_port, "/api/status")["queues"]) >= queues


def run(
    cluster: Cluster,
    queues: int,
    backlog: dict[str, int],
    *,
    timeout: float = 60.0,
    connections: int = 0,
    note: Callable[[str], None] = lambda _line: None,
) -> ScaleRun:
    """The scenario on a started, unpromoted two-broker ``cluster``; ``note`` is told each
    phase as it ends. From the catch-up to the old primary's return, ``connections`` idle
    connections to the primary and a publisher of confirmed messages through the fail-over
    (:class:`Clients`)."""
    result = ScaleRun(queues)

    def done(name: str) -> None:
        note(f"{name}: {result.phases[name]} s")

    cluster.promote(0, epoch=1)
    backups = range(1, len(cluster.brokers))
    second = tuple(backups[1:])  # the second backup, watched too
    for i in backups:
        cluster.wait_state(i, "ready", timeout=timeout)
    with result.phase("declare", cluster, 0, 1, *second):
        asyncio.run(_declare(cluster.ports[0], queues, backlog))
    done("declare")
    with result.phase("catch-up", cluster, 0, 1, *second):
        for i in backups:
            poll_until(partial(held, cluster, i, queues), timeout, "a backup to hold all queues")
            cluster.wait_state(i, "ready", timeout=timeout)
    done("catch-up")
    clients = Clients(cluster.ports, connections).start(timeout)
    mgmt = cluster.brokers[0].mgmt_port
    with result.phase("management", cluster, 0, 1):
        for path in (
            "/api/status",
            "/api/queues",
            "/api/exchanges",
            "/api/bindings",
            "/api/connections",
            "/api/channels",
            "/api/ha",
            "/metrics",
        ):
            get(mgmt, path)
        one_console_snapshot(mgmt)
    done("management")
    result.loops["primary before the fail-over"] = loop_view(cluster, 0)
    # A second backup is the in-sync set: the new primary's expected backup, guarded on
    # every queue before the new primary serves.
    in_sync = [str(cluster.ha(i)["broker_id"]) for i in backups if i > 1] or None
    with result.phase("promotion", cluster, 1, *second):
        cluster.kill(0)
        cluster.promote(1, epoch=2, in_sync=in_sync)
        cluster.wait_state(1, "active", timeout=timeout)
    done("promotion")
    with result.phase("recovery and catch-up", cluster, 1, 0):
        cluster.brokers[0].start(timeout=timeout)
        cluster.wait_state(0, "ready", timeout=timeout)
    done("recovery and catch-up")
    poll_until(lambda: clients.confirmed_after > 0, timeout, "a confirm from the new primary")
    result.confirmed, result.confirmed_after = clients.stop(), clients.confirmed_after
    result.active_messages = cluster.queue_messages(1, ACTIVE)
    with result.phase("management after", cluster, 1, 0):
        for path in ("/api/queues", "/metrics"):
            get(cluster.brokers[1].mgmt_port, path)
        one_console_snapshot(cluster.brokers[1].mgmt_port)
    done("management after")
    result.loops["new primary"] = loop_view(cluster, 1)
    result.loops["restarted backup"] = loop_view(cluster, 0)
    for i in second:
        result.loops["expected backup"] = loop_view(cluster, i)
    return result
