"""The console's Overview (RabbitMQ's first page): the broker's totals, message rates and
node figures, sampled with the live state each second.

:class:`Overview` keeps the last totals to give rates (messages published, delivered and
acknowledged per second, over every vhost). Node figures, RabbitMQ's: resident memory and
its high watermark, free disk space of the data directory and its limit (from the
resource alarms' last samples, :mod:`broker.core.alarms`: no read of its own), the
alarms raised, file descriptors used and their limit (``/proc/self/fd``, cheap: one
directory listing), sockets (the AMQP connections of both protocols), uptime, the
listeners. Only this broker's: each member's console shows its own.
"""

from __future__ import annotations

import os
import resource
from collections import deque
from typing import Any

from broker.management.managed import ManagedBroker, vhosts_of
from common.slices import SLICE, Steps, run_steps

__all__ = ["MIN_INTERVAL", "RANGES", "Overview", "Series"]

#: The Overview's time ranges (RabbitMQ's "last minute", "last hour", "last day"): a
#: point every PERIOD seconds, the last POINTS of them.
RANGES = {"1m": (1.0, 60), "1h": (60.0, 60), "1d": (600.0, 144)}

#: Rates are over at least this many seconds (the sampler's tick is 1 s).
MIN_INTERVAL = 0.5


def _fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc (not Linux)
        return None


def _fd_limit() -> int | None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


class Series:
    """One range's points: each at least ``period`` s after the one before, with the queued
    messages then and the rates averaged since the point before (so a day's points count
    every message, not a sample of them)."""

    def __init__(self, period: float, points: int) -> None:
        self.period = period
        self.points: deque[dict[str, float]] = deque(maxlen=points)
        self._last: tuple[float, dict[str, int]] | None = None

    def sample(self, now: float, gauges: dict[str, int], counters: dict[str, int]) -> None:
        """``now``: seconds since 1970 (the live state's clock)."""
        last = self._last
        # a tick a little early (the sampler's second jitters) still makes the point
        if last is not None and now - last[0] < self.period - min(0.5, self.period * 0.05):
            return
        self._last = (now, counters)
        took = None if last is None else now - last[0]
        point: dict[str, float] = {"at": round(now, 1), **gauges}
        for name, value in counters.items():
            before = None if last is None else last[1].get(name, 0)
            rate = 0.0 if took is None or before is None else max(0, value - before) / took
            point[f"{name}_rate"] = round(rate, 2)
        self.points.append(point)


class Overview:
    """The totals, rates and node figures of one broker (see the module docstring)."""

    def __init__(self, broker: ManagedBroker) -> None:
        self.broker = broker
        self._last: tuple[float, dict[str, int]] | None = None
        self._rates_shown = {"published_rate": 0.0, "delivered_rate": 0.0, "acked_rate": 0.0}
        #: The Overview's charts over each of :data:`RANGES` (``GET /api/console/history``).
        self.series = {name: Series(*shape) for name, shape in RANGES.items()}

    def _rates(self, now: float, counters: dict[str, int]) -> dict[str, float]:
        """Per second since the last sample at least :data:`MIN_INTERVAL` s ago (a viewer's
        snapshot between two ticks keeps the last rates)."""
        last = self._last
        if last is not None and now - last[0] < MIN_INTERVAL:
            return self._rates_shown
        self._last = (now, counters)
        if last is None:
            return self._rates_shown
        took = now - last[0]
        self._rates_shown = {
            f"{name}_rate": round(max(0, value - last[1].get(name, 0)) / took, 1)
            for name, value in counters.items()
        }
        return self._rates_shown

    def history(self, range_: str) -> list[dict[str, float]]:
        """The points of one of :data:`RANGES`, oldest first."""
        return list(self.series[range_].points)

    def sample(self, now: float) -> dict[str, Any]:
        """:meth:`sample_steps`, all at once (a test, a caller that does not wait)."""
        return run_steps(self.sample_steps(now))

    def sample_steps(self, now: float) -> Steps[dict[str, Any]]:
        """The Overview at ``now``, :data:`~common.slices.SLICE` queues or connections a
        slice (10,000 queues took one step of about 134 ms of CPU on a loaded machine): the
        sets of queues and connections are the ones when the first slice runs, each is read
        when its slice runs, and the series and rates are updated in the last."""
        broker = self.broker
        vhosts = list(vhosts_of(broker))
        queues = [q for v in vhosts for q in v.queues.values()]
        connections = list(broker.context.connections.values())  # with channels: 0-9-1's
        sockets = len(connections) + len(broker.context.connections_1_0)
        published = sum(int(getattr(v, "published_total", 0)) for v in vhosts)
        delivered = acked = ready = unacked = consumers = channels = 0
        for start in range(0, len(queues), SLICE):
            yield
            for q in queues[start : start + SLICE]:
                delivered += q.delivered_total
                acked += q.acked_total
                ready += q.message_count
                unacked += q.unacked
                consumers += q.consumer_count
        for start in range(0, len(connections), SLICE):
            yield
            channels += sum(len(c.channels) for c in connections[start : start + SLICE])
        counters = {"published": published, "delivered": delivered, "acked": acked}
        gauges = {"messages_ready": ready, "messages_unacked": unacked}
        for series in self.series.values():
            series.sample(now, gauges, counters)
        alarms = getattr(getattr(broker, "resources", None), "alarms", None)
        raised = getattr(alarms, "raised", ())  # RabbitMQ's "memory", "disk" alarms
        options = broker.options
        listeners = [{"protocol": "amqp", "port": broker.amqp_port}]
        if getattr(options, "ssl_cert_file", None):
            listeners.append({"protocol": "amqp/ssl", "port": getattr(options, "ssl_port", None)})
        listeners.append({"protocol": "http", "port": broker.mgmt_port})
        return {
            "totals": {
                "messages_ready": ready,
                "messages_unacked": unacked,
                "queues": len(queues),
                "exchanges": sum(len(v.exchanges) for v in vhosts),
                "connections": sockets,  # of both protocols, as GET /api/connections
                "channels": channels,
                "consumers": consumers,
                "vhosts": len(vhosts),
            },
            "rates": self._rates(now, counters),
            "node": {
                "name": options.node_name,
                "uptime": round(max(0.0, now - broker.started_at), 1),
                "memory_used": getattr(alarms, "memory_used", None),
                "memory_limit": getattr(alarms, "memory_limit", None) or None,
                "disk_free": getattr(alarms, "disk_free", None),
                "disk_free_limit": getattr(alarms, "disk_free_limit", None) or None,
                "alarms": sorted(str(getattr(r, "value", r)) for r in raised),
                "fd_used": _fds(),
                "fd_total": _fd_limit(),
                "sockets_used": sockets,
                "listeners": listeners,
            },
        }
