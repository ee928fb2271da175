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
from typing import Any, Protocol

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
        self._counters: dict[str, tuple[float, int, int, int]] = {}
        #: queue key -> what the sampler read of it last (while the lists are followed)
        self._signatures: dict[str, tuple[Any, ...]] = {}
        #: the queues whose rows moved at this tick, and at the tick before
        self.moved: set[str] = set()
        self.moved_before: set[str] = set()
        #: connection id -> (time, bytes read, bytes written) at the last tick
        self._bytes: dict[int, tuple[float, int, int]] = {}
        #: connection id -> its byte rates at the last tick
        self.connection_rates: dict[int, dict[str, float]] = {}

    def queues_gone(self, keys: set[str]) -> None:
        """Forget what was read of the queues not among ``keys`` (those there now)."""
        # by set operations (10,000 look-ups by key took milliseconds)
        for name in self.queue_history.keys() - keys:
            del self.queue_history[name]
            self._counters.pop(name, None)
            self._signatures.pop(name, None)

    def tick(self) -> None:
        """A new tick: the rows moved at the last one become those moved before."""
        self.moved_before, self.moved = self.moved, set()

    def not_followed(self) -> None:
        """Nobody follows the lists: what moved their rows is read afresh next time."""
        self._signatures.clear()

    def queues(self, now: float, items: list[tuple[str, Any]], following: bool) -> None:
        """Read the queues ``items`` (key, queue) at ``now``; ``following``: note which
        rows moved."""
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
            if following:  # what moves a queue's row (the rest: every 30 s, FULL_EVERY)
                signature = (
                    counters[1:],
                    point["messages"],
                    point["unacked"],
                    queue.consumer_count,
                )
                read_before = self._signatures.get(name)
                if read_before != signature:
                    self._signatures[name] = signature
                    if read_before is not None:  # a first reading: its row is built anyway
                        self.moved.add(name)

    def connections(self, now: float, connections: Iterable[ByteCounters]) -> None:
        """Read each connection's byte counters at ``now``: its rates since the tick before
        (0 at its first); the connections gone are forgotten."""
        read: dict[int, tuple[float, int, int]] = {}
        rates: dict[int, dict[str, float]] = {}
        for connection in connections:
            counters = (now, connection.recv_oct, connection.send_oct)
            before = self._bytes.get(connection.id, counters)
            span = max(now - before[0], 1e-3)
            read[connection.id] = counters
            rates[connection.id] = {
                "recv_oct_rate": round(max(0, counters[1] - before[1]) / span, 1),
                "send_oct_rate": round(max(0, counters[2] - before[2]) / span, 1),
            }
        self._bytes, self.connection_rates = read, rates

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
