"""A new link subscribes its busy queues before it applies the first snapshot (issue 25).

Applying the configuration snapshot of 10,000 queues took a member 4-5 s of a fail-over
on a loaded machine, and the new primary's confirms on the busy queues waited for the
member's streams of them, which were opened only after it (docs/benchmarks.md). The
queues busy before the fail-over exist on the member already: the snapshot keeps them as
they are, so their streams are subscribed as soon as the snapshot is decoded. A queue the
snapshot replaces (another queue of the name on the primary) or deletes is not: it is
subscribed after the snapshot, as every other. Cores only, no sockets."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.amqp.client import ConnectionFailed
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.ha.broker_replicator import BrokerReplicator
from broker.ha.config_objects import queue_config, snapshot_head, snapshot_steps
from broker.ha.link_format import codec_of
from broker.ha.queue_replicator import BatchAcks, CatchUpGc
from broker.ha.queue_subscriptions import QueueSubscriptions
from broker.ha.replicate_level import ReplicateLevel
from common.slices import SLICE, run_steps


def backup_with(names: list[str]) -> tuple[BrokerReplicator, VirtualHost]:
    """A backup that replicated ``names`` from its old primary (a snapshot of a primary's
    vhost applied), and that primary's vhost."""
    primary = VirtualHost()
    for name in names:
        primary.declare_queue(name, durable=True)
    replicator = BrokerReplicator(VirtualHost())
    replicator.apply(snapshot_of(primary))
    return replicator, primary


def snapshot_of(vhost: VirtualHost) -> dict[str, Any]:
    return {
        "type": "snapshot",
        "queues": [queue_config(q, ReplicateLevel.ALL) for q in vhost.queues.values()],
        "exchanges": [],
        "bindings": [],
    }


def subscriptions_of(replicator: BrokerReplicator) -> tuple[QueueSubscriptions, list[str]]:
    """The link's subscriptions (no client: the queues waiting to be subscribed are looked
    at, their subscribers never run), and the list of caught-up reports."""
    reports: list[str] = []

    def spawn(coroutine: Any) -> None:
        coroutine.close()

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
        caught_up=lambda: reports.append("caught up"),
    )
    return subscriptions, reports


def test_busy_queues_kept_by_the_snapshot_are_subscribed_before_it_is_applied() -> None:
    names = [f"q{i}" for i in range(1000)]
    replicator, primary = backup_with(names)
    for name in ("q900", "q500"):  # busy on the old link, q500 the latest
        replicator.replicators[name].caught_up = True
        replicator.replicators[name].heard()
    subscriptions, reports = subscriptions_of(replicator)
    snapshot = snapshot_of(primary)  # the new primary has the same queues

    subscriptions.config_decoded(snapshot)  # decoded, not applied yet
    assert list(subscriptions._to_subscribe.names) == ["q500", "q900"]
    assert not replicator.replicators["q500"].caught_up  # caught up again on this link

    replicator.replicators["q500"].caught_up = True  # its stream reported ready meanwhile
    subscriptions._waiting.discard("q500")
    subscriptions.config_applied(snapshot, replicator.apply(snapshot))
    waiting = list(subscriptions._to_subscribe.names)
    assert waiting[:3] == ["q500", "q900", "q0"]  # subscribed once each, the rest after
    assert len(waiting) == len(set(waiting)) == 1000
    assert replicator.replicators["q500"].caught_up  # not reset: its stream is open
    assert not replicator.replicators["q0"].caught_up
    assert "q500" not in subscriptions._waiting and "q900" in subscriptions._waiting
    assert reports == []  # the other queues are still to catch up


def test_a_queue_the_snapshot_replaces_or_deletes_waits_for_it() -> None:
    """On the new primary q1 is another queue of the name (deleted and declared again),
    q2 is declared with other arguments, q3 is gone: none is subscribed before the
    snapshot is applied; q1 and q2 are after it, on their new replicators."""
    replicator, primary = backup_with(["q0", "q1", "q2", "q3"])
    for name in ("q0", "q1", "q2", "q3"):
        replicator.replicators[name].heard()
    primary.delete_queue("q1")
    primary.declare_queue("q1", durable=True)
    primary.delete_queue("q2")
    primary.declare_queue("q2", durable=True, arguments={"x-max-length": 5})
    primary.delete_queue("q3")
    old = dict(replicator.replicators)
    subscriptions, _ = subscriptions_of(replicator)
    snapshot = snapshot_of(primary)

    subscriptions.config_decoded(snapshot)
    assert list(subscriptions._to_subscribe.names) == ["q0"]

    subscriptions.config_applied(snapshot, replicator.apply(snapshot))
    assert replicator.replicators["q0"] is old["q0"]
    for name in ("q1", "q2"):
        assert replicator.replicators[name] is not old[name]  # replaced
    assert "q3" not in replicator.replicators
    assert sorted(subscriptions._to_subscribe.names) == ["q0", "q1", "q2"]
    assert subscriptions._waiting == {"q0", "q1", "q2"}


