#!/usr/bin/env python3
"""End-to-end throughput and publisher-confirm latency of an AMQP 0-9-1 broker.

For each P in --pairs: P queues, P consumer processes and P producer processes. Producer i
publishes --messages messages of --size bytes to queue i through the default exchange with
publisher confirms, keeping at most --window unconfirmed; consumer i consumes queue i with
basic.qos prefetch --prefetch and manual acks (multiple=True every prefetch/4 messages and on
a 50 ms timer). Every body starts with (producer id, sequence number); consumers verify that
every message arrives exactly once.

Reported per P: end-to-end msgs/s (messages received / time from the first publish to the
last receipt), publisher-confirm latency p50/p99 in ms (publish call to the confirm that
covers it, every message covered by a multiple ack counted), missing and duplicate counts.
Exits 1 if any message was missing, duplicated, nacked or left behind, or a run failed.
Also reported: the broker's CPU microseconds per message (for a broker on this machine, found
by its listening port) and `other%`, the CPU that unrelated processes used meanwhile in % of
one core: on shared cores, runs with a high other% are slowed by someone else's work.

Both sides use pika's SelectConnection (callbacks, no threads): the same client is run
against RabbitMQ and qpidd. Examples:

    .venv/bin/python bench/throughput.py --url amqp://guest:guest@127.0.0.1:5672/%2F
    .venv/bin/python bench/throughput.py --pairs 1,4,16 --repeat 3 --json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import multiprocessing.synchronize as mp_sync
import os
import queue as queue_mod
import signal
import statistics
import struct
import sys
import time
import traceback
import uuid
from abc import ABC, abstractmethod
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import pika
import pika.exceptions
import pika.spec

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
# With --messages unset, each run moves this many messages in total (split evenly among the
# P producers), which takes ~5-10 s per run on the reference machine (2 shared cores).
DEFAULT_TOTAL_MESSAGES = 160_000
MIN_MESSAGES_PER_PRODUCER = 1_000

HEADER = struct.Struct(">IQ")  # producer id, sequence number
TICK_S = 0.05  # consumers' ack flush / stop check period
GRACE_S = 0.2  # consumers linger this long after the last expected message (duplicates)
CHILD_SLACK_S = 30.0  # a child gives up this long after the run's own deadline

Msg = tuple[Any, ...]  # what children put on the result queue


# --------------------------------------------------------------------------------------------
# Child processes
# --------------------------------------------------------------------------------------------


def _child_signals() -> None:
    """Ctrl-C is the parent's business; SIGTERM (the parent's terminate()) kills at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class _Child(ABC):
    """What producers and consumers share: the connection, stop checks, reporting."""

    role = "child"

    def __init__(
        self,
        idx: int,
        url: str,
        queue: str,
        results: mp.Queue[Msg],
        stop: mp_sync.Event,
        deadline: float,
    ) -> None:
        self.idx = idx
        self.url = url
        self.queue = queue
        self.results = results
        self.stop = stop
        self.deadline = deadline  # time.monotonic(), system-wide on Linux
        self.parent = os.getppid()
        self.conn: Any = None
        self.ch: Any = None
        self.error: str | None = None
        self.closing = False

    def run(self) -> None:
        _child_signals()
        try:
            self.conn = pika.SelectConnection(
                pika.URLParameters(self.url),
                on_open_callback=self._on_conn_open,
                on_open_error_callback=self._on_conn_open_error,
                on_close_callback=self._on_conn_closed,
            )
            self.conn.ioloop.start()
        except BaseException:
            self.error = self.error or traceback.format_exc()
        # Always a result, partial on failure, with the error (if any) in it.
        res = self.result()
        res["error"] = self.error
        res["stopped"] = self.stop.is_set()
        if res["stopped"]:
            # The parent may not be reading any more (ctrl-C): send something that fits in the
            # pipe buffer, so that this process can exit at once.
            res.pop("latency", None)
        self.results.put(("result", self.role, self.idx, res))

    @abstractmethod
    def result(self) -> dict[str, Any]:
        """What this side measured, for the parent."""

    @abstractmethod
    def on_channel_open(self) -> None:
        """Start producing or consuming."""

    def _on_conn_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, ch: Any) -> None:
        self.ch = ch
        ch.add_on_close_callback(self._on_channel_closed)
        self.on_channel_open()

    def _on_conn_open_error(self, _conn: Any, exc: BaseException) -> None:
        self.error = f"connection failed: {exc!r}"
        self.conn.ioloop.stop()

    def _on_conn_closed(self, _conn: Any, reason: BaseException) -> None:
        if not self.closing and self.error is None:
            self.error = f"connection closed by broker: {reason!r}"
        self.conn.ioloop.stop()

    def _on_channel_closed(self, _ch: Any, reason: BaseException) -> None:
        if not self.closing and self.error is None:
            self.error = f"channel closed: {reason!r}"
        if self.conn.is_open:
            self.closing = True
            self.conn.close()

    def finish(self, error: str | None = None) -> None:
        """Close the connection; the ioloop stops when it has closed."""
        if self.closing:
            return
        if error is not None and self.error is None:
            self.error = error
        self.closing = True
        if self.conn.is_open:
            self.conn.close()
        else:
            self.conn.ioloop.stop()

    def should_stop(self) -> str | None:
        if self.stop.is_set():
            return "stopped by parent (run timed out or failed)"
        if time.monotonic() > self.deadline:
            return "child deadline passed"
        if os.getppid() != self.parent:
            return "parent died"
        return None


