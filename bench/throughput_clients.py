"""The client processes of bench/throughput.py: one producer and one consumer per queue.

Contract
--------
The parent forks each child with a :class:`ChildSpec` (target :func:`run_producer` or
:func:`run_consumer`); the child runs pika's SelectConnection (callbacks, no threads) until
it is done, stopped (``spec.stop``), past ``spec.deadline`` or orphaned, and always puts
exactly one ``("result", role, idx, dict)`` on ``spec.results`` (after a ``("ready", role,
idx, cpu_s)`` once it can start), with ``"error"`` None or the first failure.

* :class:`Producer` publishes ``count`` bodies of ``size`` bytes starting with
  :data:`HEADER` (producer id, sequence number) once ``go`` is set, keeping at most
  ``window`` unconfirmed, and records each message's publisher-confirm latency; transient
  (delivery_mode 1) unless ``persistent`` (delivery_mode 2).
* :class:`Consumer` consumes with basic.qos ``prefetch`` and manual multiple acks (every
  prefetch/4 messages and every :data:`TICK_S`), and counts every sequence number it sees:
  exactly once, duplicated, or foreign.

Ctrl-C is the parent's business: children ignore SIGINT, and SIGTERM kills them at once.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.synchronize as mp_sync
import os
import signal
import struct
import time
import traceback
from abc import ABC, abstractmethod
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pika
import pika.spec

__all__ = [
    "GRACE_S",
    "HEADER",
    "TICK_S",
    "ChildSpec",
    "Consumer",
    "Msg",
    "Producer",
    "child_signals",
    "run_consumer",
    "run_producer",
]

HEADER = struct.Struct(">IQ")  # producer id, sequence number
TICK_S = 0.05  # consumers' ack flush / stop check period
GRACE_S = 0.2  # consumers linger this long after the last expected message (duplicates)

Msg = tuple[Any, ...]  # what children put on the result queue


def child_signals() -> None:
    """Ctrl-C is the parent's business; SIGTERM (the parent's terminate()) kills at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@dataclass(frozen=True)
class ChildSpec:
    """What the parent gives every child, producer or consumer: its place and its channels."""

    idx: int  # producer i publishes to queue i, which consumer i consumes
    url: str
    queue: str
    results: mp.Queue[Msg]  # ("ready", role, idx, cpu_s), then ("result", role, idx, dict)
    stop: mp_sync.Event  # set by the parent: give up now
    deadline: float  # time.monotonic(), system-wide on Linux


class _Child(ABC):
    """What producers and consumers share: the connection, stop checks, reporting."""

    role = "child"

    def __init__(self, spec: ChildSpec) -> None:
        self.idx = spec.idx
        self.url = spec.url
        self.queue = spec.queue
        self.results = spec.results
        self.stop = spec.stop
        self.deadline = spec.deadline
        self.parent = os.getppid()
        self.conn: Any = None
        self.ch: Any = None
        self.error: str | None = None
        self.closing = False

    def run(self) -> None:
        child_signals()
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

    def _tick(self) -> None:
        """Every TICK_S once started: the side's periodic work, then the stop checks."""
        if self.closing:
            return
        self.on_tick()
        reason = self.should_stop()
        if reason is not None:
            self.finish(self.stop_error(reason))
            return
        self.conn.ioloop.call_later(TICK_S, self._tick)

    def on_tick(self) -> None:
        """Periodic work before the stop checks (none by default)."""

    def stop_error(self, reason: str) -> str | None:
        """The error to finish with when :meth:`should_stop` gives ``reason``."""
        return reason

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

    def __init__(self, spec: ChildSpec, expected: int, prefetch: int) -> None:
        super().__init__(spec)
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

    def on_tick(self) -> None:
        self._flush_acks()

    def stop_error(self, reason: str) -> str | None:
        return None if self.done else reason  # done: only lingering for duplicates

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
        spec: ChildSpec,
        count: int,
        size: int,
        window: int,
        go: mp_sync.Event,
        persistent: bool = False,
    ) -> None:
        super().__init__(spec)
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
        self.props = pika.BasicProperties(delivery_mode=2 if persistent else 1)

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


def run_consumer(*args: Any) -> None:
    """A consumer process's target: ``Consumer(*args).run()``."""
    Consumer(*args).run()


def run_producer(*args: Any) -> None:
    """A producer process's target: ``Producer(*args).run()``."""
    Producer(*args).run()
