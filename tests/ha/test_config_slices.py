"""The configuration stream's snapshot in slices (issue 25, "no long stalls"): decoded and
applied a slice a turn of the loop, with the result and the errors of doing it at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.amqp.client import Delivery
from broker.core.vhost import VirtualHost
from broker.ha import config_stream
from broker.ha.broker_replicator import BrokerReplicator
from broker.ha.config_apply import ConfigApplier
from broker.ha.link_format import CODECS
from broker.ha.wire import decode_config_event
from broker.ha.wire_config import decode_event, decode_event_steps
from common.slices import Steps, run_steps
from tests.amqp.helpers import open_client
from tests.ha.test_streams import BACKUP_PROPS, bodies, primary_context
from tests.ha.test_wire import config_events


def _slices(steps: Steps[Any]) -> tuple[Any, int]:
    """The result of ``steps`` and how many slices it took."""
    turns = 1
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value, turns
        turns += 1


@settings(max_examples=25)
@given(config_events, st.sampled_from(sorted(CODECS)), st.integers(1, 3))
def test_decoded_in_slices_as_at_once(event: dict[str, Any], fmt: int, size: int) -> None:
    codec = CODECS[fmt]
    data = codec.encode_config_event(event)
    grammar = codec.config_grammar
    assert run_steps(decode_event_steps(data, grammar, size)) == decode_event(data, grammar)
    assert run_steps(codec.decode_config_steps(data)) == codec.decode_config_event(data)


@settings(max_examples=25)
@given(
    st.one_of(config_events, st.builds(lambda e: {**e, "queues": [e, e, e]}, config_events)),
    st.sampled_from(sorted(CODECS)),
    st.integers(1, 3),
)
def test_encoded_in_slices_as_at_once(event: dict[str, Any], fmt: int, size: int) -> None:
    codec = CODECS[fmt]
    try:
        expected: Any = codec.encode_config_event(event)
    except ValueError:
        expected = ValueError
    try:
        got: Any = run_steps(codec.encode_config_steps(event, size))  # type: ignore[call-arg]
    except ValueError:
        got = ValueError
    assert got == expected


def test_an_event_the_format_cannot_carry_fails_in_slices_too() -> None:
    for fmt, event in (
        (1, {"type": "snapshot", "queues": [{"name": "q", "arguments": {"x": 2.5j}}]}),
        (2, {"type": "snapshot", "queues": [{"name": "q", "arguments": {"x": 2.5j}}]}),
        (1, {"type": "snapshot", "queues": [{"k" * 129: 1}]}),
    ):
        with pytest.raises(ValueError, match="config event"):
            run_steps(CODECS[fmt].encode_config_steps(event))


@settings(max_examples=25)
@given(config_events, st.data())
def test_a_broken_event_fails_in_slices_as_at_once(event: dict[str, Any], data: Any) -> None:
    codec = CODECS[2]
    body = codec.encode_config_event(event)
    cut = data.draw(st.integers(0, len(body) - 1))
    broken = body[:cut] + bytes([data.draw(st.integers(0, 255))]) + body[cut + 1 :]
    for candidate in (body[:cut], broken):
        try:
            expected: Any = decode_event(candidate, codec.config_grammar)
        except ValueError as exc:
            expected = str(exc)
        try:
            got: Any = run_steps(decode_event_steps(candidate, codec.config_grammar, 1))
        except ValueError as exc:
            got = str(exc)
        assert got == expected


def _snapshot(queues: int, bound: range) -> dict[str, Any]:
    return {
        "type": "snapshot",
        "queues": [
            {"name": f"q{i}", "replicate": "all", "durable": True, "arguments": {}}
            for i in range(queues)
        ],
        "exchanges": [{"name": "t", "type": "topic", "durable": True, "arguments": {}}],
        "bindings": [
            {"queue": f"q{i}", "exchange": "t", "routing_key": f"k{i}", "arguments": {}}
            for i in bound
        ],
    }


def test_a_snapshot_is_applied_in_slices_as_at_once() -> None:
    """A backup holding leftovers (queues and bindings the primary no longer has) reaches
    the same configuration, in slices of 7 objects, as in one step; the decode of 1,000
    queues takes slices too."""
    sliced, whole = BrokerReplicator(VirtualHost()), BrokerReplicator(VirtualHost())
    for replicator in (sliced, whole):
        replicator.apply(_snapshot(60, range(0, 60, 2)))
    event = _snapshot(40, range(1, 40, 3))
    changes, turns = _slices(sliced.apply_steps(event, size=7))
    assert turns > 10
    assert changes == whole.apply(event)
    assert sorted(changes.unsubscribe) == [f"q{i}" for i in range(40, 60)]

    def view(replicator: BrokerReplicator) -> tuple[list[str], list[tuple[str, str, str]]]:
        vhost = replicator.vhosts.default
        return sorted(vhost.queues), sorted(
            (b.exchange, b.destination.name, b.routing_key) for b in vhost.bindings()
        )

    assert view(sliced) == view(whole)
    assert sorted(sliced.replicators) == sorted(whole.replicators) == sorted(view(whole)[0])
    body = CODECS[2].encode_config_event(_snapshot(1000, range(0)))
    assert _slices(CODECS[2].decode_config_steps(body))[1] >= 2


def test_a_bad_event_in_slices_is_a_value_error_naming_it() -> None:
    replicator = BrokerReplicator(VirtualHost())
    with pytest.raises(ValueError, match="unknown configuration event 'nonsense'"):
        run_steps(replicator.apply_steps({"type": "nonsense"}))


# -- the link's applier (broker.ha.config_apply) ---------------------------------------------


def _delivery(tag: int, event: dict[str, Any]) -> Delivery:
    return Delivery(tag, False, "", "", b"", CODECS[2].encode_config_event(event), "c")


class _Applier:
    """A :class:`ConfigApplier` on a fresh backup's replicator, its spawned tasks kept."""

    def __init__(self, hold: Callable[[], Awaitable[None]] | None = None) -> None:
        self.replicator = BrokerReplicator(VirtualHost())
        self.acked: list[int] = []
        self.applied: list[str] = []
        self.failed: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.applier = ConfigApplier(
            self.acked.append,
            CODECS[2],
            self.replicator,
            None,
            spawn=lambda coro: self.tasks.append(asyncio.ensure_future(coro)),
            failed=lambda _event, exc: self.failed.append(str(exc)),
            store_failed=self.failed.append,
            applied=lambda event, _changes: self.applied.append(str(event["type"])),
            hold=hold,
        )

    @property
    def queues(self) -> int:
        return len(self.replicator.vhosts.default.queues)


