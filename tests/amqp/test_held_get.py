"""basic.get while the delivery gate holds a queue back, sans-I/O (docs/ha-design.md).

A new primary delivers a replicated queue's messages only once its backups acknowledged a
delivery watermark. Until then a basic.get on a queue with ready messages is held, not
answered get-empty: get-ok comes when the gate opens, in order with the channel's other
replies (the frames the client sent after the get wait behind it). A channel or connection
closed while a get is held leaves the message on the queue, taken by nobody. Real objects:
the broker's Connection, the queue's real gate (the HA primary's DeliveryWatermark) with a
guard standing for a backup that has not acknowledged yet.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.core.queue import Queue
from broker.ha.delivery_watermark import DeliveryWatermark
from tests.amqp.helpers import Client, make_context, open_client


def _gated(client: Client, name: str = "q", bodies: tuple[bytes, ...] = (b"a",)) -> Any:
    """Declare ``name``, publish ``bodies`` to it, and gate it: a backup guarded on it has
    acknowledged nothing yet. Returns (queue, gate, guard)."""
    client.send(1, commands.Queue.Declare(queue=name))
    for body in bodies:
        client.publish(1, body, routing_key=name)
    client.take()
    queue: Queue = client.ctx.vhost.queues[name]
    gate = DeliveryWatermark.of(queue)
    guard = object()
    gate.join(guard)
    return queue, gate, guard


def _kinds(client: Client) -> list[str]:
    return [type(f).__name__ for _, f in client.take()]


def test_get_is_held_until_the_gate_opens_and_later_frames_wait_behind_it() -> None:
    client = open_client()
    queue, gate, guard = _gated(client, bodies=(b"a", b"b"))
    client.send(1, commands.Basic.Get(queue="q"))
    client.publish(1, b"c", routing_key="q")  # kept behind the get, in order
    client.send(1, commands.Queue.Declare(queue="q", passive=True))
    assert client.take() == []
    assert queue.message_count == 2 and queue.held_gets == 1

    gate.acknowledged(guard, gate.announced)
    frames = client.take()
    assert [type(f).__name__ for _, f in frames] == [
        "GetOk",
        "ContentHeader",
        "ContentBody",
        "DeclareOk",
    ]
    get_ok, declare_ok = frames[0][1], frames[3][1]
    assert (get_ok.delivery_tag, get_ok.message_count, frames[2][1].value) == (1, 1, b"a")
    assert declare_ok.message_count == 2  # b, and c published after the get
    assert queue.unacked == 1 and queue.held_gets == 0
    client.send(1, commands.Basic.Ack(delivery_tag=1))
    assert queue.unacked == 0 and queue.acked_total == 1


def test_an_empty_queue_answers_get_empty_at_once_even_gated() -> None:
    client = open_client()
    queue, _gate, _guard = _gated(client, bodies=())
    client.send(1, commands.Basic.Get(queue="q"))
    assert _kinds(client) == ["GetEmpty"]
    assert queue.held_gets == 0


def test_connection_lost_while_held_leaves_the_message_queued() -> None:
    ctx = make_context()
    client = open_client(ctx)
    queue, gate, guard = _gated(client)
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    client.conn.connection_lost()
    assert queue.held_gets == 0 and queue.message_count == 1
    gate.acknowledged(guard, gate.announced)
    assert queue.message_count == 1  # nobody took it
    other = open_client(ctx)
    other.send(1, commands.Basic.Get(queue="q", no_ack=True))
    frames = other.take()
    assert [type(f).__name__ for _, f in frames] == ["GetOk", "ContentHeader", "ContentBody"]
    assert frames[2][1].value == b"a" and queue.message_count == 0


def test_connection_close_while_held_leaves_the_message_queued() -> None:
    client = open_client()
    queue, gate, guard = _gated(client)
    client.send(1, commands.Basic.Get(queue="q"))
    client.send(
        0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    assert _kinds(client) == ["CloseOk"]
    gate.acknowledged(guard, gate.announced)
    assert queue.message_count == 1 and queue.unacked == 0 and queue.held_gets == 0


def test_channel_close_while_held_cancels_the_get_after_the_frames_before_it() -> None:
    client = open_client()
    queue, gate, guard = _gated(client)
    client.send(1, commands.Basic.Get(queue="q"))
    client.publish(1, b"b", routing_key="q")
    client.send(
        1, commands.Channel.Close(reply_code=200, reply_text="done", class_id=0, method_id=0)
    )
    assert _kinds(client) == ["CloseOk"]
    assert queue.message_count == 2 and queue.held_gets == 0  # b published, a not taken
    client.open_channel(1)
    gate.acknowledged(guard, gate.announced)
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    assert [f.value for _, f in client.take() if hasattr(f, "value")] == [b"a"]


def test_a_purge_answers_a_held_get_empty() -> None:
    ctx = make_context()
    client = open_client(ctx)
    _queue, _gate, _guard = _gated(client)
    client.send(1, commands.Basic.Get(queue="q"))
    other = open_client(ctx)
    other.send(1, commands.Queue.Purge(queue="q"))
    assert _kinds(other) == ["PurgeOk"]
    assert _kinds(client) == ["GetEmpty"]


def test_a_get_held_again_keeps_the_frames_behind_it() -> None:
    """Two gets in a row (the second one pipelined): each held in turn, answered in order."""
    client = open_client()
    queue, gate, guard = _gated(client, bodies=(b"a", b"b"))
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    client.send(1, commands.Basic.Qos(prefetch_count=5))
    assert client.take() == []
    gate.acknowledged(guard, gate.announced)
    frames = client.take()
    kinds = [type(f).__name__ for _, f in frames]
    assert kinds == ["GetOk", "ContentHeader", "ContentBody"] * 2 + ["QosOk"]
    assert [frames[2][1].value, frames[5][1].value] == [b"a", b"b"]
    assert queue.message_count == 0


# -- the rule, over interleavings ----------------------------------------------------------


def _confirming(ctx: Any) -> Client:
    client = open_client(ctx)
    client.send(1, commands.Confirm.Select())
    client.take()
    return client


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("get"), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("publish"), st.integers(0, 2), st.just(False)),
        st.tuples(st.just("marker"), st.integers(0, 2), st.just(False)),
        st.tuples(st.just("ack_watermark"), st.just(0), st.just(False)),
        st.tuples(st.just("lose"), st.integers(0, 2), st.just(False)),
    ),
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(steps=_steps, initial=st.integers(0, 3))
def test_held_gets_lose_nothing_and_answer_in_order(
    steps: list[tuple[str, int, bool]], initial: int
) -> None:
    """Three clients get (with and without ack), publish, send a marker (a passive
    queue.declare) and lose their connections, while the gate is closed and opens, with a
    new backup joining now and then. Once the gate is open and the clients are gone, every
    confirmed message is either taken with no-ack or back on the queue, and none is twice
    (a publish kept behind a held get when the connection goes is not confirmed, and may be
    lost as any unconfirmed one); each client's replies come in the order of its requests."""
    ctx = make_context()
    clients = [_confirming(ctx) for _ in range(3)]
    published = [f"m{i}".encode() for i in range(initial)]
    queue, gate, guard = _gated(clients[0], bodies=tuple(published))
    guards = [guard]
    sent: list[list[str]] = [[], [], []]  # per client, the requests that answer
    got: list[list[str]] = [[], [], []]
    publishes: list[list[bytes]] = [list(published), [], []]  # per connection, in order
    confirmed: list[bytes] = list(published)
    acked: list[bytes] = []  # taken with no-ack: gone for good

    def collect(index: int) -> None:
        frames = clients[index].take()
        for position, (_ch, frame) in enumerate(frames):
            name = type(frame).__name__
            if name in ("GetOk", "GetEmpty", "DeclareOk"):
                got[index].append(name)
            if name == "Ack":
                tags = range(1, frame.delivery_tag + 1) if frame.multiple else [frame.delivery_tag]
                confirmed.extend(publishes[index][tag - 1] for tag in tags)
            if name == "GetOk":
                body = frames[position + 2][1].value
                if sent[index][len(got[index]) - 1] == "get-no-ack":
                    acked.append(body)

    for action, index, no_ack in steps:
        client = clients[index]
        if action == "get":
            sent[index].append("get-no-ack" if no_ack else "get")
            client.send(1, commands.Basic.Get(queue="q", no_ack=no_ack))
        elif action == "publish":
            body = f"m{len(published)}".encode()
            published.append(body)
            publishes[index].append(body)
            client.publish(1, body, routing_key="q")
        elif action == "marker":
            sent[index].append("marker")
            client.send(1, commands.Queue.Declare(queue="q", passive=True))
        elif action == "ack_watermark":
            for held in guards:
                gate.acknowledged(held, gate.announced)
            if len(guards) < 3:  # a backup joins: closed again until it acknowledges
                guards.append(object())
                gate.join(guards[-1])
        else:  # the client's socket goes; a new one takes its place
            collect(index)
            client.conn.connection_lost()
            clients[index] = _confirming(ctx)
            sent[index], got[index], publishes[index] = [], [], []
            continue
        for other in range(3):
            collect(other)

    for held in guards:
        gate.acknowledged(held, gate.announced)
    for index in range(3):
        collect(index)
        expected = ["DeclareOk" if kind == "marker" else "Get" for kind in sent[index]]
        assert [k if k == "DeclareOk" else "Get" for k in got[index]] == expected
        clients[index].conn.connection_lost()
    kept = [entry.message.body for entry in queue.entries()] + acked
    assert len(kept) == len(set(kept))  # nothing twice
    assert set(confirmed) <= set(kept) <= set(published)
    assert queue.held_gets == 0 and queue.unacked == 0
