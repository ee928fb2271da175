"""A promotion's first snapshot made ahead (issue 25, fail-over at 10,000 queues): a
configuration stream opened later sends those bytes only while they are the snapshot it
would make now, whatever changed before, during or after their making. Cores only, no
sockets (the real brokers' fail-over: tests/ha/test_failover_busy_queues_first.py)."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, header

from broker.core.errors import AmqpError
from broker.core.vhost import VirtualHost
from broker.ha.link_format import CODECS, codec_of
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.snapshot_ahead import SnapshotAhead, ahead_key
from broker.ha.snapshot_rows import SnapshotRows
from broker.ha.streams import PrimaryStreams, replicated_snapshot_steps
from broker.ha.wire import decode_config_event
from common.slices import Steps, run_steps
from tests.amqp.helpers import Client, open_client
from tests.ha.test_streams import BACKUP_PROPS, bodies, primary_context

#: The formats whose snapshots may be made ahead (rows encoded ahead: 2 and later).
AHEAD = sorted(f for f, codec in CODECS.items() if codec.encode_snapshot_row is not None)

NAMES = st.sampled_from(["a", "b", "c", "é"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("declare"), NAMES, st.sampled_from([{}, {"k": 1}])),
        st.tuples(st.just("delete"), NAMES),
        st.tuples(st.just("bind"), NAMES, st.sampled_from(["k1", "k2"])),
        st.tuples(st.just("unbind"), NAMES, st.sampled_from(["k1", "k2"])),
        st.tuples(st.just("exchange"), st.sampled_from(["x", "y"])),
        st.tuples(st.just("exchange-delete"), st.sampled_from(["x", "y"])),
    ),
    max_size=6,
)


def apply(vhost: VirtualHost, op: tuple[Any, ...]) -> None:
    """One change of the configuration; a refusal changes nothing."""
    with contextlib.suppress(AmqpError):
        if op[0] == "declare":
            vhost.declare_queue(op[1], durable=True, arguments=op[2])
        elif op[0] == "delete":
            vhost.delete_queue(op[1])
        elif op[0] == "bind":
            vhost.bind(op[1], "t", op[2])
        elif op[0] == "unbind":
            vhost.unbind(op[1], "t", op[2])
        elif op[0] == "exchange":
            vhost.declare_exchange(op[1], "direct", durable=True)
        else:
            vhost.delete_exchange(op[1])


def props(fmt: int) -> dict[str, Any]:
    return {**BACKUP_PROPS, "qpid.ha-replication-formats": f"{fmt}-{fmt}"}


class Primary:
    """A primary's streams with rows kept and a snapshot made ahead, as an HA broker's."""

    def __init__(self) -> None:
        self.ctx, _ = primary_context()
        self.vhost = self.ctx.vhost
        self.vhost.declare_exchange("t", "topic", durable=True)
        streams = self.ctx.streams
        assert isinstance(streams, PrimaryStreams)
        self.streams = streams
        self.rows = streams.rows = SnapshotRows(ReplicateLevel.ALL)
        self.ahead = streams.ahead = SnapshotAhead()
        self.vhost.listeners.extend([self.rows, self.ahead])

    def making(self, fmt: int) -> Steps[None]:
        """The promotion's making of the snapshot for format ``fmt`` (HaBroker's)."""
        codec = codec_of(fmt)

        def snapshot() -> Steps[dict[str, Any]]:
            return replicated_snapshot_steps(
                self.streams.vhosts,
                ReplicateLevel.ALL,
                self.rows,
                standard_exchanges=codec.standard_bindings,
                encode_row=codec.encode_snapshot_row,
            )

        return self.ahead.make_steps(ahead_key(codec), snapshot, codec.encode_config_steps)

    def made_now(self, fmt: int) -> bytes:
        """The snapshot a stream makes now (nothing made ahead)."""
        ahead, self.streams.ahead = self.streams.ahead, None
        try:
            return self.first_body(fmt)
        finally:
            self.streams.ahead = ahead

    def first_body(self, fmt: int) -> bytes:
        backup = open_client(self.ctx, client_properties=props(fmt))
        backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
        return pumped(backup, 1)[0]


def pumped(backup: Client, count: int, flushes: int = 500) -> list[bytes]:
    """The stream's first ``count`` messages' bodies, a pump a flush (a turn of the
    loop's); a body is in frames of the connection's frame size."""
    sent: list[bytes] = []
    size, parts = 0, b""
    for _ in range(flushes):
        for _channel, value in backup.take():
            if isinstance(value, header.ContentHeader):
                size, parts = value.body_size, b""
            elif isinstance(value, body.ContentBody):
                parts += value.value
                if len(parts) == size:
                    sent.append(parts)
        if len(sent) >= count:
            return sent
    raise AssertionError(f"{len(sent)} bodies of {count} after {flushes} flushes")


@settings(max_examples=50, deadline=None)
@given(OPS, OPS, st.sampled_from(AHEAD), st.sampled_from(AHEAD))
def test_a_stream_sends_the_bytes_made_ahead_only_while_nothing_changed(
    before: list[tuple[Any, ...]], after: list[tuple[Any, ...]], made_for: int, link: int
) -> None:
    primary = Primary()
    for op in before:
        apply(primary.vhost, op)
    run_steps(primary.making(made_for))
    made_at = primary.ahead.changes
    for op in after:
        apply(primary.vhost, op)
    expected = primary.made_now(link)
    sent = primary.first_body(link)
    assert sent == expected
    kept = primary.ahead.made(ahead_key(codec_of(made_for)))
    assert (kept is not None) is (primary.ahead.changes == made_at)
    if kept is not None and ahead_key(codec_of(made_for)) == ahead_key(codec_of(link)):
        assert kept == sent


def test_a_change_forgets_the_bytes_and_a_change_while_making_keeps_none() -> None:
    primary = Primary()
    primary.vhost.declare_queue("p", durable=True)
    key = ahead_key(codec_of(4))
    run_steps(primary.making(4))
    assert primary.ahead.made(key) is not None
    assert primary.ahead.made(ahead_key(codec_of(2))) is None  # another link's bytes
    primary.vhost.declare_queue("r", durable=True)
    assert primary.ahead.made(key) is None

    _many(primary)
    making = primary.making(4)
    next(making)  # a slice made
    assert primary.ahead.making
    primary.vhost.bind("r", "t", "k")
    assert not primary.ahead.making  # a change: what is being made is not the snapshot now
    run_steps(making)
    assert primary.ahead.made(key) is None


def _many(primary: Primary) -> None:
    """Enough objects for a making of several slices."""
    for i in range(2500):
        primary.vhost.declare_queue(f"q{i}", durable=True)
        if i % 2:
            primary.vhost.bind(f"q{i}", "t", f"k{i}")


def test_a_stream_opened_while_the_bytes_are_made_waits_for_them() -> None:
    primary = Primary()
    _many(primary)
    expected = primary.made_now(4)
    making = primary.making(4)
    next(making)
    backup = open_client(primary.ctx, client_properties=props(4))
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    for _ in range(20):
        assert bodies(backup) == []  # waiting for the making, a pump a flush
    run_steps(making)
    assert primary.ahead.made(ahead_key(codec_of(4))) is not None
    assert pumped(backup, 1) == [expected]


def test_a_stream_opened_while_making_sends_its_own_snapshot_after_a_change() -> None:
    """A change after the stream opened (and before the making ended): the making keeps
    nothing; the stream sends the snapshot as of its opening, the change after it."""
    primary = Primary()
    _many(primary)
    expected = primary.made_now(4)
    making = primary.making(4)
    next(making)
    backup = open_client(primary.ctx, client_properties=props(4))
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    primary.vhost.declare_queue("late", durable=True)
    run_steps(making)
    assert primary.ahead.made(ahead_key(codec_of(4))) is None
    sent = pumped(backup, 2)
    assert sent[0] == expected
    event = decode_config_event(sent[1])
    assert event["type"] == "queue-declared" and event["queue"]["name"] == "late"
