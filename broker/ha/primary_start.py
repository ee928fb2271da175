"""The work a promotion does over every queue before the broker serves as primary.

:meth:`~broker.ha.ha_broker.HaBroker` carries out the role's ``StartPrimary`` with
:func:`start_primary`: the store's new era, the new era's replication ids on every queue,
the cluster's id (its first primary creates it) and the expected backups, guarded on each
queue at its first use (:meth:`~broker.ha.primary.Primary.owe_first_use`: every queue
marked; their guards on every queue before serving were 70-140 ms of CPU at 10,000
queues, issue 25). It is one pass over the queues (:func:`entered_steps`: the era, the mark
and the orphans' candidates, each queue's memory read once), in slices, as many a turn of
the loop as a CPU budget allows (:func:`in_turns`), before the role hears
``PrimaryStarted``: until then the broker is not primary (no client is admitted, its link
is dropped), so nothing is enqueued or delivered on a queue a later slice marks.

The files are written in a thread (a small file's two fsyncs wait for the disk's journal:
28-31 ms each on a busy disk, issue 25), the store's era while the loop makes the era's
ids and the guards, which are in memory only; it is durable before the cluster's id is
written and before :func:`start_primary` returns, so before anything of the new era can
reach the store. The broker's own epoch (``ha-epoch``, the role's
``PersistPromotionEpoch``) was durable before this starts: the order a crash between the
two writes relies on (:mod:`broker.ha.store_lineage`).

THREAD UNSAFE: the broker's event loop runs it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from broker.core.queue import Queue
from broker.ha.cluster_identity import ClusterIdentity
from broker.ha.id_era import enter_era
from broker.ha.primary import Primary
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.store_lineage import StoreLineage
from common.slices import TURN_BUDGET, Steps


async def start_primary(
    vhost: Any,
    expected: dict[str, str],
    *,
    epoch: int,
    lineage: StoreLineage,
    identity: ClusterIdentity,
    replicate_default: ReplicateLevel,
    clock: Callable[[], float],
    auto_delete_grace: float,
    timings: dict[str, float] | None = None,
) -> Primary:
    """The primary's guards, with the ``expected`` backups (id -> url) guarded on every
    replicated queue from its first use on (the role's ``GuardBackup`` then finds them),
    the queues in slices, as many a turn as :data:`~common.slices.TURN_BUDGET` of CPU
    allows (:func:`in_turns`): the era's ids and the guards' marks side by side (each turn
    lets every other ready callback run first: on a loaded machine a turn, not the slice's
    millisecond, is what a promotion waits for). ``timings``: told the
    milliseconds of the work in memory (``in_memory``; the loop thread's CPU meanwhile,
    every other callback's included: ``in_memory_cpu``) and of the wait after it for the
    store's era to be durable (``durable_wait``)."""
    began = time.monotonic()
    cpu0 = time.thread_time()
    # this era is the store's now: written in a thread while the loop works in memory
    written = asyncio.ensure_future(lineage.promoted(epoch))
    auto_delete: list[Queue] = []
    primary = Primary(
        vhost,
        replicate_default=replicate_default,
        clock=clock,
        auto_delete_grace=auto_delete_grace,
        call_soon=loop_call_soon,
        auto_delete=auto_delete,  # found by the pass below, before it serves
    )
    try:
        try:
            await in_turns(
                entered_steps(
                    list(vhost.queues.values()),
                    epoch,  # no id reused
                    # each queue guarded for them at its first use (not all 10,000 now)
                    primary.owe_first_use(expected),
                    auto_delete,
                )
            )
            primary.orphaned(auto_delete)
        finally:
            in_memory = time.monotonic()
            if timings is not None:
                timings["in_memory_cpu"] = round((time.thread_time() - cpu0) * 1000.0, 1)
            await written  # durable (or its EpochError raised) before anything else is written
        if timings is not None:
            timings["in_memory"] = round((in_memory - began) * 1000.0, 1)
            timings["durable_wait"] = round((time.monotonic() - in_memory) * 1000.0, 1)
        await identity.promoted()  # the cluster's first primary creates its id
    except BaseException:
        for backup_id in expected:  # not primary: no queue's first use guards anything
            primary.release(backup_id)
        raise
    return primary


def loop_call_soon() -> Callable[[Callable[[], None]], object] | None:
    """The running loop's ``call_soon`` (for :func:`common.slices.run_in_turns`); None
    outside a loop (a test driving the role)."""
    try:
        return asyncio.get_running_loop().call_soon
    except RuntimeError:
        return None


#: CPU a turn of the loop gives a promotion's slices (:func:`in_turns`; 0: a slice a turn).
PROMOTION_TURN_CPU = TURN_BUDGET


async def in_turns(
    steps: Steps[None], budget: float | None = None, cpu: Callable[[], float] = time.thread_time
) -> None:
    """Run ``steps``: slice after slice while the turn has used less than ``budget`` of the
    loop thread's CPU (``cpu``), then the rest at the next turn of the loop. At 10,000
    queues the era's ids and the guards' marks are 5-6 ms of CPU: one turn, where a turn
    each slice cost the promotion 0.2-0.7 s at load 20-30 (every other ready callback
    first, each time: issue 25); at 100,000, a few turns of about the budget. ``budget``
    None: :data:`PROMOTION_TURN_CPU`."""
    budget = PROMOTION_TURN_CPU if budget is None else budget
    began = cpu()
    for _ in steps:
        if cpu() - began >= budget:
            await asyncio.sleep(0)
            began = cpu()


#: Queues a slice of a promotion's pass (:func:`entered_steps`): few enough that a slice's
#: queues are still in the CPU's cache when the slice looks at them again.
PASS_SLICE = 256


def entered_steps(
    queues: list[Queue],
    epoch: int,
    first_use: Callable[[Queue], None] | None,
    auto_delete: list[Queue],
    size: int = PASS_SLICE,
) -> Steps[None]:
    """A promotion's one pass over ``queues``, ``size`` a slice: each queue's next id from
    the era of ``epoch`` (:func:`~broker.ha.id_era.enter_era`), its first-use hook
    (``first_use``, the expected backups' guards: None, no backup expected), the lease of
    each one with ``x-expires`` restarted, and the auto-delete ones appended to
    ``auto_delete`` (the orphans' candidates). Three walks of 10,000 queues (the era's, the
    guards' marks', the orphans') were 16-20 ms of a promotion's CPU at 10,000 queues,
    mostly the queues' memory read three times (issue 25).

    The lease: a backup never sees a queue used (its consumers and gets were on the old
    primary), so its copy's last use is its declare's; promoted hours later, the first walk
    of the queues deleted every ``x-expires`` queue whose consumers were not back yet,
    messages and all. Its unused time starts at the promotion, as a restarted broker's
    does (a recovered queue's last use is its recovery): its clients get the whole
    ``x-expires`` to come back."""
    for start in range(0, len(queues), size):
        if start:
            yield
        chunk = queues[start : start + size]
        enter_era(chunk, epoch)
        if first_use is not None:
            for queue in chunk:
                queue.before_use = first_use
        for queue in chunk:
            if queue.limits.expires_ms is not None:
                queue.touch()
        auto_delete.extend([queue for queue in chunk if queue.auto_delete])
