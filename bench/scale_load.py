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
import functools
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

from broker.amqp.client import ConnectionFailed, Delivery, connect

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
    #: dials that timed out (30 s) before connection.start came, and after it
    timed_out_before_start: int = 0
    timed_out_after_start: int = 0
    #: dials by the seconds from the dial to connection.start (at most the key's
    #: seconds; "more": later), a dial that timed out after it included
    start_s: dict[str, int] = field(default_factory=dict)


#: The bounds of :attr:`ConnectionCounts.start_s`, in seconds.
START_BOUNDS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0)


def start_bucket(seconds: float) -> str:
    """The key of :attr:`ConnectionCounts.start_s` for a connection.start ``seconds``
    after its dial."""
    for bound in START_BOUNDS:
        if seconds <= bound:
            return f"{bound:g}"
    return "more"


#: Processes the clients are spread over: 2,000 handshakes at once in one process's loop
#: (after a fail-over every client dials again within a second or two) starved that one
#: process on a loaded machine: its clients' 30 s handshake time-outs passed before their
#: own loop read the brokers' answers, and they dialled again, a retry storm of the
#: harness's own (2026-11-30, soak33: the brokers' loops 25 ms late at the median while
#: the clients abandoned 9,000-17,000 handshakes after each primary fault). Clients run on
#: many machines; a few processes here are closer to that.
CLIENT_PROCESSES = 8


class Connections:
    """``connections`` clients on ``addresses`` (the fail-over list), ``consumers`` of them
    consuming ``queue_of(i)``, spread over :data:`CLIENT_PROCESSES` child processes
    (:class:`ClientsProcess`); :meth:`start` returns once all are open, :meth:`stop` ends
    them and returns what they did, with the time from each first loss to every connection
    open again (a thread of this process watches the children's open counts)."""

    def __init__(
        self,
        addresses: list[tuple[str, int]],
        connections: int,
        consumers: int,
        queue_of: Callable[[int], str],
        namespace: str | None = None,
        processes: int = CLIENT_PROCESSES,
    ) -> None:
        consumers = min(consumers, connections)
        context = multiprocessing.get_context("spawn")  # nothing of the soak's threads
        self._stop = context.Event()
        self._opens: list[Synchronized[int]] = []
        self._results: list[Pipe] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        processes = max(1, min(processes, connections))
        for k in range(processes):
            mine = range(k, connections, processes)  # client i: its queue and first address
            open_now: Synchronized[int] = context.Value("q", 0, lock=False)
            receive, send = context.Pipe(duplex=False)
            self._opens.append(open_now)
            self._results.append(receive)
            self._processes.append(
                context.Process(
                    target=run_clients,
                    args=(
                        addresses,
                        list(mine),
                        {i: queue_of(i) for i in mine if i < consumers},
                        namespace,
                        open_now,
                        self._stop,
                        send,
                        max(1, BURST // processes),  # BURST opened at once over them all
                    ),
                    name=f"scale-connections-{k}",
                    daemon=True,
                )
            )
        self.connections = connections
        self.counts = ConnectionCounts()
        self._watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="scale-reopened", daemon=True)

    @property
    def open(self) -> int:
        """Connections open now, over every process."""
        return sum(value.value for value in self._opens)

    def start(self, timeout: float) -> Connections:
        for process in self._processes:
            process.start()
        deadline = time.monotonic() + timeout
        while self.open < self.connections:
            alive = all(process.is_alive() for process in self._processes)
            if time.monotonic() > deadline or not alive:
                raise TimeoutError(
                    f"{self.open} of {self.connections} connections open in {timeout} s"
                )
            time.sleep(0.2)  # polls the counters the clients' processes keep
        self._watcher.start()
        return self

    def stop(self) -> ConnectionCounts:
        self._watching.set()
        self._stop.set()
        total = ConnectionCounts(reopened_s=self.counts.reopened_s)
        for receive in self._results:
            if not receive.poll(120):
                continue
            with contextlib.suppress(EOFError, OSError):
                got = receive.recv()
                for name in (
                    "opened",
                    "lost",
                    "refused",
                    "deliveries",
                    "timed_out_before_start",
                    "timed_out_after_start",
                ):
                    setattr(total, name, getattr(total, name) + got[name])
                for key, count in got["start_s"].items():
                    total.start_s[key] = total.start_s.get(key, 0) + count
        for process in self._processes:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()
        total.open = self.open
        self.counts = total
        return total

    def _watch(self) -> None:
        """The time from a first loss to every connection open again, after each fault."""
        lost_at: float | None = None
        while not self._watching.wait(0.5):
            open_now = self.open
            if open_now < self.connections and lost_at is None:
                lost_at = time.monotonic()
            elif open_now == self.connections and lost_at is not None:
                self.counts.reopened_s.append(round(time.monotonic() - lost_at, 1))
                lost_at = None


