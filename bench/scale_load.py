"""The clients of the scale scenario beside the drill (issue 25, item 6), for
``bench/scale_soak.py``: many connections, consumers among them, backlogs, a console viewer.

- :class:`Connections`: ``connections`` AMQP connections on the fail-over list, in a
  process of their own (an asyncio loop; in a network namespace when given one: its sockets
  live there). Not a thread of the soak's: 2,000 clients reconnecting after a fail-over held
  the soak's interpreter lock so long that its sampler's liveness reads of the brokers went
  unanswered within their second, the observer's starvation counted as the brokers'. The
  first ``consumers`` of them each hold a consumer (prefetch 10, acking) on a
  queue of their own; the others are idle. A connection that is refused (a backup, or no
  primary yet) or lost (its broker died) dials the next address of the list after a second
  and a jitter, as clients on a URL list do, and counts a reconnect.
- :func:`publish_backlog`: confirmed persistent messages on some queues, in pipelined
  bursts, before the load (a backlog nobody consumes: the primary holds it, the backups
  replicate it, and a fail-over must keep every message of it).
- :class:`ConsoleViewer`: what a console viewer costs the primary, as an HTTP poller: every
  second ``GET /api/status`` and the queues' first page as the console's table asks it
  (sorted by depth, 100 rows); each answer's time and size, and the failures, are kept.

Numbers, not checks: the soak's JSON reports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from broker.amqp.client import Delivery, connect

__all__ = ["BURST", "Connections", "ConsoleViewer", "publish_backlog"]

#: Connections opened, or messages published, at once.
BURST = 50
#: Content-header properties: delivery-mode 2 (persistent), nothing else.
PERSISTENT = b"\x10\x00\x02"
#: The page of queues a console viewer asks for each second (its table's first page).
QUEUES_PAGE = "/api/queues?page=1&page_size=100&sort=messages&sort_reverse=true"


def _enter(namespace: str | None) -> None:
    if namespace is not None:
        from qpid_ha_cli.nemesis.topology import enter

        enter(namespace)


@dataclass
class ConnectionCounts:
    """What the connections did: open now, opened in all, lost, refused dials."""

    open: int = 0
    opened: int = 0
    lost: int = 0
    refused: int = 0
    deliveries: int = 0
    #: the seconds from the first loss after a fault to every connection open again
    reopened_s: list[float] = field(default_factory=list)


class Connections:
    """``connections`` clients on ``addresses`` (the fail-over list), ``consumers`` of them
    consuming ``queue_of(i)``, in a child process (:class:`ClientsProcess`); :meth:`start`
    returns once all are open, :meth:`stop` ends them and returns what they did."""

    def __init__(
        self,
        addresses: list[tuple[str, int]],
        connections: int,
        consumers: int,
        queue_of: Callable[[int], str],
        namespace: str | None = None,
    ) -> None:
        consumers = min(consumers, connections)
        context = multiprocessing.get_context("spawn")  # nothing of the soak's threads
        self._open: Synchronized[int] = context.Value("q", 0, lock=False)
        self._stop = context.Event()
        self._results, results = context.Pipe(duplex=False)
        self._process = context.Process(
            target=run_clients,
            args=(
                addresses,
                connections,
                [queue_of(i) for i in range(consumers)],
                namespace,
                self._open,
                self._stop,
                results,
            ),
            name="scale-connections",
            daemon=True,
        )
        self.connections = connections
        self.counts = ConnectionCounts()

    def start(self, timeout: float) -> Connections:
        self._process.start()
        deadline = time.monotonic() + timeout
        while self._open.value < self.connections:
            if time.monotonic() > deadline or not self._process.is_alive():
                raise TimeoutError(
                    f"{self._open.value} of {self.connections} connections open in {timeout} s"
                )
            time.sleep(0.2)  # polls the counter the clients' process keeps
        return self

    def stop(self) -> ConnectionCounts:
        self._stop.set()
        if self._results.poll(120):
            with contextlib.suppress(EOFError, OSError):
                self.counts = ConnectionCounts(**self._results.recv())
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        return self.counts


def run_clients(
    addresses: list[tuple[str, int]],
    connections: int,
    queues: Sequence[str],
    namespace: str | None,
    open_now: Synchronized[int],
    stop: Any,
    results: Pipe,
) -> None:
    """The clients' process: :class:`ClientsProcess` until ``stop`` is set, then its
    counts sent on ``results``."""
    _enter(namespace)
    clients = ClientsProcess(addresses, connections, queues, open_now)
    asyncio.run(clients.main(stop))
    results.send(asdict(clients.counts))
    results.close()


class ClientsProcess:
    """The clients themselves, on one asyncio loop: the first ``len(queues)`` of them each
    consume their queue; the open count published in ``open_now`` for the soak."""

    def __init__(
        self,
        addresses: list[tuple[str, int]],
        connections: int,
        queues: Sequence[str],
        open_now: Synchronized[int],
    ) -> None:
        self.addresses = addresses
        self.connections = connections
        self.queues = queues
        self.open_now = open_now
        self.counts = ConnectionCounts()

    def _opened(self, change: int) -> None:
        self.counts.open += change
        self.open_now.value = self.counts.open

    async def main(self, stop: Any) -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        waiter = threading.Thread(
            target=lambda: (stop.wait(), loop.call_soon_threadsafe(stopping.set)),
            name="scale-connections-stop",
            daemon=True,
        )
        waiter.start()
        tasks: list[asyncio.Task[None]] = []
        for first in range(0, self.connections, BURST):
            opened = [
                asyncio.create_task(self._client(i))
                for i in range(first, min(self.connections, first + BURST))
            ]
            tasks += opened
            target = len(tasks)
            while self.counts.open < target and not stopping.is_set():
                await asyncio.sleep(0.05)  # a burst at a time: no storm of handshakes
        watcher = asyncio.create_task(self._watch())
        await stopping.wait()
        watcher.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(watcher, *tasks, return_exceptions=True)

    async def _watch(self) -> None:
        """The time from a first loss to every connection open again, after each fault."""
        lost_at: float | None = None
        while True:
            if self.counts.open < self.connections and lost_at is None:
                lost_at = time.monotonic()
            elif self.counts.open == self.connections and lost_at is not None:
                self.counts.reopened_s.append(round(time.monotonic() - lost_at, 1))
                lost_at = None
            await asyncio.sleep(0.5)

    async def _client(self, i: int) -> None:
        queue = self.queues[i] if i < len(self.queues) else None
        index = i % len(self.addresses)
        while True:
            host, port = self.addresses[index]
            try:
                client = await connect(host, port, user="guest", password="guest", timeout=30)
            except asyncio.CancelledError:
                raise
            except Exception:  # refused (a backup; no primary yet) or unreachable: the next
                self.counts.refused += 1
                index = (index + 1) % len(self.addresses)
                await asyncio.sleep(1.0 + random.random())
                continue
            self._opened(1)
            self.counts.opened += 1
            try:
                if queue is not None:
                    channel = await client.open_channel()
                    await channel.qos(10)

                    def delivered(delivery: Delivery, channel: Any = channel) -> None:
                        self.counts.deliveries += 1
                        channel.ack(delivery.delivery_tag)

                    await channel.consume(queue, delivered)
                await client.wait_closed()
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.close(), 5)
                raise
            except Exception:  # the broker went away mid-way: dial again
                pass
            finally:
                self._opened(-1)
            self.counts.lost += 1
            index = (index + 1) % len(self.addresses)
            await asyncio.sleep(1.0 + random.random())


async def publish_backlog(host: str, port: int, backlog: dict[str, int]) -> int:
    """``backlog[queue]`` confirmed persistent messages on each queue; how many confirmed."""
    client = await connect(host, port, user="guest", password="guest", timeout=60)
    confirmed = 0
    try:
        channel = await client.open_channel()
        await channel.confirm_select()
        for queue, count in backlog.items():
            for first in range(0, count, 20 * BURST):
                burst = range(first, min(count, first + 20 * BURST))
                await asyncio.gather(
                    *(channel.publish("", queue, b"%d" % n, PERSISTENT) for n in burst)
                )
                confirmed += len(burst)
    finally:
        await client.close()
    return confirmed


@dataclass
class Answers:
    """One path's answers: times in ms, sizes in bytes, failures."""

    ms: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    failures: int = 0

    def summary(self) -> dict[str, Any]:
        ms = sorted(self.ms)

        def at(q: float) -> float:
            return round(ms[min(len(ms) - 1, int(q * len(ms)))], 1) if ms else 0.0

        return {
            "answers": len(ms),
            "failures": self.failures,
            "p50_ms": at(0.5),
            "p99_ms": at(0.99),
            "max_ms": round(ms[-1], 1) if ms else 0.0,
            "mean_bytes": round(statistics.fmean(self.sizes)) if self.sizes else 0,
        }


class ConsoleViewer:
    """Every ``interval`` seconds, ``GET /api/status`` and :data:`QUEUES_PAGE` of the
    primary (``primary()``: its node, None when none serves), through ``get(node, path)``
    (the answer's bytes; raises on a failure)."""

    PATHS = ("/api/status", QUEUES_PAGE)

    def __init__(
        self,
        primary: Callable[[], str | None],
        get: Callable[[str, str], bytes],
        interval: float = 1.0,
    ) -> None:
        self.primary = primary
        self.get = get
        self.interval = interval
        self.answers = {path: Answers() for path in self.PATHS}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-viewer", daemon=True)

    def start(self) -> ConsoleViewer:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(60)
        return {path: answers.summary() for path, answers in self.answers.items()}

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            node = self.primary()
            for path in self.PATHS if node is not None else ():
                answers = self.answers[path]
                started = time.monotonic()
                try:
                    body = self.get(node, path)  # type: ignore[arg-type]
                except Exception:  # a fail-over under way, or a loaded broker: counted
                    answers.failures += 1
                    continue
                answers.ms.append((time.monotonic() - started) * 1000)
                answers.sizes.append(len(body))
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))