def test_kept_by_snapshot_names_only_queues_it_leaves_untouched() -> None:
    replicator, primary = backup_with(["a", "b", "c"])
    primary.delete_queue("c")
    snapshot = snapshot_of(primary)
    snapshot["queues"][1]["replicate"] = "configuration"  # b: no longer streamed
    kept = replicator.kept_by_snapshot(snapshot, ["a", "b", "c", "unknown"])
    assert kept == {"a": replicator.replicators["a"]}
    assert replicator.kept_by_snapshot(snapshot, []) == {}


def test_only_a_links_first_snapshot_subscribes_early_and_only_heard_queues() -> None:
    replicator, primary = backup_with(["idle", "busy"])
    replicator.replicators["busy"].heard()
    subscriptions, reports = subscriptions_of(replicator)
    subscriptions.config_decoded({"type": "membership", "members": []})
    assert not subscriptions._to_subscribe.names  # not a snapshot
    snapshot = snapshot_of(primary)
    subscriptions.config_decoded(snapshot)
    assert list(subscriptions._to_subscribe.names) == ["busy"]  # never heard: after
    subscriptions.config_applied(snapshot, replicator.apply(snapshot))
    subscriptions.config_decoded(snapshot)  # a later snapshot: applied, then subscribed
    assert list(subscriptions._to_subscribe.names) == ["busy", "idle"]
    for name in ("busy", "idle"):
        replicator.replicators[name].caught_up = True
        subscriptions._waiting.discard(name)
    subscriptions._check_caught_up()
    assert reports == ["caught up"]


class RefusingClient:
    """A link's client whose primary refuses every channel (the queue's stream cannot be
    opened now): the part of AmqpClient a subscription uses first."""

    is_closed = False

    async def open_channel(self) -> None:
        raise ConnectionFailed("refused")


class ClosedClient(RefusingClient):
    """A link's client whose connection has ended (the link is going down)."""

    is_closed = True


def test_a_busy_queue_whose_early_subscription_failed_is_subscribed_after_the_snapshot() -> None:
    replicator, primary = backup_with(["busy", "idle"])
    replicator.replicators["busy"].heard()
    subscriptions, reports = subscriptions_of(replicator)
    subscriptions.client = RefusingClient()  # type: ignore[assignment]
    snapshot = snapshot_of(primary)
    subscriptions.config_decoded(snapshot)
    assert list(subscriptions._to_subscribe.names) == ["busy"]
    subscriptions._to_subscribe.names.clear()  # its subscriber runs now:
    asyncio.run(subscriptions._subscribe("busy"))  # refused
    assert "busy" not in subscriptions._subscribed and "busy" not in subscriptions._waiting

    subscriptions.client = None  # (nothing more is opened here)
    subscriptions.config_applied(snapshot, replicator.apply(snapshot))
    assert list(subscriptions._to_subscribe.names) == ["busy", "idle"]  # again, first
    assert subscriptions._waiting == {"busy", "idle"}  # the catch-up waits for it
    assert reports == []


def test_a_closed_link_abandons_its_pending_subscriptions_in_one_line() -> None:
    """The link's connection ended with 10,000 queues to subscribe: one line, not one per
    queue (8,151 ``ha_subscribe_failed`` lines held a backup's loop 371-403 ms in the scale
    soak), and nothing more is tried on that connection."""
    names = [f"q{i}" for i in range(10_000)]
    replicator, _ = backup_with(names)
    lines: list[tuple[str, dict[str, Any]]] = []
    subscriptions, reports = subscriptions_of(replicator)
    subscriptions._log = lambda event, **fields: lines.append((event, fields))
    subscriptions._to_subscribe.names.extend(names)  # all waiting
    subscriptions._subscribed.update(names)
    subscriptions.client = ClosedClient()  # type: ignore[assignment]
    pending = subscriptions._to_subscribe

    async def subscribers() -> None:
        pending.running = 4
        await asyncio.gather(*(subscriptions._subscriber(pending) for _ in range(4)))

    asyncio.run(subscribers())
    assert not pending.names and pending.running == 0
    assert [event for event, _ in lines] == ["ha_subscriptions_abandoned"]
    assert lines[0][1]["queues"] == 10_000 and "refused" in lines[0][1]["reason"]
    assert reports == []  # a closed link is never caught up