def test_the_stream_is_applied_in_order_a_slice_a_turn() -> None:
    async def scenario() -> tuple[_Applier, int]:
        link = _Applier()
        link.applier.delivered(_delivery(1, _snapshot(1200, range(0, 1200, 2))))
        link.applier.delivered(
            _delivery(2, {"type": "queue-deleted", "name": "q7"})  # waits for the snapshot
        )
        turns = 0
        while link.tasks and not link.tasks[-1].done():
            await asyncio.sleep(0)
            turns += 1
        return link, turns

    link, turns = asyncio.run(scenario())
    assert turns >= 6 and link.failed == []
    assert link.acked == [1, 2] and link.applied == ["snapshot", "queue-deleted"]
    assert link.queues == 1199 and "q7" not in link.replicator.replicators


def test_a_snapshot_half_applied_when_the_link_stops_is_finished_at_once() -> None:
    """A link cancelled in its end (the broker stops) applies the rest at once
    (tests/ha/test_snapshot_finish.py: in turns, its normal end)."""

    async def scenario() -> _Applier:
        link = _Applier()
        link.applier.delivered(_delivery(1, _snapshot(1500, range(0))))
        while not 0 < link.queues < 1500:
            await asyncio.sleep(0)
        for task in link.tasks:
            task.cancel()
        link.applier.finish()  # as a link cancelled in its end does
        assert link.queues == 1500  # at once, before anything else runs
        await asyncio.gather(*link.tasks, return_exceptions=True)
        return link

    link = asyncio.run(scenario())
    assert link.queues == 1500 and len(link.replicator.replicators) == 1500
    assert link.acked == [] and link.applied == [] and link.failed == []


