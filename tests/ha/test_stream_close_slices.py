"""A backup's link closing with thousands of queue streams (issue 25, "no long stalls"):
each stream stops in the step that closed the link (nothing its queue does afterwards has an
effect on it) and leaves its queue's observers later, a slice a turn of the loop (10,000
queues left in the link's closing step made a step of 141 ms: docs/reliability.md)."""

from __future__ import annotations

import asyncio

from pamqp import commands

from broker.core.confirms import PublisherConfirms
from broker.core.queue import Queue
from broker.ha.primary_start import loop_call_soon
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.streams import PrimaryStreams, QueueStream
from common.slices import SliceQueue
from tests.amqp.helpers import open_client
from tests.ha.test_primary import publish
from tests.ha.test_streams import BACKUP_PROPS, primary_context

#: Queue streams on the link, and streams leaving their queues a turn (SLICE, 500, in the
#: broker: a smaller slice keeps the test short).
QUEUES = 250
SIZE = 100


def streamed(queue: Queue) -> bool:
    """A stream or its subscription still hears ``queue``."""
    return any(isinstance(o, QueueStream | ReplicatingSubscription) for o in queue.observers)


def test_a_links_streams_stop_at_once_and_leave_their_queues_a_slice_a_turn() -> None:
    ctx, _ = primary_context()
    streams = ctx.streams
    assert isinstance(streams, PrimaryStreams)
    streams.detaching = SliceQueue(loop_call_soon, size=SIZE)
    names = [f"s{i}" for i in range(QUEUES)]
    for name in names:
        ctx.vhost.declare_queue(name)
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    for channel, name in enumerate(names, start=2):
        backup.send(channel, commands.Channel.Open())
        backup.send(channel, commands.Basic.Consume(queue=f"qpid.ha-queue:{name}"))
    backup.take()
    queues = [ctx.vhost.queues[name] for name in names]
    opened = {s.subscription.queue.name: s for s in streams.queue_streams["b1"]}
    assert sorted(opened) == sorted(names) and all(map(streamed, queues))
    first = opened["s0"]
    # streams leaving their queues at each turn after the link's closing step
    per_turn: list[int] = []

    async def close_link() -> int:
        backup.conn.connection_lost()  # the link's end, in one step of the loop
        left_in_the_step = QUEUES - sum(map(streamed, queues))
        # stopped though still an observer: what the queue does now is nothing to them
        publish(ctx.vhost, "s0", PublisherConfirms())
        assert first.closed and first.subscription.closed
        assert first.subscription.backlog == 0 and not first.subscription.has_work
        remaining = sum(map(streamed, queues))
        while remaining:
            await asyncio.sleep(0)
            now = sum(map(streamed, queues))
            per_turn.append(remaining - now)
            remaining = now
        return left_in_the_step

    assert asyncio.run(close_link()) == 0  # none left its queue in the closing step
    assert all(s.closed for s in opened.values())
    assert streams.queue_stream_of == {} and streams.positions("b1") == []
    assert max(per_turn) <= SIZE and sum(per_turn) == QUEUES
    assert len([n for n in per_turn if n]) >= QUEUES // SIZE  # 3 turns at least
    assert not any(map(streamed, queues))
    assert len(streams.detaching) == 0


def test_without_a_loop_a_closed_stream_leaves_its_queue_at_once() -> None:
    """A core driven without a loop (the replication model, sans-I/O tests): as before."""
    ctx, _ = primary_context()
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-queue:q"))
    backup.take()
    queue = ctx.vhost.queues["q"]
    assert streamed(queue)
    backup.conn.connection_lost()
    assert not streamed(queue)