def _primary_snapshot(primary: VirtualHost, wire_format: int) -> bytes:
    """The primary's snapshot of ``primary`` as a link of ``wire_format`` carries it."""
    event = run_steps(
        snapshot_steps(
            [primary], lambda q: ReplicateLevel.ALL, lambda e: ReplicateLevel.NONE, lambda b: False
        )
    )
    return bytes(run_steps(codec_of(wire_format).encode_config_steps(event)))


def test_the_primary_lists_its_busiest_queues_first() -> None:
    primary = VirtualHost()
    for name in ("a", "b", "c", "d"):
        primary.declare_queue(name, durable=True)
    for name, count in (("c", 3), ("b", 1), ("d", 3)):
        for _ in range(count):
            primary.publish(primary.exchange(""), Message("", name, body=b"x"))
    event = run_steps(
        snapshot_steps(
            [primary], lambda q: ReplicateLevel.ALL, lambda e: ReplicateLevel.NONE, lambda b: False
        )
    )
    assert [row["name"] for row in event["queues"]] == ["c", "d", "b", "a"]


def test_busy_queues_are_subscribed_as_their_rows_are_decoded() -> None:
    """Format 4 sends the snapshot's type first and the primary its busiest queues first:
    the member's busy queues are subscribed after the first slice of the decoding, long
    before the rest of the snapshot is decoded (then config_decoded adds nothing)."""
    names = [f"q{i}" for i in range(3 * SLICE)]
    replicator, primary = backup_with(names)
    for name in ("q1200", "q700"):  # busy before the fail-over, on both brokers
        replicator.replicators[name].heard()
        primary.publish(primary.exchange(""), Message("", name, body=b"x"))
    primary.delete_queue("q9")  # replaced on the new primary: not early
    primary.declare_queue("q9", durable=True)
    primary.publish(primary.exchange(""), Message("", "q9", body=b"x"))
    replicator.replicators["q9"].heard()
    subscriptions, _ = subscriptions_of(replicator)
    decoding = codec_of(4).decode_config_steps(
        _primary_snapshot(primary, 4), subscriptions.config_field_decoded
    )
    next(decoding)  # the first slice
    assert sorted(subscriptions._to_subscribe.names) == ["q1200", "q700"]
    event = run_steps(decoding)
    subscriptions.config_decoded(event)
    assert sorted(subscriptions._to_subscribe.names) == ["q1200", "q700"]  # nothing more
    subscriptions.config_applied(event, replicator.apply(event))
    waiting = list(subscriptions._to_subscribe.names)
    assert sorted(waiting[:2]) == ["q1200", "q700"] and len(waiting) == len(set(waiting))
    assert "q9" in waiting[2:]  # after the snapshot replaced it


def test_format_1_sends_the_type_last_its_busy_queues_wait_for_the_whole_snapshot() -> None:
    replicator, primary = backup_with(["idle", "busy"])
    replicator.replicators["busy"].heard()
    subscriptions, _ = subscriptions_of(replicator)
    decoding = codec_of(1).decode_config_steps(
        _primary_snapshot(primary, 1), subscriptions.config_field_decoded
    )
    event = run_steps(decoding)
    assert not subscriptions._to_subscribe.names  # the rows came before "snapshot"
    subscriptions.config_decoded(event)
    assert list(subscriptions._to_subscribe.names) == ["busy"]


def test_a_change_event_decoded_subscribes_nothing_early() -> None:
    replicator, primary = backup_with(["busy"])
    replicator.replicators["busy"].heard()
    subscriptions, _ = subscriptions_of(replicator)
    row = queue_config(primary.queues["busy"], ReplicateLevel.ALL)
    subscriptions.config_field_decoded("type", "queue-declare")
    subscriptions.config_field_decoded("queues", row)  # not a snapshot's row
    assert not subscriptions._to_subscribe.names


def test_the_head_lists_the_busiest_streamed_queues_at_most_its_limit() -> None:
    primary = VirtualHost()
    for name in ("a", "b", "c", "d", "idle"):
        primary.declare_queue(name, durable=True)
    for name, count in (("a", 1), ("b", 3), ("c", 2), ("d", 5)):
        for _ in range(count):
            primary.publish(primary.exchange(""), Message("", name, body=b"x"))

    def level(queue: Any) -> ReplicateLevel:  # d's messages are not streamed
        return ReplicateLevel.CONFIGURATION if queue.name == "d" else ReplicateLevel.ALL

    head = snapshot_head([primary], level)
    assert head is not None and head["type"] == "snapshot-head"
    assert [row["name"] for row in head["queues"]] == ["b", "c", "a"]  # never idle nor d
    assert head["queues"][0] == queue_config(primary.queues["b"], ReplicateLevel.ALL)
    limited = snapshot_head([primary], level, limit=3)  # of d, b and c, those streamed
    assert limited is not None and [row["name"] for row in limited["queues"]] == ["b", "c"]
    assert snapshot_head([primary], lambda q: ReplicateLevel.NONE) is None
    assert snapshot_head([VirtualHost()], level) is None  # nothing enqueued anywhere


