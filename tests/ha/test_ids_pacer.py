"""A new link's big queues take their reconnect handshake's id sets in different loop
steps (broker/ha/queue_subscriptions.py ``IdsPacer``): the scale soak's ten backlog
queues of 50,000 messages each took theirs in one step of 145 ms of CPU on a backup.
A real uvloop loop with a tick every 10 ms, as the broker's step watch; a step is what
runs between two ticks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import uvloop

from broker.ha.id_set import IdSet
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.queue_subscriptions import IdsPacer


@dataclass
class FakeQueue:
    message_count: int


@dataclass
class FakeReplicator:
    queue: FakeQueue
    taken_at_tick: list[int] = field(default_factory=list)
    ticks: list[int] = field(default_factory=lambda: [0])

    def ids(self) -> IdSet:
        self.taken_at_tick.append(self.ticks[0])
        return IdSet.from_ascending(list(range(1, min(self.queue.message_count, 100) + 1)))


def test_big_queues_id_sets_in_different_steps_small_ones_at_once() -> None:
    ticks = [0]

    async def main() -> tuple[list[FakeReplicator], list[FakeReplicator]]:
        loop = asyncio.get_running_loop()
        stop = False

        def tick() -> None:  # the step watch's tick
            ticks[0] += 1
            if not stop:
                loop.call_later(0.01, tick)

        tick()
        pacer = IdsPacer()
        big = [FakeReplicator(FakeQueue(50_000), ticks=ticks) for _ in range(10)]
        small = [FakeReplicator(FakeQueue(100), ticks=ticks) for _ in range(20)]
        everyone = [*big, *small]
        await asyncio.gather(*(pacer.ids(cast(QueueReplicator, r)) for r in everyone))
        stop = True
        return big, small

    big, small = uvloop.run(main())
    big_ticks = [r.taken_at_tick[0] for r in big]
    assert len(set(big_ticks)) == len(big_ticks), big_ticks  # one big id set a step
    assert all(len(r.taken_at_tick) == 1 for r in [*big, *small])
    first = min(big_ticks)
    assert all(r.taken_at_tick[0] <= first for r in small)  # small ones never wait


def test_a_big_queue_alone_does_not_wait() -> None:
    async def main() -> Any:
        loop = asyncio.get_running_loop()
        began = loop.time()
        await IdsPacer().ids(cast(QueueReplicator, FakeReplicator(FakeQueue(50_000))))
        return loop.time() - began

    assert uvloop.run(main()) < 0.011