def test_a_snapshot_is_built_a_slice_a_pump_as_of_the_streams_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The primary builds the snapshot's rows in slices, as many a pump as its CPU budget
    allows (10,000 queues at once: one step of 35-75 ms; here none: a slice a pump): it
    shows what was there when the stream opened, and a change made meanwhile follows it as
    its own event (the backup ends where the primary is)."""
    monkeypatch.setattr(config_stream, "SNAPSHOT_PUMP_CPU", 0.0)
    ctx, _ = primary_context()
    for i in range(1200):
        ctx.vhost.declare_queue(f"s{i}")
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    assert bodies(backup) == []  # a slice built, not yet sent
    ctx.vhost.delete_queue("s5")
    ctx.vhost.declare_queue("late")
    sent = _deliveries(backup, 3)  # each delivery's body (a snapshot spans several frames)
    snapshot, deleted, declared = (decode_config_event(body) for body in sent[:3])
    assert [q["name"] for q in snapshot["queues"]] == ["q"] + [f"s{i}" for i in range(1200)]
    assert deleted["type"] == "queue-deleted" and deleted["name"] == "s5"
    assert declared["type"] == "queue-declared" and declared["queue"]["name"] == "late"


def test_a_pump_gives_the_snapshot_its_cpu_budget() -> None:
    """A slice a turn, a new primary's snapshot of 10,000 queues took 7 turns of its loop,
    each behind every other ready callback, while its member's first confirms waited for
    it: a pump now goes on while it has used under SNAPSHOT_PUMP_CPU (600 queues: a few ms
    of CPU, one pump)."""
    assert config_stream.SNAPSHOT_PUMP_CPU > 0
    ctx, _ = primary_context()
    for i in range(600):
        ctx.vhost.declare_queue(f"s{i}")
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    sent = b"".join(bodies(backup))  # the first flush
    snapshot = decode_config_event(sent)
    assert [q["name"] for q in snapshot["queues"]] == ["q"] + [f"s{i}" for i in range(600)]


def _deliveries(client: Any, count: int) -> list[bytes]:
    """The bodies of up to ``count`` deliveries (a snapshot spans several frames)."""
    sent: list[bytes] = []
    for _ in range(50):
        for _channel, value in client.take():
            if isinstance(value, commands.Basic.Deliver):
                sent.append(b"")
            elif type(value).__name__ == "ContentBody":
                sent[-1] += value.value
        if len(sent) >= count:
            break
    return sent


def test_a_format_4_link_gets_the_snapshots_head_first() -> None:
    """On a link of format 4 the snapshot is preceded by its head, the busiest queues' rows
    read at the same moment (a member subscribes its busy queues from it, before the whole
    snapshot is made, sent and decoded), and made once the backup acknowledged the head;
    it lists every queue, and a change made meanwhile follows the snapshot, as without a
    head."""
    ctx, _ = primary_context()
    for i in range(300):
        ctx.vhost.declare_queue(f"s{i}")
    publisher = open_client(ctx)
    for name, count in (("s7", 2), ("s200", 3)):
        for _ in range(count):
            publisher.publish(1, b"x", routing_key=name)
    ctx.vhost.declare_queue("local", arguments={"qpid.replicate": "configuration"})
    publisher.publish(1, b"x", routing_key="local")  # busy, its messages not streamed
    codec = CODECS[4]
    backup = open_client(
        ctx, client_properties={**BACKUP_PROPS, "qpid.ha-replication-formats": "4-4"}
    )
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    ctx.vhost.declare_queue("late")
    (body,) = _deliveries(backup, 1)
    assert _deliveries(backup, 1) == []  # the snapshot waits for the head's acknowledgement
    backup.send(1, commands.Basic.Ack(delivery_tag=1))
    head = codec.decode_config_event(body)
    snapshot, declared = (codec.decode_config_event(b) for b in _deliveries(backup, 2))
    assert head == {
        "type": "snapshot-head",
        "queues": [q for q in snapshot["queues"] if q["name"] in ("s200", "s7")],
    }
    assert [q["name"] for q in head["queues"]] == ["s200", "s7"]  # the busiest first
    assert snapshot["type"] == "snapshot" and len(snapshot["queues"]) == 302
    assert declared["type"] == "queue-declared" and declared["queue"]["name"] == "late"


def test_a_big_snapshot_waits_its_pause_after_the_heads_acknowledgement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A snapshot of BIG_SNAPSHOT queues or more is made SNAPSHOT_PAUSE after its head's
    acknowledgement (a fail-over's reconnections and first confirms first); a smaller one
    at once, as before (test_a_format_4_link_gets_the_snapshots_head_first)."""
    monkeypatch.setattr(config_stream, "BIG_SNAPSHOT", 200)
    monkeypatch.setattr(config_stream, "SNAPSHOT_PAUSE", 0.3)

    async def scenario() -> None:
        ctx, _ = primary_context()
        for i in range(300):
            ctx.vhost.declare_queue(f"s{i}")
        publisher = open_client(ctx)
        publisher.publish(1, b"x", routing_key="s7")
        backup = open_client(
            ctx, client_properties={**BACKUP_PROPS, "qpid.ha-replication-formats": "4-4"}
        )
        backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
        (body,) = _deliveries(backup, 1)
        assert CODECS[4].decode_config_event(body)["type"] == "snapshot-head"
        backup.send(1, commands.Basic.Ack(delivery_tag=1))
        acked = time.monotonic()
        ctx.vhost.declare_queue("late")  # pushed meanwhile: after the snapshot, as ever
        assert _deliveries(backup, 1) == []  # paused
        await asyncio.sleep(0.1)
        assert _deliveries(backup, 1) == []
        sent: list[bytes] = []
        while len(sent) < 2 and time.monotonic() < acked + 10:
            await asyncio.sleep(0.02)
            sent += _deliveries(backup, 2 - len(sent))
        assert time.monotonic() - acked >= 0.25  # the pause (timed from the ack read)
        snapshot, declared = (CODECS[4].decode_config_event(b) for b in sent)
        assert snapshot["type"] == "snapshot" and len(snapshot["queues"]) == 301
        assert declared["type"] == "queue-declared" and declared["queue"]["name"] == "late"

    asyncio.run(scenario())