class Consumer(_Child):
    role = "consumer"

    def __init__(
        self,
        idx: int,
        url: str,
        queue: str,
        results: mp.Queue[Msg],
        stop: mp_sync.Event,
        deadline: float,
        expected: int,
        prefetch: int,
    ) -> None:
        super().__init__(idx, url, queue, results, stop, deadline)
        self.expected = expected
        self.prefetch = prefetch
        self.ack_every = max(1, prefetch // 4) if prefetch > 0 else 64
        self.seen = bytearray(expected)
        self.distinct = 0
        self.received = 0
        self.duplicates = 0
        self.foreign = 0  # wrong producer id, bad sequence number or short body
        self.unacked = 0
        self.last_tag = 0
        self.first_ts = 0.0
        self.last_ts = 0.0
        self.done = False

    def on_channel_open(self) -> None:
        self.ch.basic_qos(prefetch_count=self.prefetch, callback=self._on_qos_ok)

    def _on_qos_ok(self, _frame: Any) -> None:
        self.ch.basic_consume(
            self.queue, self._on_message, auto_ack=False, callback=self._on_consume_ok
        )

    def _on_consume_ok(self, _frame: Any) -> None:
        self.results.put(("ready", self.role, self.idx, time.process_time()))
        self.conn.ioloop.call_later(TICK_S, self._tick)

    def _on_message(self, ch: Any, method: Any, _props: Any, body: bytes) -> None:
        now = time.monotonic()
        if self.received == 0:
            self.first_ts = now
        self.last_ts = now
        self.received += 1
        try:
            pid, seq = HEADER.unpack_from(body)
        except struct.error:
            pid, seq = -1, -1
        if pid != self.idx or not 0 <= seq < self.expected:
            self.foreign += 1
        elif self.seen[seq]:
            self.duplicates += 1
        else:
            self.seen[seq] = 1
            self.distinct += 1
        self.last_tag = method.delivery_tag
        self.unacked += 1
        if self.unacked >= self.ack_every:
            ch.basic_ack(self.last_tag, multiple=True)
            self.unacked = 0
        if self.distinct == self.expected and not self.done:
            self.done = True
            self._flush_acks()
            self.conn.ioloop.call_later(GRACE_S, self.finish)

    def _flush_acks(self) -> None:
        if self.unacked and self.ch.is_open:
            self.ch.basic_ack(self.last_tag, multiple=True)
            self.unacked = 0

    def _tick(self) -> None:
        if self.closing:
            return
        self._flush_acks()
        reason = self.should_stop()
        if reason is not None:
            self.finish(None if self.done else reason)
            return
        self.conn.ioloop.call_later(TICK_S, self._tick)

    def result(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "distinct": self.distinct,
            "missing": self.expected - self.distinct,
            "duplicates": self.duplicates,
            "foreign": self.foreign,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "cpu_s": time.process_time(),
        }


class Producer(_Child):
    role = "producer"

    def __init__(
        self,
        idx: int,
        url: str,
        queue: str,
        results: mp.Queue[Msg],
        stop: mp_sync.Event,
        deadline: float,
        count: int,
        size: int,
        window: int,
        go: mp_sync.Event,
    ) -> None:
        super().__init__(idx, url, queue, results, stop, deadline)
        self.count = count
        self.window = window
        self.go = go
        self.pad = b"\0" * max(0, size - HEADER.size)
        self.published = 0
        self.outstanding = 0
        self.acked = 0
        self.nacked = 0
        self.low = 1  # lowest delivery tag not yet confirmed
        self.confirmed = bytearray(count + 2)  # by delivery tag (1-based)
        self.pub_ts = array("d", bytes(8 * (count + 2)))  # by delivery tag
        self.latency = array("d")  # seconds, one per confirmed message
        self.first_ts = 0.0
        self.last_confirm_ts = 0.0
        self.props = pika.BasicProperties(delivery_mode=1)

    def on_channel_open(self) -> None:
        self.ch.confirm_delivery(self._on_confirm, callback=self._on_select_ok)

    def _on_select_ok(self, _frame: Any) -> None:
        self.results.put(("ready", self.role, self.idx, time.process_time()))
        self._wait_for_go()

    def _wait_for_go(self) -> None:
        if self.closing:
            return
        if self.go.is_set():
            self.first_ts = time.monotonic()
            self._pump()
            self.conn.ioloop.call_later(TICK_S, self._tick)
            return
        reason = self.should_stop()
        if reason is not None:
            self.finish(reason)
            return
        self.conn.ioloop.call_later(0.002, self._wait_for_go)

    def _pump(self) -> None:
        """Publish until `window` are unconfirmed or all are published."""
        n = min(self.window - self.outstanding, self.count - self.published)
        if n <= 0:
            return
        publish = self.ch.basic_publish
        queue = self.queue
        pad = self.pad
        props = self.props
        pack = HEADER.pack
        pub_ts = self.pub_ts
        clock = time.monotonic
        idx = self.idx
        seq = self.published
        for seq in range(self.published, self.published + n):
            pub_ts[seq + 1] = clock()
            publish("", queue, pack(idx, seq) + pad, props)
        self.published = seq + 1
        self.outstanding += n

    def _on_confirm(self, frame: Any) -> None:
        now = time.monotonic()
        method = frame.method
        tag = method.delivery_tag
        ack = isinstance(method, pika.spec.Basic.Ack)
        if tag == 0 and method.multiple:
            tag = self.published  # "everything outstanding"
        if tag > self.published or tag < 0:
            self.finish(f"confirm for unknown delivery tag {tag} (published {self.published})")
            return
        if method.multiple:
            tags: Sequence[int] = range(self.low, tag + 1)
        else:
            tags = (tag,)
        confirmed = self.confirmed
        pub_ts = self.pub_ts
        latency = self.latency
        n = 0
        for t in tags:
            if not confirmed[t]:
                confirmed[t] = 1
                latency.append(now - pub_ts[t])
                n += 1
        while self.low <= self.published and confirmed[self.low]:
            self.low += 1
        self.outstanding -= n
        if ack:
            self.acked += n
        else:
            self.nacked += n
        self.last_confirm_ts = now
        if self.acked + self.nacked >= self.count:
            self.finish()
            return
        self._pump()

    def _tick(self) -> None:
        if self.closing:
            return
        reason = self.should_stop()
        if reason is not None:
            self.finish(reason)
            return
        self.conn.ioloop.call_later(TICK_S, self._tick)

    def result(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "acked": self.acked,
            "nacked": self.nacked,
            "first_ts": self.first_ts,
            "last_confirm_ts": self.last_confirm_ts,
            "latency": self.latency,
            "cpu_s": time.process_time(),
        }


def _run_consumer(*args: Any) -> None:
    Consumer(*args).run()


def _run_producer(*args: Any) -> None:
    Producer(*args).run()


# --------------------------------------------------------------------------------------------
# Parent: one run
# --------------------------------------------------------------------------------------------


_TICK = float(os.sysconf("SC_CLK_TCK"))


def host_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return (0.0, 0.0)
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return ((user + nice + system + irq + softirq) / _TICK, steal / _TICK)


def process_cpu(pid: int | None) -> float | None:
    """User + system CPU seconds used by process `pid` (all its threads), None if unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def listener_pid(url: str) -> int | None:
    """The PID of the process listening on the URL's TCP port on this machine, if any.

    Lets a run report the broker's own CPU use (and, by difference, other processes' CPU
    on a shared machine) without being told the broker's PID. None for remote hosts or
    when /proc cannot tell (not root and not our process).
    """
    try:
        params = pika.URLParameters(url)
        host, port = params.host, int(params.port)
    except Exception:
        return None
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    local, state, inode = cols[1], cols[3], cols[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{inode}]")
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    if not inodes:
        return None
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


@dataclass
class RunResult:
    label: str
    pairs: int
    messages: int  # expected in total
    received: int = 0
    seconds: float = 0.0
    msgs_per_s: float = 0.0
    confirm_p50_ms: float = 0.0
    confirm_p99_ms: float = 0.0
    confirm_max_ms: float = 0.0
    confirms: int = 0
    missing: int = 0
    duplicates: int = 0
    foreign: int = 0
    nacked: int = 0
    left_in_queues: int = 0
    producer_cpu_s: float = 0.0  # CPU seconds used by all producer processes together
    consumer_cpu_s: float = 0.0
    # Over the measured window (go to the last child's result), on this machine:
    window_s: float = 0.0
    clients_cpu_s: float = 0.0  # producers + consumers + this process
    broker_cpu_s: float | None = None  # None: broker PID unknown (remote or not found)
    # (with extra_pids, e.g. an HA primary's backups: all of them together)
    other_cpu_s: float | None = None  # everything else: other people's work on shared cores
    steal_s: float = 0.0  # taken by the hypervisor
    broker_us_per_msg: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.errors
            or self.missing
            or self.duplicates
            or self.foreign
            or self.nacked
            or self.left_in_queues
        )


class RunFailed(Exception):
    pass


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sequence."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil
    return sorted_values[int(rank) - 1]


def _admin(url: str) -> Any:
    params = pika.URLParameters(url)
    params.socket_timeout = 10
    params.blocked_connection_timeout = 30
    return pika.BlockingConnection(params)


def _declare(url: str, queues: Sequence[str]) -> None:
    conn = _admin(url)
    try:
        ch = conn.channel()
        for q in queues:
            ch.queue_declare(q, durable=False, exclusive=False, auto_delete=False)
            ch.queue_purge(q)
    finally:
        conn.close()


def _delete(url: str, queues: Sequence[str]) -> int:
    """Delete the queues; return how many messages were still in them."""
    left = 0
    conn = _admin(url)
    try:
        for q in queues:
            ch = conn.channel()
            try:
                ok = ch.queue_declare(q, passive=True)
                left += ok.method.message_count
                ch.queue_delete(q)
                ch.close()
            except pika.exceptions.ChannelClosedByBroker:
                pass  # already gone
    finally:
        if conn.is_open:
            conn.close()
    return left


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Children forked inside inherit SIG_IGN for SIGINT, with no window before they set it."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def run_once(
    url: str,
    pairs: int,
    messages: int,
    size: int,
    window: int,
    prefetch: int,
    queue_prefix: str,
    timeout: float,
    label: str = "",
    broker_pid: int | None = None,
    extra_pids: Sequence[int] = (),
) -> RunResult:
    """One run at P=pairs; never raises for broker-side failures (they land in .errors).

    broker_pid: the broker's PID, for its CPU use; by default whatever listens on the URL's
    port if that is on this machine. extra_pids: more processes whose CPU counts as the
    broker's (an HA primary's backups), so that other% leaves them out.
    """
    if broker_pid is None:
        broker_pid = listener_pid(url)
    ctx = mp.get_context("fork")
    token = uuid.uuid4().hex[:8]
    queues = [f"{queue_prefix}-{pairs}-{token}-{i}" for i in range(pairs)]
    res = RunResult(label=label, pairs=pairs, messages=pairs * messages)
    results: mp.Queue[Msg] = ctx.Queue()
    stop = ctx.Event()
    go = ctx.Event()
    start = time.monotonic()
    deadline = start + timeout
    child_deadline = deadline + CHILD_SLACK_S
    procs: dict[tuple[str, int], mp.process.BaseProcess] = {}
    got: dict[tuple[str, int], dict[str, Any]] = {}
    declared = False
    interrupted = False
    ready_cpu: dict[tuple[str, int], float] = {}
    # (time, host busy, host steal, this process, broker): at go, and once all have reported
    cpu0: tuple[float, float, float, float, float | None] | None = None
    cpu1: tuple[float, float, float, float, float | None] | None = None

    def brokers_cpu() -> float | None:
        total = process_cpu(broker_pid)
        for pid in extra_pids:
            cpu = process_cpu(pid)
            if total is None or cpu is None:
                return None
            total += cpu
        return total

    def cpu_now() -> tuple[float, float, float, float, float | None]:
        busy, steal = host_cpu()
        return (time.monotonic(), busy, steal, time.process_time(), brokers_cpu())

    def wait_for(kind: str, role: str, until: float) -> None:
        """Collect messages until every `role` child has sent `kind` (ready or result)."""
        want = {k for k in procs if k[0] == role}
        have = {k for k in want if k in got}  # results can arrive while waiting for others
        while have != want:
            left = until - time.monotonic()
            if left <= 0:
                missing = sorted(i for r, i in want - have)
                what = "get ready" if kind == "ready" else "finish"
                raise RunFailed(
                    f"run timed out ({timeout:g} s) waiting for {role}s {missing} to {what}"
                )
            try:
                msg = results.get(timeout=min(left, 0.2))
            except queue_mod.Empty:
                for key, p in procs.items():
                    if key in want - have and not p.is_alive() and key not in got:
                        # It may have reported just before exiting: drain once more.
                        try:
                            msg = results.get(timeout=0.5)
                        except queue_mod.Empty:
                            raise RunFailed(
                                f"{key[0]} {key[1]} exited with code {p.exitcode}"
                            ) from None
                        break
                else:
                    continue
            tag, role_, idx = msg[0], msg[1], msg[2]
            if tag == "ready":
                ready_cpu[(role_, idx)] = msg[3]
            if tag == "result":
                got[(role_, idx)] = msg[3]
                if msg[3]["error"]:
                    raise RunFailed(f"{role_} {idx}: {msg[3]['error'].strip()}")
            if role_ == role and (tag == kind or tag == "result"):
                have.add((role_, idx))

    try:
        _declare(url, queues)
        declared = True
        with _sigint_ignored():
            for i, q in enumerate(queues):
                p = ctx.Process(
                    target=_run_consumer,
                    args=(i, url, q, results, stop, child_deadline, messages, prefetch),
                    name=f"bench-consumer-{i}",
                    daemon=True,
                )
                p.start()
                procs[("consumer", i)] = p
        wait_for("ready", "consumer", deadline)
        with _sigint_ignored():
            for i, q in enumerate(queues):
                p = ctx.Process(
                    target=_run_producer,
                    args=(i, url, q, results, stop, child_deadline, messages, size, window, go),
                    name=f"bench-producer-{i}",
                    daemon=True,
                )
                p.start()
                procs[("producer", i)] = p
        wait_for("ready", "producer", deadline)
        cpu0 = cpu_now()
        go.set()
        wait_for("result", "producer", deadline)
        wait_for("result", "consumer", deadline)
        cpu1 = cpu_now()
    except RunFailed as exc:
        res.errors.append(str(exc))
    except Exception as exc:  # broker refused a declare, connection refused, ...
        res.errors.append(f"{type(exc).__name__}: {exc!r}")
    except BaseException:  # ctrl-C, SIGTERM: stop everything, read nothing more
        interrupted = True
        raise
    finally:
        stop.set()
        _reap(procs, None if interrupted else results, got)
        results.close()
        results.cancel_join_thread()
        if declared:
            try:
                res.left_in_queues = _delete(url, queues)
            except Exception as exc:
                res.errors.append(f"deleting queues: {type(exc).__name__}: {exc!r}")
        # Errors that were not the first (or were only a consequence of stopping) go on record
        # once, for a post-mortem: "stopped by parent" ones are not interesting.
        for (role, idx), r in sorted(got.items()):
            err = r.get("error")
            if err and not r.get("stopped"):
                line = f"{role} {idx}: {err.strip()}"
                if line not in res.errors:
                    res.errors.append(line)

    _summarise(res, got, pairs, messages)
    if cpu0 is not None and cpu1 is not None:
        res.window_s = cpu1[0] - cpu0[0]
        res.steal_s = cpu1[2] - cpu0[2]
        clients = cpu1[3] - cpu0[3]
        for key, r in got.items():
            clients += r["cpu_s"] - ready_cpu.get(key, 0.0)
        res.clients_cpu_s = clients
        if cpu0[4] is not None and cpu1[4] is not None:
            res.broker_cpu_s = cpu1[4] - cpu0[4]
            res.other_cpu_s = max(0.0, (cpu1[1] - cpu0[1]) - clients - res.broker_cpu_s)
            if res.received:
                res.broker_us_per_msg = res.broker_cpu_s / res.received * 1e6
    return res


def _reap(
    procs: dict[tuple[str, int], mp.process.BaseProcess],
    results: mp.Queue[Msg] | None,
    got: dict[tuple[str, int], dict[str, Any]],
) -> None:
    """Let children close cleanly and report, then terminate and finally kill stragglers.

    A child's result can be larger than a pipe buffer, and a child does not exit before its
    queue feeder thread has written everything: so keep reading `results` while waiting
    (unless None, after an interrupt). Once a child has been terminated, the pipe may hold a
    half-written message, so nothing more is read after that.
    """
    until = time.monotonic() + 5.0
    while any(p.is_alive() for p in procs.values()) and time.monotonic() < until:
        if results is None:
            time.sleep(0.01)
            continue
        try:
            msg = results.get(timeout=0.05)
        except queue_mod.Empty:
            continue
        if msg[0] == "result":
            got[(msg[1], msg[2])] = msg[3]
    if results is not None and not any(p.is_alive() for p in procs.values()):
        while True:  # all exited: whatever is in the pipe is complete
            try:
                msg = results.get(timeout=0.05)
            except (queue_mod.Empty, OSError, ValueError):
                break
            if msg[0] == "result":
                got[(msg[1], msg[2])] = msg[3]
    for p in procs.values():
        if p.is_alive():
            p.terminate()
    for p in procs.values():
        p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join(1.0)


def _summarise(
    res: RunResult, got: dict[tuple[str, int], dict[str, Any]], pairs: int, messages: int
) -> None:
    lat = array("d")
    first = []
    last = []
    for i in range(pairs):
        pr = got.get(("producer", i))
        co = got.get(("consumer", i))
        if pr is not None:
            lat.extend(pr.get("latency", ()))
            res.nacked += pr["nacked"]
            res.producer_cpu_s += pr["cpu_s"]
            if pr["first_ts"]:
                first.append(pr["first_ts"])
            if pr["published"] != messages and not res.errors:
                res.errors.append(f"producer {i} published {pr['published']} of {messages}")
        if co is not None:
            res.received += co["received"]
            res.missing += co["missing"]
            res.duplicates += co["duplicates"]
            res.foreign += co["foreign"]
            res.consumer_cpu_s += co["cpu_s"]
            if co["received"]:
                last.append(co["last_ts"])
        else:
            res.missing += messages  # unknown: count as lost
    if first and last:
        res.seconds = max(last) - min(first)
        res.msgs_per_s = res.received / res.seconds if res.seconds > 0 else 0.0
    srt = sorted(lat)
    res.confirms = len(srt)
    if srt:
        res.confirm_p50_ms = percentile(srt, 50) * 1e3
        res.confirm_p99_ms = percentile(srt, 99) * 1e3
        res.confirm_max_ms = srt[-1] * 1e3


# --------------------------------------------------------------------------------------------
# Reporting and command line
# --------------------------------------------------------------------------------------------


def median_of(runs: Sequence[RunResult]) -> RunResult:
    """A RunResult whose figures are the medians of `runs` (counts are summed)."""
    first = runs[0]
    med = RunResult(label=first.label, pairs=first.pairs, messages=first.messages)
    for name in (
        "seconds",
        "msgs_per_s",
        "confirm_p50_ms",
        "confirm_p99_ms",
        "confirm_max_ms",
        "producer_cpu_s",
        "consumer_cpu_s",
        "window_s",
        "clients_cpu_s",
        "steal_s",
    ):
        setattr(med, name, statistics.median(getattr(r, name) for r in runs))
    for name in ("broker_cpu_s", "other_cpu_s", "broker_us_per_msg"):
        known = [v for v in (getattr(r, name) for r in runs) if v is not None]
        setattr(med, name, statistics.median(known) if known else None)
    for name in ("received", "confirms", "missing", "duplicates", "foreign", "nacked"):
        setattr(med, name, sum(getattr(r, name) for r in runs))
    med.left_in_queues = sum(r.left_in_queues for r in runs)
    med.errors = [e for r in runs for e in r.errors]
    return med


HEAD = (
    f"{'target':<10} {'P':>3} {'run':>4} {'msgs':>8} {'secs':>6} {'msgs/s':>9} "
    f"{'p50 ms':>8} {'p99 ms':>8} {'missing':>7} {'dup':>5} {'brk us/m':>8} {'other%':>6} status"
)
# brk us/m: broker CPU microseconds per message received (PID found from the listening port;
#           bench/ha_compare.py counts a primary's backups in).
# other%:   CPU used meanwhile by processes that are neither the broker nor this benchmark, in %
#           of one core: other people's work on shared cores; compare runs only when it is low.


def row(r: RunResult, run: str) -> str:
    status = "ok" if r.ok else "FAIL"
    if r.nacked or r.foreign or r.left_in_queues:
        status += f" (nacked={r.nacked} foreign={r.foreign} left={r.left_in_queues})"
    return (
        f"{r.label or '-':<10.10} {r.pairs:>3} {run:>4} {r.received:>8} {r.seconds:>6.2f} "
        f"{r.msgs_per_s:>9.0f} {r.confirm_p50_ms:>8.2f} {r.confirm_p99_ms:>8.2f} "
        f"{r.missing:>7} {r.duplicates:>5} {_opt(r.broker_us_per_msg, 8, 1)} "
        f"{_opt(_other_pct(r), 6, 0)} {status}"
    )


def _opt(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def _other_pct(r: RunResult) -> float | None:
    if r.other_cpu_s is None or r.window_s <= 0:
        return None
    return r.other_cpu_s / r.window_s * 100


def as_json(r: RunResult, run: str, args: argparse.Namespace) -> str:
    d = asdict(r)
    d.update(
        run=run,
        ok=r.ok,
        size=args.size,
        window=args.window,
        prefetch=args.prefetch,
        messages_per_producer=r.messages // max(1, r.pairs),
    )
    return json.dumps(d, sort_keys=True)


def parse_pairs(text: str) -> list[int]:
    try:
        pairs = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}") from None
    if not pairs or any(p < 1 for p in pairs):
        raise argparse.ArgumentTypeError(f"pairs must be positive integers: {text!r}")
    return pairs


def messages_for(args: argparse.Namespace, pairs: int) -> int:
    if args.messages is not None:
        return int(args.messages)
    return max(MIN_MESSAGES_PER_PRODUCER, int(args.total_messages) // pairs)


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pairs", type=parse_pairs, default=[1, 4, 16], help="e.g. 1,4,16")
    ap.add_argument(
        "--messages",
        type=int,
        default=None,
        help="messages per producer (default: --total-messages / P, at least "
        f"{MIN_MESSAGES_PER_PRODUCER})",
    )
    ap.add_argument(
        "--total-messages",
        type=int,
        default=DEFAULT_TOTAL_MESSAGES,
        help="messages per run when --messages is not given (default %(default)s)",
    )
    ap.add_argument("--size", type=int, default=1024, help=f"body bytes (min {HEADER.size})")
    ap.add_argument("--window", type=int, default=256, help="max unconfirmed per producer")
    ap.add_argument("--prefetch", type=int, default=256, help="basic.qos prefetch per consumer")
    ap.add_argument("--queue-prefix", default="bench")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each P (medians reported)")
    ap.add_argument("--json", action="store_true", help="also print JSON lines")


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.size < HEADER.size:
        ap.error(f"--size must be at least {HEADER.size}")
    if args.window < 1 or args.prefetch < 0 or args.repeat < 1 or args.timeout <= 0:
        ap.error("--window, --repeat and --timeout must be positive, --prefetch >= 0")
    if args.messages is not None and args.messages < 1:
        ap.error("--messages must be positive")


def term_to_exit(_signum: int, _frame: Any) -> None:
    raise SystemExit(143)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", default=DEFAULT_URL, help="AMQP URL (default %(default)s)")
    ap.add_argument("--label", default="", help="name printed in the target column")
    add_common_args(ap)
    args = ap.parse_args(argv)
    check_args(ap, args)
    signal.signal(signal.SIGTERM, term_to_exit)

    print(HEAD, flush=True)
    all_ok = True
    summary: list[RunResult] = []
    try:
        for pairs in args.pairs:
            n = messages_for(args, pairs)
            runs = []
            for k in range(args.repeat):
                r = run_once(
                    args.url,
                    pairs,
                    n,
                    args.size,
                    args.window,
                    args.prefetch,
                    args.queue_prefix,
                    args.timeout,
                    label=args.label,
                )
                runs.append(r)
                all_ok &= r.ok
                print(row(r, str(k + 1)), flush=True)
                for e in r.errors:
                    print(f"    error: {e}", file=sys.stderr, flush=True)
                if args.json:
                    print(as_json(r, str(k + 1), args), flush=True)
            if args.repeat > 1:
                med = median_of(runs)
                summary.append(med)
                print(row(med, "med"), flush=True)
                if args.json:
                    print(as_json(med, "median", args), flush=True)
            else:
                summary.append(runs[0])
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if len(summary) > 1 or args.repeat > 1:
        print()
        print(HEAD)
        for r in summary:
            print(row(r, "med" if args.repeat > 1 else "1"))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