def _encoded(event: dict[str, Any]) -> bytes:
    return bytes(run_steps(codec_of(4).encode_config_steps(event)))


def test_a_head_subscribes_the_busy_queues_before_the_snapshot_comes() -> None:
    """Format 4 sends the snapshot's head first: the member subscribes the queues of it
    that it heard traffic on and that the head keeps as they are, once the head is decoded
    (the snapshot itself still to be made, sent and decoded); it applies nothing of the
    head. The snapshot's rows then subscribe the rest of the queues heard on (q5: not busy
    on the new primary, so not in the head), never one twice, and a queue the head shows
    replaced on the primary waits for the snapshot, as without a head."""
    names = [f"q{i}" for i in range(3 * SLICE)]
    replicator, primary = backup_with(names)
    for name in ("q1200", "q700", "q5", "q9"):  # heard before the fail-over
        replicator.replicators[name].heard()
    for name in ("q1200", "q700"):  # busy on the new primary too
        primary.publish(primary.exchange(""), Message("", name, body=b"x"))
    primary.delete_queue("q9")  # replaced on the new primary: not early
    primary.declare_queue("q9", durable=True)
    primary.publish(primary.exchange(""), Message("", "q9", body=b"x"))
    before = {name: replicator.replicators[name] for name in names}
    subscriptions, reports = subscriptions_of(replicator)
    codec = codec_of(4)
    head = snapshot_head([primary], lambda q: ReplicateLevel.ALL)
    assert head is not None and len(head["queues"]) == 3

    event = run_steps(codec.decode_config_steps(_encoded(head), subscriptions.config_field_decoded))
    subscriptions.config_decoded(event)
    assert sorted(subscriptions._to_subscribe.names) == ["q1200", "q700"]
    changes = replicator.apply(event)
    assert changes.subscribe == [] and changes.unsubscribe == []
    assert replicator.replicators == before  # nothing applied
    subscriptions.config_applied(event, changes)
    assert sorted(subscriptions._to_subscribe.names) == ["q1200", "q700"]  # still waiting
    assert reports == [] and subscriptions._first_snapshot

    snapshot = _primary_snapshot(primary, 4)
    decoding = codec.decode_config_steps(snapshot, subscriptions.config_field_decoded)
    event = run_steps(decoding)
    subscriptions.config_decoded(event)
    assert sorted(subscriptions._to_subscribe.names) == ["q1200", "q5", "q700"]
    subscriptions.config_applied(event, replicator.apply(event))
    waiting = list(subscriptions._to_subscribe.names)
    assert sorted(waiting[:3]) == ["q1200", "q5", "q700"] and len(waiting) == len(set(waiting))
    assert "q9" in waiting[3:] and replicator.replicators["q9"] is not before["q9"]
    assert len(waiting) == 3 * SLICE


def test_a_second_head_or_one_after_the_first_snapshot_subscribes_nothing() -> None:
    replicator, primary = backup_with(["busy", "other"])
    for name in ("busy", "other"):
        replicator.replicators[name].heard()
        primary.publish(primary.exchange(""), Message("", name, body=b"x"))
    subscriptions, _ = subscriptions_of(replicator)
    busy = queue_config(primary.queues["busy"], ReplicateLevel.ALL)
    other = queue_config(primary.queues["other"], ReplicateLevel.ALL)
    subscriptions.config_field_decoded("type", "snapshot-head")
    subscriptions.config_field_decoded("queues", busy)
    subscriptions.config_decoded({"type": "snapshot-head", "queues": [busy]})
    subscriptions.config_field_decoded("type", "snapshot-head")  # one head a link
    subscriptions.config_field_decoded("queues", other)
    assert list(subscriptions._to_subscribe.names) == ["busy"]
    snapshot = snapshot_of(primary)
    subscriptions.config_decoded(snapshot)
    subscriptions.config_applied(snapshot, replicator.apply(snapshot))
    subscriptions._to_subscribe.names.clear()
    subscriptions.config_field_decoded("type", "snapshot-head")  # after the first snapshot
    subscriptions.config_field_decoded("queues", busy)
    assert not subscriptions._to_subscribe.names
