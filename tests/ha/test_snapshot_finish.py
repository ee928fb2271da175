"""A snapshot the link left half applied (issue 25 item 2): its rest is applied a slice a
turn of the loop before the link's end is reported, never in one step (10,000 queues: 198
ms), and a promotion requested meanwhile waits for it (never half a snapshot). Also the
bound of a snapshot's slices. Cores and an HA broker in one process: no sockets."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from pathlib import Path
from typing import Any

from broker.amqp.client import Delivery
from broker.core.exchange import Binding, Exchange
from broker.core.message import Message
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.backup import BackupLink
from broker.ha.broker_replicator import MESSAGES_AN_OBJECT, BrokerReplicator
from broker.ha.config_apply import ConfigApplier
from broker.ha.link_format import CODECS
from broker.ha.role_events import CaughtUp, LinkUp
from broker.ha.state import HaState
from tests.ha.test_ha_broker import ha_broker

#: Objects a slice in these tests.
SIZE = 50
QUEUES = 1000


def _snapshot(prefix: str, queues: int) -> dict[str, Any]:
    """``queues`` queues, every other one bound to a topic exchange of its own prefix."""
    return {
        "type": "snapshot",
        "queues": [
            {"name": f"{prefix}{i}", "replicate": "all", "durable": True, "arguments": {}}
            for i in range(queues)
        ],
        "exchanges": [{"name": f"{prefix}-t", "type": "topic", "durable": True, "arguments": {}}],
        "bindings": [
            {"queue": f"{prefix}{i}", "exchange": f"{prefix}-t", "routing_key": f"k.{i}.#"}
            for i in range(0, queues, 2)
        ],
    }


def _delivery(tag: int, event: dict[str, Any]) -> Delivery:
    return Delivery(tag, False, "", "", b"", CODECS[2].encode_config_event(event), "c")


class _Stream:
    """A :class:`ConfigApplier` of ``SIZE`` objects a slice, what it acknowledges and
    reports kept."""

    def __init__(self, replicator: BrokerReplicator) -> None:
        self.replicator = replicator
        self.acked: list[int] = []
        self.applied: list[str] = []
        self.failed: list[str] = []
        self.tasks: list[asyncio.Future[None]] = []
        self.applier = ConfigApplier(
            self.acked.append,
            CODECS[2],
            replicator,
            None,
            spawn=lambda coro: self.tasks.append(asyncio.ensure_future(coro)),
            failed=lambda _event, exc: self.failed.append(str(exc)),
            store_failed=self.failed.append,
            applied=lambda event, _changes: self.applied.append(str(event["type"])),
            size=SIZE,
        )

    @property
    def queues(self) -> int:
        return len(self.replicator.vhosts.default.queues)

    async def half_applied(self) -> None:
        """The snapshot delivered and applied in part (a tenth at most)."""
        self.applier.delivered(_delivery(1, _snapshot("q", QUEUES)))
        while not 0 < self.queues < QUEUES // 10:
            await asyncio.sleep(0)


async def _turns(counts: list[int], queues: Any) -> None:
    """Each turn of the loop, the number of queues then (until cancelled)."""
    while True:
        counts.append(queues())
        await asyncio.sleep(0)


def _most_a_turn(counts: list[int]) -> int:
    return max(b - a for a, b in pairwise(counts))


def test_the_rest_is_applied_a_slice_a_turn_and_nothing_after_it() -> None:
    async def scenario() -> tuple[_Stream, list[int]]:
        stream = _Stream(BrokerReplicator(VirtualHost()))
        await stream.half_applied()
        stream.applier.delivered(_delivery(2, {"type": "queue-deleted", "name": "q7"}))
        counts: list[int] = []
        ticker = asyncio.ensure_future(_turns(counts, lambda: stream.queues))
        # the link's end and a promotion's DropLink at once: they share the rest
        await asyncio.gather(stream.applier.end(), stream.applier.end())
        ticker.cancel()
        stream.applier.delivered(_delivery(3, {"type": "queue-deleted", "name": "q8"}))
        for _ in range(5):
            await asyncio.sleep(0)
        await asyncio.gather(*stream.tasks, return_exceptions=True)
        return stream, counts

    stream, counts = asyncio.run(scenario())
    assert stream.queues == QUEUES and len(stream.replicator.replicators) == QUEUES
    assert len(counts) >= (QUEUES - counts[0]) // SIZE  # turns of the loop, not one step
    assert _most_a_turn(counts) <= SIZE
    # nothing after it: neither acknowledged nor reported, the next events not applied
    assert stream.acked == [] and stream.applied == [] and stream.failed == []
    assert {"q7", "q8"} <= set(stream.replicator.vhosts.default.queues)


def test_the_promotions_drop_link_applies_the_rest_before_it_stops_the_link() -> None:
    """A link up while a promotion was under way (its snapshot half applied when the
    promotion's DropLink comes): :meth:`BackupLink.stop` applies the rest in turns first."""

    async def scenario() -> tuple[_Stream, list[int]]:
        vhost = VirtualHost()
        link = _link(_Owner(), vhost)
        stream = _Stream(link.replicator)
        link._config = stream.applier
        await stream.half_applied()
        counts: list[int] = []
        ticker = asyncio.ensure_future(_turns(counts, lambda: stream.queues))
        await link.stop(abort=True)
        assert stream.queues == QUEUES  # whole once stopped
        ticker.cancel()
        await asyncio.gather(*stream.tasks, return_exceptions=True)
        return stream, counts

    stream, counts = asyncio.run(scenario())
    assert len(counts) >= (QUEUES - counts[0]) // SIZE and _most_a_turn(counts) <= SIZE
    assert stream.applied == [] and stream.failed == []


def test_a_promotion_requested_meanwhile_waits_for_the_rest_and_the_links_end(
    tmp_path: Path,
) -> None:
    """A backup ready before a new primary's link (catch-up again) whose link drops with
    the snapshot half applied: the promotion requested while the rest is applied waits for
    it and for the link's end (ready again), then promotes. Without the wait the role,
    still in catch-up, refused it ("still catching up")."""
    ha, _ = ha_broker(tmp_path)
    ha.handle(LinkUp("primary:5672", 0))
    ha.handle(CaughtUp())  # ready
    ha.handle(LinkUp("primary:5672", 0))  # a new primary's link: catch-up again
    assert ha.state is HaState.CATCHUP

    async def scenario() -> tuple[HaState, int, list[int]]:
        link = _link(ha.backup, ha.vhost)
        ha.backup.link = link
        stream = _Stream(link.replicator)
        link._config = stream.applier
        await stream.half_applied()
        ending = asyncio.ensure_future(link._link_ended("link closed"))
        await asyncio.sleep(0)
        promoted = asyncio.ensure_future(ha.promote())
        turns = 0
        queues_seen: list[int] = []
        while not ending.done():
            assert not promoted.done()
            queues_seen.append(stream.queues)
            turns += 1
            await asyncio.sleep(0)
        await ending
        state = await promoted
        await asyncio.gather(*stream.tasks, return_exceptions=True)
        return state, turns, queues_seen

    state, turns, queues_seen = asyncio.run(scenario())
    assert state in (HaState.RECOVERING, HaState.ACTIVE)
    assert turns >= (QUEUES - queues_seen[0]) // SIZE
    assert _most_a_turn(queues_seen) <= SIZE
    assert len(ha.vhost.queues) == QUEUES


class _Counted:
    """A vhost listener counting what a slice changed: a queue deleted counts its messages
    too (:data:`MESSAGES_AN_OBJECT` an object), as the snapshot's budget does."""

    def __init__(self) -> None:
        self.slices: list[list[int]] = [[]]

    def _one(self, cost: int = 1) -> None:
        self.slices[-1].append(cost)

    def queue_declared(self, queue: Queue) -> None:
        self._one()

    def queue_deleted(self, queue: Queue) -> None:
        self._one(1 + self.backlog.get(queue.name, 0) // MESSAGES_AN_OBJECT)

    def exchange_declared(self, exchange: Exchange) -> None:
        self._one()

    def exchange_deleted(self, exchange: Exchange) -> None:
        self._one()

    def bound(self, binding: Binding) -> None:
        self._one()

    def unbound(self, binding: Binding) -> None:
        self._one()

    backlog: dict[str, int] = {}


def test_a_snapshot_over_other_queues_is_applied_in_bounded_slices() -> None:
    """A snapshot of other queues over a backup's (two of them with backlogs of three
    slices' worth each, side by side): every slice changes at most ``SIZE`` objects' worth
    but for its last object, so the two backlogs never share a slice, and every object
    changed is done in some slice."""
    vhost = VirtualHost()
    replicator = BrokerReplicator(vhost)
    replicator.apply(_snapshot("old", 400))
    backlog = 3 * SIZE * MESSAGES_AN_OBJECT
    for name in ("old0", "old1"):
        for n in range(backlog):
            vhost.publish(vhost.exchange(""), Message("", name, body=b"%d" % n))
    counted = _Counted()
    counted.backlog = {"old0": backlog, "old1": backlog}
    vhost.listeners.append(counted)
    steps = replicator.apply_steps(_snapshot("new", 600), SIZE)
    while True:
        try:
            next(steps)
        except StopIteration:
            break
        counted.slices.append([])
    changed = [costs for costs in counted.slices if costs]
    for costs in changed:
        assert sum(costs) - max(costs) < SIZE
    big = [costs for costs in changed if max(costs) > SIZE]
    assert len(big) == 2  # each backlog in a slice of its own
    # 400 queues and 200 bindings gone (unbound with their queue: not counted), an
    # exchange gone, 600 queues, one exchange and 300 bindings made
    assert sum(len(costs) for costs in changed) == 400 + 1 + 600 + 1 + 300
    assert len(counted.slices) >= (400 + 600 + 300 + 600 + 300) // SIZE
    assert sorted(vhost.queues) == sorted(f"new{i}" for i in range(600))


# -- a link without a connection: its end and its stop, as the broker drives them -------------


class _Owner:
    """A :class:`~broker.ha.backup.LinkOwner` that keeps what the link reports."""

    broker_id = "b1"
    url = "127.0.0.1:1"
    epoch = 0

    def __init__(self) -> None:
        self.downs: list[str] = []

    def link_up(self, address: Any, primary_epoch: int) -> None:
        pass

    def caught_up(self) -> None:
        pass

    def link_down(self, reason: str) -> None:
        self.downs.append(reason)

    def store_failed(self, reason: str) -> None:
        raise AssertionError(reason)

    def check_history(self, primary_epoch: int, base_epoch: int | None, address: str) -> None:
        return None

    def log(self, event: str, **fields: Any) -> None:
        pass

    def member_grant(self, epoch: int, duration: float) -> None:
        pass

    def member_asked(self, epoch: int) -> None:
        pass


def _link(owner: Any, vhost: Any) -> BackupLink:
    return BackupLink(
        owner,
        vhost,
        [],
        user=None,
        password=None,
        mechanism="PLAIN",
        maintenance_interval=1.0,
        heartbeat=1.0,
        flow_messages=100,
    )
