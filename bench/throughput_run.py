"""One run of bench/throughput.py: :func:`run_once` at P pairs against one broker.

Contract
--------
:func:`run_once` declares and purges P fresh queues (named ``<prefix>-<P>-<token>-<i>``),
forks P consumers, waits until all consume, forks P producers, waits until all have
selected confirms, then sets ``go`` and collects every child's result; at the end it always
stops and reaps every child (SIGTERM, then SIGKILL) and deletes the queues, counting what
was left in them. Broker-side failures and timeouts never raise: they land in
``RunResult.errors``. Ctrl-C and SIGTERM (as SystemExit) stop everything and propagate.
The CPU figures are read from /proc at ``go`` and once every child has reported
(:mod:`proc_stats`). Runs one at a time: it forks with the "fork" start method.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import signal
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pika
import pika.exceptions
from proc_stats import host_cpu, listener_pid, process_cpu
from throughput_clients import ChildSpec, Msg, run_consumer, run_producer
from throughput_results import RunResult, summarise

__all__ = ["CLIENTS", "RunFailed", "run_once"]

#: The client pairs run_once can run (its ``client``).
CLIENTS = ("pika", "lean")
CHILD_SLACK_S = 30.0  # a child gives up this long after the run's own deadline


class RunFailed(Exception):
    """A run cannot go on: a child failed, exited or timed out (caught by run_once)."""


def _admin(url: str) -> Any:
    params = pika.URLParameters(url)
    params.socket_timeout = 10
    params.blocked_connection_timeout = 30
    return pika.BlockingConnection(params)


def _declare(
    url: str, queues: Sequence[str], durable: bool, arguments: dict[str, Any] | None
) -> None:
    conn = _admin(url)
    try:
        ch = conn.channel()
        for q in queues:
            ch.queue_declare(
                q, durable=durable, exclusive=False, auto_delete=False, arguments=arguments
            )
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
    durable: bool = False,
    persistent: bool = False,
    queue_arguments: dict[str, Any] | None = None,
    client: str = "pika",
) -> RunResult:
    """One run at P=pairs; never raises for broker-side failures (they land in .errors).

    client: ``pika`` (throughput_clients.py's SelectConnection pair) or ``lean``
    (lean_clients.py's 0-9-1 pair: one blocking socket a process, frames built by hand; the
    same queues, bodies, window, prefetch, multiple acks and exactly-once check).

    durable, queue_arguments: how the queues are declared (e.g. {"x-queue-type": "quorum"}
    for RabbitMQ's quorum queues); persistent: the producers publish with delivery_mode 2.

    broker_pid: the broker's PID, for its CPU use; by default whatever listens on the URL's
    port if that is on this machine. extra_pids: more processes whose CPU counts as the
    broker's (an HA primary's backups), so that other% leaves them out.
    """
    if client not in CLIENTS:
        raise ValueError(f"client {client!r} is not one of {', '.join(CLIENTS)}")
    if broker_pid is None:
        broker_pid = listener_pid(url)
    consumer: Any = run_consumer
    producer: Any = run_producer
    consumer_extra: tuple[int, ...] = ()
    if client == "lean":  # imported here: it needs the broker's package (its 1.0 half)
        from lean_clients import run_lean_consumer, run_lean_producer

        consumer, producer, consumer_extra = run_lean_consumer, run_lean_producer, (size,)
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
    # (time, host busy, host steal, this process, brokers, extra_pids): at go, and once all
    # have reported
    cpu0: tuple[float, float, float, float, float | None, float | None] | None = None
    cpu1: tuple[float, float, float, float, float | None, float | None] | None = None

    def extra_cpu() -> float | None:
        total = 0.0
        for pid in extra_pids:
            cpu = process_cpu(pid)
            if cpu is None:
                return None
            total += cpu
        return total

    def brokers_cpu() -> tuple[float | None, float | None]:
        """(all the brokers' CPU seconds, those of extra_pids alone), None if unknown."""
        main, extra = process_cpu(broker_pid), extra_cpu()
        if main is None or extra is None:
            return None, None
        return main + extra, extra

    def cpu_now() -> tuple[float, float, float, float, float | None, float | None]:
        busy, steal = host_cpu()
        return (time.monotonic(), busy, steal, time.process_time(), *brokers_cpu())

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
        _declare(url, queues, durable, queue_arguments)
        declared = True
        with _sigint_ignored():
            for i, q in enumerate(queues):
                spec = ChildSpec(i, url, q, results, stop, child_deadline)
                p = ctx.Process(
                    target=consumer,
                    args=(spec, messages, prefetch, *consumer_extra),
                    name=f"bench-consumer-{i}",
                    daemon=True,
                )
                p.start()
                procs[("consumer", i)] = p
        wait_for("ready", "consumer", deadline)
        with _sigint_ignored():
            for i, q in enumerate(queues):
                spec = ChildSpec(i, url, q, results, stop, child_deadline)
                p = ctx.Process(
                    target=producer,
                    args=(spec, messages, size, window, go, persistent),
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

    summarise(res, got, pairs, messages)
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
                if extra_pids and cpu0[5] is not None and cpu1[5] is not None:
                    res.extra_us_per_msg = (cpu1[5] - cpu0[5]) / res.received * 1e6
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
