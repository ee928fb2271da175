"""What the console's sampler read of the broker, tick after tick: :class:`Samples`.

:Status: Beta

Each tick the sampler (:class:`~broker.management.console.live.LiveFeed`) hands it the
queues (by key) and, on an HA broker, its status (``GET /api/ha``'s body). It keeps:

- per queue, its counters at the last tick, turned into rates (per second) and a history
  of :data:`HISTORY` points (messages, unacked, publish, deliver and ack rates);
- per backup and queue, its lag (messages still to send) over the last :data:`HISTORY`
  ticks (the sparklines);
- per backup, since when it has left batches unacknowledged with nothing acknowledged
  meanwhile (``unacknowledged_for``: a backup that stopped reading, whose lag in messages
  stays in the socket buffers). A batch in flight at each sample of a busy, healthy backup
  is not silence: the primary sends on acknowledgements (its credit), so messages sent
  since the last sample mean something was acknowledged;
- while someone follows the lists, which queues' rows moved since the tick before
  (:attr:`Samples.moved`);
- per connection, its bytes read and written (``recv_oct``, ``send_oct``: a counter the
  shell adds to at each read and write, nothing per message) at the last tick, turned into
  RabbitMQ's ``recv_oct`` and ``send_oct`` rates (bytes per second,
  :meth:`Samples.connection_rates_of`), for ``GET /api/connections`` and the console's
  connections table.

Plain data, no I/O and no clock (time is given).

THREAD UNSAFE: the management app's event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from common.slices import SLICE, Steps

__all__ = ["HISTORY", "ByteCounters", "Samples"]


class ByteCounters(Protocol):
    """What the sampler reads of a connection (either protocol's core)."""

    @property
    def id(self) -> int: ...

    @property
    def recv_oct(self) -> int: ...

    @property
    def send_oct(self) -> int: ...


#: Samples (seconds) of history kept per queue and per backup's queue.
HISTORY = 60
_NO_RATES: Mapping[str, float] = {"recv_oct_rate": 0.0, "send_oct_rate": 0.0}


class _Reading(NamedTuple):
    """What the sampler read of a queue at a tick."""

    enqueued: int
    delivered: int
    acked: int
    messages: int
    unacked: int
    consumers: int
    #: whether the point it added to the history had every rate 0 (the next one the same
    #: while nothing changes: added again, not made again)
    still: bool


def _rate(delta: int, span: float) -> float:
    """Per second over ``span``; never negative (a counter that went down: 0)."""
    return round(max(0, delta) / span, 2)


def _point(
    messages: int, unacked: int, publish: float, deliver: float, ack: float
) -> dict[str, float]:
    return {
        "messages": messages,
        "unacked": unacked,
        "publish": publish,
        "deliver": deliver,
        "ack": ack,
    }


class Samples:
    """See the module docstring."""

    def __init__(self) -> None:
        self.queue_history: dict[str, deque[dict[str, float]]] = {}
        self.lag_history: dict[str, dict[str, deque[int]]] = {}
        #: backup id -> since when it has left batches unacknowledged with nothing
        #: acknowledged meanwhile (see the module docstring).
        self.unacknowledged_since: dict[str, float] = {}
        #: backup id -> messages sent to it in all, at the last sample
        self._sent: dict[str, int] = {}
        #: queue key -> what the sampler read of it last, and when
        self._readings: dict[str, _Reading] = {}
        self._read_at: dict[str, float] = {}
        #: the queues whose rows moved at this tick, and at the tick before
        self.moved: set[str] = set()
        self.moved_before: set[str] = set()
        #: connection id -> (bytes read, bytes written) at the last tick, and when it was
        self._bytes: dict[int, tuple[int, int]] = {}
        self._bytes_at = 0.0
        #: connection id -> its byte rates at the last tick
        self.connection_rates: dict[int, Mapping[str, float]] = {}

    def queues_gone(self, gone: Iterable[str]) -> None:
        """Forget what was read of the queues ``gone``."""
        for name in gone:
            del self.queue_history[name]
            self._readings.pop(name, None)
            self._read_at.pop(name, None)

    def tick(self) -> None:
        """A new tick: the rows moved at the last one become those moved before."""
        self.moved_before, self.moved = self.moved, set()

    def queues(self, now: float, items: list[tuple[str, Any]], following: bool) -> None:
        """Read the queues ``items`` (key, queue) at ``now``; ``following``: note which
        rows moved.

        A queue read as at the tick before (most of 10,000, most of the time) costs six
        reads and no new object: its history gets the point it got then again, once that
        point's rates are 0 (a console sample of 10,000 idle queues made 20,000 objects a
        second, 9 us a queue quiet; the collector walked them)."""
        readings, read_at, histories = self._readings, self._read_at, self.queue_history
        moved = self.moved
        for name, queue in items:
            enqueued, delivered = queue.enqueued_total, queue.delivered_total
            acked, messages = queue.acked_total, queue.message_count
            unacked, consumers = queue.unacked, queue.consumer_count
            before = readings.get(name)
            if (
                before is not None
                and before.messages == messages
                and before.enqueued == enqueued
                and before.delivered == delivered
                and before.acked == acked
                and before.unacked == unacked
                and before.consumers == consumers
            ):
                read_at[name] = now
                points = histories[name]
                if before.still:
                    points.append(points[-1])
                    continue
                point = _point(messages, unacked, 0.0, 0.0, 0.0)
                readings[name] = before._replace(still=True)
            else:
                if before is None:
                    point = _point(messages, unacked, 0.0, 0.0, 0.0)
                else:
                    span = max(now - read_at[name], 1e-3)
                    point = _point(
                        messages,
                        unacked,
                        _rate(enqueued - before.enqueued, span),
                        _rate(delivered - before.delivered, span),
                        _rate(acked - before.acked, span),
                    )
                    if following:  # what moves a queue's row (the rest: every 30 s)
                        moved.add(name)
                read_at[name] = now
                readings[name] = _Reading(
                    enqueued,
                    delivered,
                    acked,
                    messages,
                    unacked,
                    consumers,
                    still=not (point["publish"] or point["deliver"] or point["ack"]),
                )
                if before is None:
                    histories[name] = points = deque(maxlen=HISTORY)
                else:
                    points = histories[name]
            points.append(point)

    def connections(self, now: float, connections: Iterable[ByteCounters]) -> None:
        """Read each connection's byte counters at ``now``: its rates since the tick before
        (0 at its first); the connections gone are forgotten. An idle one (most of 2,000)
        costs no new object: its reading and its rates of 0 are kept as they were."""
        before_read, span = self._bytes, max(now - self._bytes_at, 1e-3)
        read: dict[int, tuple[int, int]] = {}
        rates: dict[int, Mapping[str, float]] = {}
        for connection in connections:
            key, recv, send = connection.id, connection.recv_oct, connection.send_oct
            before = before_read.get(key)
            if before is None:
                read[key], rates[key] = (recv, send), _NO_RATES
            elif before[0] == recv and before[1] == send:
                read[key], rates[key] = before, _NO_RATES
            else:
                read[key] = (recv, send)
                rates[key] = {
                    "recv_oct_rate": round(max(0, recv - before[0]) / span, 1),
                    "send_oct_rate": round(max(0, send - before[1]) / span, 1),
                }
        self._bytes, self._bytes_at, self.connection_rates = read, now, rates

    def connection_rates_of(self, connection_id: int) -> Mapping[str, float]:
        """A connection's byte rates at the last tick (0 before two readings)."""
        return self.connection_rates.get(connection_id) or _NO_RATES

    def backups_steps(self, now: float, ha_status: dict[str, Any] | None) -> Steps[None]:
        """Each backup's queue lags into its histories, :data:`SLICE` rows a slice (two
        backups of 10,000 queues at once: one step of 100-130 ms every second)."""
        seen: set[str] = set()
        for backup in (ha_status or {}).get("backups", []):
            backup_id = str(backup["id"])
            lags = self.lag_history.setdefault(backup_id, {})
            seen.add(backup_id)
            waiting = sent = 0
            for i, row in enumerate(backup.get("queues", []), 1):
                lags.setdefault(str(row["queue"]), deque(maxlen=HISTORY)).append(int(row["lag"]))
                waiting += int(row.get("unacknowledged_batches") or 0)
                sent += int(row.get("sent") or 0)
                if i % SLICE == 0:
                    yield
            progressed = sent != self._sent.get(backup_id, -1)
            self._sent[backup_id] = sent
            if waiting and not progressed:
                self.unacknowledged_since.setdefault(backup_id, now)
            else:
                self.unacknowledged_since.pop(backup_id, None)
        for gone in set(self.lag_history) - seen:
            del self.lag_history[gone]
        for gone in set(self.unacknowledged_since) - seen:
            del self.unacknowledged_since[gone]
        for gone in set(self._sent) - seen:
            del self._sent[gone]

    def history(self, key: str) -> list[dict[str, float]]:
        """A queue's history, oldest first."""
        return list(self.queue_history.get(key, ()))

    def rates(self, key: str) -> dict[str, float]:
        """A queue's rates at the last tick (per second; 0 before any)."""
        samples = self.queue_history.get(key)
        point = samples[-1] if samples else {}
        return {f"{rate}_rate": point.get(rate, 0.0) for rate in ("publish", "deliver", "ack")}

    def lags(self) -> dict[str, dict[str, list[int]]]:
        """Each backup's lag history per queue."""
        return {
            backup: {queue: list(lags) for queue, lags in by_queue.items()}
            for backup, by_queue in self.lag_history.items()
        }

    def unacknowledged_for(self, now: float) -> dict[str, float]:
        """Each backup silent with batches unacknowledged: for how long (seconds)."""
        return {
            backup: round(now - since, 1) for backup, since in self.unacknowledged_since.items()
        }
