"""A backup catches up on the queues with the most recent traffic first (issue 25).

A new link (a new primary) subscribes every queue again, a few dozen at a time; in the
order the backup made its queues, the queue a client declared after 10,000 idle ones came
last, and the new primary's confirms on it waited for this backup (in the in-sync set)
for the whole catch-up: 30 s in the scale soak (docs/ha-design.md, "Who a confirm waits
for")."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from broker.core.vhost import VirtualHost
from broker.ha.broker_replicator import BrokerReplicator, ConfigChanges
from broker.ha.link_format import codec_of
from broker.ha.queue_replicator import BatchAcks, CatchUpGc, QueueReplicator, catch_up_order
from broker.ha.queue_subscriptions import QueueSubscriptions


def replicators(count: int) -> dict[str, QueueReplicator]:
    vhost = VirtualHost()
    return {f"q{i}": QueueReplicator(vhost.declare_queue(f"q{i}")) for i in range(count)}


@given(st.lists(st.integers(0, 9), max_size=30))
@example([])  # nothing heard: the order they were made
@example([9, 0, 9])  # heard again: the latest counts
def test_the_most_recent_traffic_first_then_the_order_they_were_made(heard: list[int]) -> None:
    made = replicators(10)
    for i in heard:
        made[f"q{i}"].heard()
    order = catch_up_order(made)
    busy = list(dict.fromkeys(reversed([f"q{i}" for i in heard])))  # the latest first
    assert order == busy + [k for k in made if k not in busy]


def test_a_new_links_snapshot_subscribes_the_busy_queues_first() -> None:
    """The link's first snapshot, through QueueSubscriptions: the queue last declared but
    busy before the new link is the first subscribed, the idle ones after it in order."""
    replicator = BrokerReplicator(VirtualHost())
    replicator.replicators.update(replicators(1000))
    busy = replicator.replicators["q999"]
    busy.caught_up = True  # on the old link
    busy.heard()
    spawned: list[Any] = []

    def spawn(coroutine: Any) -> None:
        spawned.append(coroutine)
        coroutine.close()  # not run: the order waiting is what is looked at

    subscriptions = QueueSubscriptions(
        None,  # type: ignore[arg-type]  # nothing is subscribed here
        replicator,
        codec_of(4),
        credit=8,
        disk=None,
        batch_acks=BatchAcks(None, lambda reason: None),
        gc=CatchUpGc(),
        spawn=spawn,
        failed=lambda what, reason: None,
        log=lambda *args, **fields: None,
        caught_up=lambda: None,
    )
    subscriptions.config_applied({"type": "snapshot"}, ConfigChanges())
    waiting = list(subscriptions._to_subscribe.names)
    assert waiting[:3] == ["q999", "q0", "q1"] and len(waiting) == 1000
    assert spawned  # its subscribers were started (each takes the next name in turn)
    assert not busy.caught_up  # every queue catches up again on a new link
