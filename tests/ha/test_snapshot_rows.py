"""A snapshot joins the queues' and bindings' rows encoded as each was declared (issue 25):
the same bytes as making and encoding them at the snapshot, whatever happened to the
objects since (deleted, declared again under the same name, bound and unbound), for every
format that writes rows ahead. Cores only, no sockets."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.core.errors import AmqpError
from broker.core.vhost import VirtualHost
from broker.ha.config_objects import binding_config, queue_config, snapshot_steps
from broker.ha.link_format import CODECS, codec_of
from broker.ha.replicate_level import ReplicateLevel, queue_level
from broker.ha.snapshot_rows import SnapshotRows
from broker.ha.streams import PrimaryStreams
from common.slices import run_steps
from tests.amqp.helpers import open_client
from tests.ha.test_streams import BACKUP_PROPS, bodies, primary_context

#: The formats whose codec writes rows ahead (2 and later).
AHEAD = sorted(f for f, codec in CODECS.items() if codec.encode_snapshot_row is not None)

NAMES = st.sampled_from(["a", "b", "c", "d", "é"])
ARGUMENTS = st.one_of(
    st.just({}),
    st.sampled_from(ReplicateLevel).map(lambda level: {"qpid.replicate": level.value}),
    st.dictionaries(
        st.sampled_from(["x-max-length", "x-message-ttl", "k", "nested"]),
        st.one_of(
            st.integers(0, 10**6),
            st.booleans(),
            st.text(max_size=8),
            st.floats(allow_nan=False),
            st.lists(st.one_of(st.integers(-5, 5), st.none()), max_size=3),
            st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        ),
        max_size=3,
    ).filter(lambda args: not {"x-max-length", "x-message-ttl"} & args.keys()),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("declare"), NAMES, ARGUMENTS, st.booleans()),
        st.tuples(st.just("delete"), NAMES),
        st.tuples(st.just("bind"), NAMES, st.sampled_from(["k1", "k2"])),
        st.tuples(st.just("unbind"), NAMES, st.sampled_from(["k1", "k2"])),
    ),
    max_size=25,
)


def apply(vhost: VirtualHost, op: tuple[Any, ...]) -> None:
    """One declare, delete, bind or unbind; a refusal (a queue already declared otherwise,
    one not there) changes nothing."""
    try:
        if op[0] == "declare":
            _, name, arguments, auto_delete = op
            vhost.declare_queue(name, durable=True, auto_delete=auto_delete, arguments=arguments)
        elif op[0] == "delete":
            vhost.delete_queue(op[1])
        elif op[0] == "bind":
            vhost.bind(op[1], "t", op[2], {"x-k": op[2]})
        else:
            vhost.unbind(op[1], "t", op[2], {"x-k": op[2]})
    except AmqpError:
        pass


def encoded_both_ways(vhost: VirtualHost, rows: SnapshotRows, fmt: int) -> tuple[bytes, bytes]:
    """The snapshot of ``vhost`` in format ``fmt`` encoded with ``rows`` and without."""
    codec = codec_of(fmt)
    default = rows.default

    def level(queue: Any) -> ReplicateLevel:
        return queue_level(queue, default)

    def everything(_: Any) -> ReplicateLevel:
        return ReplicateLevel.ALL

    def ours(with_rows: SnapshotRows | None) -> bytes:
        steps = snapshot_steps([vhost], level, everything, lambda b: True, encoded=with_rows)
        return run_steps(codec.encode_config_steps(run_steps(steps)))

    return ours(rows), ours(None)


@settings(max_examples=60, deadline=None)
@given(OPS, OPS, st.sampled_from(AHEAD), st.sampled_from(list(ReplicateLevel)), st.booleans())
def test_a_snapshot_of_rows_kept_is_the_snapshot_made_now(
    before: list[tuple[Any, ...]],
    after: list[tuple[Any, ...]],
    fmt: int,
    default: ReplicateLevel,
    warm: bool,
) -> None:
    vhost = VirtualHost()
    vhost.declare_exchange("t", "topic", durable=True)
    for op in before:  # a store's recovery: before the HA broker listened
        apply(vhost, op)
    rows = SnapshotRows(default)
    vhost.listeners.append(rows)
    if warm:
        run_steps(rows.warm_steps([vhost]))
    for op in after:
        apply(vhost, op)
    with_rows, made_now = encoded_both_ways(vhost, rows, fmt)
    assert with_rows == made_now
    assert encoded_both_ways(vhost, rows, fmt)[0] == made_now  # kept rows, used again


def test_a_queue_declared_again_under_its_name_is_sent_as_it_is_now() -> None:
    vhost = VirtualHost()
    rows = SnapshotRows(ReplicateLevel.ALL)
    vhost.listeners.append(rows)
    old = vhost.declare_queue("q", durable=True, arguments={"k": 1})
    vhost.delete_queue("q")
    new = vhost.declare_queue("q", durable=False, arguments={"k": 2})
    with_rows, made_now = encoded_both_ways(vhost, rows, 4)
    assert with_rows == made_now
    snapshot = codec_of(4).decode_config_event(with_rows)
    assert [(q["uuid"], q["durable"], q["arguments"]) for q in snapshot["queues"]] == [
        (new.uuid, False, {"k": 2})
    ]
    assert old.uuid != new.uuid


def test_a_row_its_encoder_refuses_is_made_at_the_snapshot() -> None:
    """A row the encoder refuses (ValueError) is not kept: the snapshot makes it, and the
    snapshot's own encoding says why it cannot be sent, as it did without rows."""

    def refuse(row: dict[str, Any]) -> bytes:
        raise ValueError(f"cannot carry {row.get('name')!r}")

    vhost = VirtualHost()
    rows = SnapshotRows(ReplicateLevel.ALL, encode=refuse)
    vhost.listeners.append(rows)
    queue = vhost.declare_queue("q", arguments={"k": 1})
    assert len(rows) == 0
    steps = snapshot_steps(
        [vhost],
        lambda q: ReplicateLevel.ALL,
        lambda e: ReplicateLevel.ALL,
        lambda b: True,
        encoded=rows,
    )
    assert run_steps(steps)["queues"] == [queue_config(queue, ReplicateLevel.ALL)]
    assert not rows.writes_as(codec_of(4).encode_snapshot_row)


