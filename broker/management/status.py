"""The overview endpoints: ``GET /api/status`` and ``GET /metrics``.

Both are read-only and served without credentials even with authentication on (health
checks and scrapers: :data:`broker.management.auth.OPEN_PATHS`). ``/api/status`` is a
one-object summary of the broker; ``/metrics`` is the Prometheus text that
:func:`broker.management.metrics.render_slices` renders (a slice a turn of the event
loop), given its content type here. Without a login ``/metrics`` holds the aggregates
only, no queue name (RabbitMQ's default); with one
(:data:`broker.management.auth.LOGIN_SHOWS_MORE`), with authentication off or with
``--metrics-per-queue`` the per-queue series too.
"""

from __future__ import annotations

import asyncio
import os
import time

from aiohttp import web

from broker import __version__
from broker.loop_steps import LoopSteps
from broker.management.auth import current_user
from broker.management.managed import ManagedBroker, vhosts_of
from broker.management.metrics import CONTENT_TYPE, render_slices
from broker.management.responses import json_response


class StatusEndpoints:
    """The status and metrics handlers, bound to one broker."""

    def __init__(self, broker: ManagedBroker) -> None:
        self.broker = broker

    async def status(self, request: web.Request) -> web.Response:
        broker = self.broker
        ctx = broker.context
        return json_response(
            {
                "node": broker.options.node_name,
                "version": __version__,
                "pid": os.getpid(),
                "uptime": round(max(0.0, time.time() - broker.started_at), 3),
                "ha_state": broker.ha_state,
                "store_status": broker.store_status,
                "store_id": broker.store_id,
                "amqp_port": broker.amqp_port,
                "connections": len(ctx.connections) + len(ctx.connections_1_0),
                "queues": len(vhosts_of(broker).queues),
                "exchanges": sum(len(v.exchanges) for v in vhosts_of(broker)),
                "vhosts": len(vhosts_of(broker)),
                "loop": _loop(broker),
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        # Queue names only to a login (RabbitMQ's default): anyone may scrape the aggregates.
        options = self.broker.options
        per_queue = not options.auth or options.metrics_per_queue or current_user.get() is not None
        parts: list[bytes] = []
        # one slice a turn: the loop serves between
        for text in render_slices(self.broker, per_queue=per_queue):
            parts.append(text.encode("utf-8"))
            await asyncio.sleep(0)
        return web.Response(body=b"".join(parts), headers={"Content-Type": CONTENT_TYPE})


def _loop(broker: ManagedBroker) -> dict[str, object] | None:
    """The event loop's steps (:meth:`broker.loop_steps.LoopSteps.view`: the longest since
    the start with where it was, the last long ones), None where they are not measured."""
    steps = getattr(getattr(broker, "liveness", None), "steps", None)
    return steps.view(time.monotonic()) if isinstance(steps, LoopSteps) else None