def _started(started: list[float], _properties: dict[str, Any]) -> None:
    """connection.start came: when (``ClientsProcess``'s counts)."""
    started.append(time.monotonic())


def run_clients(
    addresses: list[tuple[str, int]],
    clients: list[int],
    queues: dict[int, str],
    namespace: str | None,
    open_now: Synchronized[int],
    stop: Any,
    results: Pipe,
    burst: int = BURST,
) -> None:
    """A clients' process: :class:`ClientsProcess` until ``stop`` is set, then its counts
    sent on ``results``."""
    _enter(namespace)
    process = ClientsProcess(addresses, clients, queues, open_now, burst)
    asyncio.run(process.main(stop))
    results.send(asdict(process.counts))
    results.close()


class ClientsProcess:
    """Some of the clients (``clients``: their numbers), on one asyncio loop: those in
    ``queues`` each consume their queue; the open count published in ``open_now``; at the
    start ``burst`` dialled at a time."""

    def __init__(
        self,
        addresses: list[tuple[str, int]],
        clients: Sequence[int],
        queues: dict[int, str],
        open_now: Synchronized[int],
        burst: int = BURST,
    ) -> None:
        self.addresses = addresses
        self.burst = burst
        self.clients = clients
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
        burst = self.burst
        for first in range(0, len(self.clients), burst):
            opened = [
                asyncio.create_task(self._client(i)) for i in self.clients[first : first + burst]
            ]
            tasks += opened
            target = len(tasks)
            while self.counts.open < target and not stopping.is_set():
                await asyncio.sleep(0.05)  # a burst at a time: no storm of handshakes
        await stopping.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _dial_ended(self, dialled: float, started: list[float], failure: Exception | None) -> None:
        """Count where a dial's time went: to connection.start, and a time-out before or
        after it (the broker's ``handshake_abandoned`` lines tell its side)."""
        counts = self.counts
        if started:
            key = start_bucket(started[0] - dialled)
            counts.start_s[key] = counts.start_s.get(key, 0) + 1
        if isinstance(failure, ConnectionFailed) and "no open connection within" in str(failure):
            if started:
                counts.timed_out_after_start += 1
            else:
                counts.timed_out_before_start += 1

    async def _client(self, i: int) -> None:
        queue = self.queues.get(i)
        index = i % len(self.addresses)
        while True:
            host, port = self.addresses[index]
            dialled = time.monotonic()
            started: list[float] = []
            try:
                client = await connect(
                    host,
                    port,
                    user="guest",
                    password="guest",
                    timeout=30,
                    on_start=functools.partial(_started, started),
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # refused (a backup; no primary yet), unreachable: the next
                self._dial_ended(dialled, started, exc)
                self.counts.refused += 1
                index = (index + 1) % len(self.addresses)
                await asyncio.sleep(1.0 + random.random())
                continue
            self._dial_ended(dialled, started, None)
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