def test_no_head_without_a_busy_queue_nor_on_a_link_of_format_3() -> None:
    ctx, _ = primary_context()
    publisher = open_client(ctx)
    publisher.publish(1, b"x", routing_key="q")
    for formats, first in (("3-3", "snapshot"), ("4-4", "snapshot-head")):
        backup = open_client(
            ctx, client_properties={**BACKUP_PROPS, "qpid.ha-replication-formats": formats}
        )
        backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
        body = _deliveries(backup, 1)[0]
        assert CODECS[int(formats[0])].decode_config_event(body)["type"] == first
    quiet, _ = primary_context()  # nothing enqueued yet: the snapshot alone
    backup = open_client(
        quiet, client_properties={**BACKUP_PROPS, "qpid.ha-replication-formats": "4-4"}
    )
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    assert CODECS[4].decode_config_event(_deliveries(backup, 1)[0])["type"] == "snapshot"


def test_a_head_is_acknowledged_once_the_streams_it_opened_are_open() -> None:
    """The member acknowledges a snapshot's head once its busy streams are open (``hold``),
    and the primary makes the snapshot after that; what follows the head waits for it, as
    every event waits for the one before."""

    async def scenario() -> _Applier:
        opened = asyncio.Event()

        async def hold() -> None:
            await opened.wait()

        link = _Applier(hold=hold)
        link.applier.delivered(_delivery(1, {"type": "snapshot-head", "queues": []}))
        link.applier.delivered(_delivery(2, _snapshot(3, range(0))))
        for _ in range(20):
            await asyncio.sleep(0)
        assert link.acked == [] and link.applied == []  # its streams still opening
        opened.set()
        deadline = asyncio.get_running_loop().time() + 10
        while len(link.acked) < 2:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0)
        return link

    link = asyncio.run(scenario())
    assert link.acked == [1, 2] and link.applied == ["snapshot-head", "snapshot"]
    assert link.queues == 3 and link.failed == []