def test_rows_are_kept_as_objects_are_declared_and_forgotten_as_they_go() -> None:
    vhost = VirtualHost()
    vhost.declare_exchange("t", "topic")
    vhost.declare_queue("recovered")  # before the HA broker listened
    rows = SnapshotRows(ReplicateLevel.ALL)
    vhost.listeners.append(rows)
    assert len(rows) == 0
    run_steps(rows.warm_steps([vhost]))
    assert len(rows) == 1
    vhost.declare_queue("local", arguments={"qpid.replicate": "none"})  # never sent: no row
    vhost.declare_queue("q")
    vhost.bind("q", "t", "k")
    assert len(rows) == 3
    vhost.unbind("q", "t", "k")
    vhost.delete_queue("q")
    vhost.delete_queue("recovered")
    assert len(rows) == 0


def test_a_snapshot_of_kept_rows_takes_a_few_slices() -> None:
    """2,000 queues and 1,000 bindings: made and encoded at the snapshot, 11 slices (500
    objects each, twice); joined from rows kept, 2."""
    vhost = VirtualHost()
    vhost.declare_exchange("t", "topic")
    rows = SnapshotRows(ReplicateLevel.ALL)
    vhost.listeners.append(rows)
    for i in range(2000):
        vhost.declare_queue(f"q{i}")
        if i % 2 == 0:
            vhost.bind(f"q{i}", "t", f"q{i}.#")

    def slices(encoded: SnapshotRows | None) -> int:
        steps = snapshot_steps(
            [vhost],
            lambda q: ReplicateLevel.ALL,
            lambda e: ReplicateLevel.ALL,
            lambda b: True,
            encoded=encoded,
        )
        count = 1
        while True:
            try:
                next(steps)
            except StopIteration as done:
                snapshot = done.value
                break
            count += 1
        encoding = codec_of(4).encode_config_steps(snapshot)
        while True:
            try:
                next(encoding)
            except StopIteration:
                return count
            count += 1

    assert slices(None) >= 10
    assert slices(rows) <= 2


def _first_snapshot(streams_rows: SnapshotRows | None) -> bytes:
    ctx, _ = primary_context()
    streams = ctx.streams
    assert isinstance(streams, PrimaryStreams)
    ctx.vhost.declare_exchange("t", "topic", durable=True)
    for i in range(50):
        ctx.vhost.declare_queue(f"q{i}", durable=True, arguments={"n": i})
        ctx.vhost.bind(f"q{i}", "t", f"k{i}")
    if streams_rows is not None:
        streams.rows = streams_rows
        ctx.vhost.listeners.append(streams_rows)
        run_steps(streams_rows.warm_steps([ctx.vhost]))
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    return bodies(backup)[0]


def test_the_configuration_stream_sends_the_snapshot_it_sent_before() -> None:
    """A backup's configuration stream with rows kept sends what it sent without them (the
    uuids apart: each context's queues are new ones)."""
    codec = codec_of(4)
    with_rows = codec.decode_config_event(_first_snapshot(SnapshotRows(ReplicateLevel.ALL)))
    without = codec.decode_config_event(_first_snapshot(None))
    for snapshot in (with_rows, without):
        for queue in snapshot["queues"]:
            queue.pop("uuid")
    assert with_rows == without
    assert len(with_rows["queues"]) == 51 and len(with_rows["bindings"]) == 50


EXCHANGE_ARGUMENTS = st.sampled_from([{}, {"qpid.replicate": "none"}, {"qpid.replicate": "all"}])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["x", "y"]), EXCHANGE_ARGUMENTS), max_size=2),
    st.lists(
        st.tuples(NAMES, st.sampled_from(ReplicateLevel)),
        max_size=4,
    ),
    st.lists(
        st.tuples(st.sampled_from(["x", "y", "amq.topic"]), st.sampled_from(["a", "b", "x"])),
        max_size=8,
    ),
    st.booleans(),
)
def test_a_snapshot_sends_the_bindings_each_is_replicated_by(
    exchanges: list[tuple[str, dict[str, Any]]],
    queues: list[tuple[str, ReplicateLevel]],
    bindings: list[tuple[str, str]],
    standard_exchanges: bool,
) -> None:
    """A snapshot asks each exchange's part of the rule once: the bindings it sends are
    those :meth:`PrimaryStreams.binding_replicated` says are, one by one."""
    ctx, _ = primary_context()
    streams = ctx.streams
    assert isinstance(streams, PrimaryStreams)
    vhost = ctx.vhost
    for name, arguments in exchanges:
        with contextlib.suppress(AmqpError):
            vhost.declare_exchange(name, "topic", arguments=arguments)
    for name, level in queues:
        apply(vhost, ("declare", name, {"qpid.replicate": level.value}, False))
    for source, destination in bindings:
        try:
            if destination == "x":
                vhost.bind_exchange("x", source, "k")
            else:
                vhost.bind(destination, source, "k")
        except AmqpError:
            pass
    sent = streams.snapshot(standard_exchanges=standard_exchanges)["bindings"]
    expected = [
        binding_config(b)
        for b in vhost.bindings()
        if streams.binding_replicated(b, standard_exchanges)
    ]
    assert sent == expected
