"""The scale scenario of issue 25 (item 2), shared by its test
(``tests/ha/test_loop_steps_scale.py``) and its benchmark (``bench/loop_steps_scale.py``).

A primary and a backup (real qpidd processes, a real store each) with ``queues`` durable
queues, half of them bound to a topic exchange, a backlog on a few; then, in order: the
backup's catch-up, ``GET /api/status`` and every management list, ``/metrics`` and a
console viewer (one snapshot of the live feed) on the primary; the primary SIGKILLed and
the backup promoted; the old primary restarted on its store (recovery) and caught up as
the new primary's backup. Each phase's wall time is kept, and each broker's event loop
steps (``GET /api/status``'s ``loop``: :mod:`broker.loop_steps`).
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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


def make_cluster(root: Path) -> Cluster:
    return Cluster(root, 2, "--ha-backup-timeout=30")


async def _declare(port: int, queues: int, backlog: dict[str, int]) -> None:
    client = await connect("127.0.0.1", port, user="guest", password="guest", timeout=30)
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
    note: Callable[[str], None] = lambda _line: None,
) -> ScaleRun:
    """The scenario on a started, unpromoted two-broker ``cluster``; ``note`` is told each
    phase as it ends."""
    result = ScaleRun(queues)

    def done(name: str) -> None:
        note(f"{name}: {result.phases[name]} s")

    cluster.promote(0, epoch=1)
    cluster.wait_state(1, "ready", timeout=timeout)
    with result.phase("declare", cluster, 0, 1):
        asyncio.run(_declare(cluster.ports[0], queues, backlog))
    done("declare")
    with result.phase("catch-up", cluster, 0, 1):
        poll_until(lambda: held(cluster, 1, queues), timeout, "the backup to hold every queue")
        cluster.wait_state(1, "ready", timeout=timeout)
    done("catch-up")
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
    with result.phase("promotion", cluster, 1):
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active", timeout=timeout)
    done("promotion")
    with result.phase("recovery and catch-up", cluster, 1, 0):
        cluster.brokers[0].start(timeout=timeout)
        cluster.wait_state(0, "ready", timeout=timeout)
    done("recovery and catch-up")
    with result.phase("management after", cluster, 1, 0):
        for path in ("/api/queues", "/metrics"):
            get(cluster.brokers[1].mgmt_port, path)
        one_console_snapshot(cluster.brokers[1].mgmt_port)
    done("management after")
    result.loops["new primary"] = loop_view(cluster, 1)
    result.loops["restarted backup"] = loop_view(cluster, 0)
    return result
