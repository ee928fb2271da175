"""basic.get while the delivery gate holds a queue back, sans-I/O (docs/ha-design.md).

A new primary delivers a replicated queue's messages only once its backups acknowledged a
delivery watermark. Until then a basic.get on a queue with ready messages is held, not
answered get-empty: get-ok comes when the gate opens, in order with the channel's other
replies (the frames the client sent after the get wait behind it). A channel or connection
closed while a get is held leaves the message on the queue, taken by nobody. What is kept
behind held gets is bounded: past ``HELD_BYTES_LIMIT`` on a connection, it is no longer read
(``reading_paused``, as for a resource alarm) until the replays bring it back under; nothing
is dropped or reordered, and a pause for both reasons ends only when both are gone. Real objects:
the broker's Connection, the queue's real gate (the HA primary's DeliveryWatermark) with a
guard standing for a backup that has not acknowledged yet.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as amqp_body
from pamqp import commands, header
from pamqp import frame as amqp_frame

from broker.amqp.held_frames import HELD_BYTES_LIMIT, KEPT_FRAME_COST
from broker.core.errors import ReplyCode
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


# -- what is kept behind held gets is bounded ------------------------------------------------

BLOCKED = {"connection.blocked": True, "publisher_confirms": True}
BODY = 100_000


def _publish_bytes(data: bytes, routing_key: str = "q", channel: int = 1) -> bytes:
    """basic.publish, its content header and its body frames (frame-max 131072), marshalled."""
    marshal = amqp_frame.marshal
    out = marshal(commands.Basic.Publish(exchange="", routing_key=routing_key), channel)
    out += marshal(header.ContentHeader(0, len(data), commands.Basic.Properties()), channel)
    for start in range(0, len(data), 131_064):
        out += marshal(amqp_body.ContentBody(data[start : start + 131_064]), channel)
    return out


def _kept_cost(data: bytes) -> int:
    """What a publish of ``data`` costs kept behind a held get (one body frame)."""
    return len(_publish_bytes(data)) - 3 * 8 + 3 * KEPT_FRAME_COST


def _fill(client: Client) -> list[bytes]:
    """Publish distinct bodies behind the client's held get, one read each, until the
    connection stops being read (the shell reads no more); returns them in order."""
    sent: list[bytes] = []
    while not client.conn.reading_paused:
        data = len(sent).to_bytes(4, "big") + bytes(BODY)
        before = client.conn.held_bytes
        client.publish(1, data, routing_key="q")
        sent.append(data)
        assert client.conn.held_bytes == before + _kept_cost(data)
    assert client.conn.held_bytes - _kept_cost(sent[-1]) < HELD_BYTES_LIMIT
    assert client.conn.held_bytes >= HELD_BYTES_LIMIT  # paused by the read that reached it
    return sent


def test_past_the_limit_the_connection_is_not_read_until_the_replay() -> None:
    ctx = make_context()
    client = open_client(ctx)
    queue, gate, guard = _gated(client)
    changes: list[bool] = []
    client.conn.on_reading_changed = lambda: changes.append(client.conn.reading_paused)
    client.send(1, commands.Basic.Get(queue="q"))
    sent = _fill(client)
    assert changes == [True] and len(sent) == 11  # 11 x 100 kB reach 1 MiB
    assert client.take() == [] and queue.message_count == 1  # kept, not yet published
    other = open_client(ctx)  # another connection is read and served as usual
    other.publish(1, b"other", routing_key="q")
    assert not other.conn.reading_paused and other.conn.held_bytes == 0
    assert queue.message_count == 2

    gate.acknowledged(guard, gate.announced)
    frames = client.take()
    assert [type(f).__name__ for _, f in frames] == ["GetOk", "ContentHeader", "ContentBody"]
    assert frames[2][1].value == b"a"
    assert changes == [True, False] and not client.conn.reading_paused
    assert client.conn.held_bytes == 0
    assert [entry.message.body for entry in queue.entries()] == [b"other", *sent]


@pytest.mark.parametrize("first_gone", ["alarm", "held"])
def test_a_pause_for_an_alarm_and_for_held_frames_ends_when_both_are_gone(
    first_gone: str,
) -> None:
    client = open_client(capabilities=BLOCKED)
    queue, gate, guard = _gated(client)  # has published: an alarm blocks it at once
    client.send(1, commands.Basic.Get(queue="q"))
    sent = _fill(client)
    client.conn.publishers_blocked("low on memory")
    assert _kinds(client) == ["Blocked"] and client.conn.reading_paused
    if first_gone == "alarm":
        client.conn.publishers_blocked(None)
        assert _kinds(client) == ["Unblocked"]
        assert client.conn.reading_paused  # still too much kept
        gate.acknowledged(guard, gate.announced)
        assert _kinds(client) == ["GetOk", "ContentHeader", "ContentBody"]  # the replay
    else:
        gate.acknowledged(guard, gate.announced)
        assert _kinds(client) == ["GetOk", "ContentHeader", "ContentBody"]  # the replay
        assert client.conn.held_bytes == 0
        assert client.conn.reading_paused  # still blocked by the alarm
        client.conn.publishers_blocked(None)
    assert not client.conn.reading_paused and client.conn.held_bytes == 0
    assert [entry.message.body for entry in queue.entries()] == sent


def test_an_alarm_while_paused_for_held_frames_blocks_a_connection_yet_to_publish() -> None:
    """A connection whose first publishes are kept behind a held get has not published yet:
    an alarm then blocks it at its first publish, after the replay (RabbitMQ's rule)."""
    ctx = make_context()
    client = open_client(ctx, capabilities=BLOCKED)
    producer = open_client(ctx)
    queue, gate, guard = _gated(producer)
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    _fill(client)
    client.conn.publishers_blocked("low on disk")
    assert client.take() == [] and client.conn.reading_paused
    gate.acknowledged(guard, gate.announced)
    assert _kinds(client) == ["GetOk", "ContentHeader", "ContentBody", "Blocked"]
    assert client.conn.reading_paused and client.conn.held_bytes == 0
    client.conn.publishers_blocked(None)
    assert _kinds(client) == ["Unblocked"] and not client.conn.reading_paused
    assert queue.message_count == 11


def test_connection_lost_while_paused_drops_what_was_kept() -> None:
    client = open_client()
    queue, gate, guard = _gated(client)
    client.send(1, commands.Basic.Get(queue="q"))
    _fill(client)
    client.conn.connection_lost()
    assert client.conn.held_bytes == 0 and queue.held_gets == 0
    gate.acknowledged(guard, gate.announced)
    assert queue.message_count == 1 and queue.unacked == 0  # the kept publishes never were


def test_a_broker_close_while_paused_reads_again_for_close_ok() -> None:
    client = open_client()
    queue, _gate, _guard = _gated(client)
    changes: list[bool] = []
    client.conn.on_reading_changed = lambda: changes.append(client.conn.reading_paused)
    client.send(1, commands.Basic.Get(queue="q"))
    _fill(client)
    client.conn.close(ReplyCode.CONNECTION_FORCED, "broker stopping")
    assert changes == [True, False] and client.conn.held_bytes == 0
    assert _kinds(client) == ["Close"]
    client.send(0, commands.Connection.CloseOk())
    assert client.conn.should_close
    assert queue.message_count == 1 and queue.held_gets == 0


def test_a_channel_close_read_with_the_kept_frames_replays_them_then_closes() -> None:
    """channel.close in the read that reached the limit: the kept publishes go on first,
    then the channel closes, and the connection is read again."""
    client = open_client()
    queue, _gate, _guard = _gated(client)
    changes: list[bool] = []
    client.conn.on_reading_changed = lambda: changes.append(client.conn.reading_paused)
    client.send(1, commands.Basic.Get(queue="q"))
    data = [bytes([i]) * 400_000 for i in range(3)]
    close = commands.Channel.Close(reply_code=200, reply_text="done", class_id=0, method_id=0)
    client.send_bytes(b"".join(_publish_bytes(d) for d in data) + amqp_frame.marshal(close, 1))
    assert changes == [True, False] and client.conn.held_bytes == 0
    assert _kinds(client) == ["CloseOk"]
    assert [entry.message.body for entry in queue.entries()] == [b"a", *data]


class _Socket:
    """The shell's part in the sans-I/O tests: what a client sent waits (in the kernel's
    buffers) while the connection is not read, and is read once it is again."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.unread = bytearray()
        #: The most one read could add to what is kept: its payloads and frames' costs.
        self.largest_read = 0

    def send(self, data: bytes) -> None:
        self.unread += data
        self.read()

    def read(self) -> None:
        while self.unread and not self.client.conn.reading_paused:
            data, self.unread = bytes(self.unread), bytearray()
            frames, pos = 0, 0
            while pos < len(data):
                frames += 1
                pos += 8 + int.from_bytes(data[pos + 3 : pos + 7], "big")
            self.largest_read = max(self.largest_read, len(data) + frames * KEPT_FRAME_COST)
            self.client.feed(data)


#: (action, client, channel, body size); a gate step opens the gate (and closes it again with
#: a new backup when its channel is 1); an alarm step raises the alarm or clears it.
_bounded_steps = st.lists(
    st.tuples(
        st.sampled_from(["get", "get", "flood", "flood", "publish", "marker", "gate", "alarm"]),
        st.integers(0, 1),
        st.integers(0, 1),
        st.sampled_from([10, 150_000, 600_000]),
    ),
    min_size=4,
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(steps=_bounded_steps)
def test_held_frames_are_bounded_and_nothing_is_lost_or_reordered(
    steps: list[tuple[str, int, int, int]],
) -> None:
    """Two clients get, publish (bodies of up to 600 kB, or three of 400 kB) and send
    markers on two channels each, while the gate closes and opens and an alarm comes and
    goes; each connection's socket is read only while the connection allows it. After every
    step: what is kept is under the limit plus the last read, and the connection is not read
    exactly while it keeps the limit or more, or an alarm blocks a publisher. At the end,
    with the gate open and the alarm gone: every message is on the queue or was got, each
    channel's messages in the order it published them (AMQP orders a channel, not a
    connection: each get answers, and its channel replays, in turn), and its replies in the
    order of its requests."""
    ctx = make_context()
    clients = [open_client(ctx, capabilities=BLOCKED) for _ in range(2)]
    for client in clients:
        client.open_channel(2)
    queue, gate, guard = _gated(clients[0], bodies=(b"1", b"2", b"3"))
    guards = [guard]
    sockets = [_Socket(client) for client in clients]
    published: dict[tuple[int, int], list[bytes]] = {(0, 1): [b"1", b"2", b"3"]}
    got: list[bytes] = []
    requests: dict[tuple[int, int], list[str]] = {}
    replies: dict[tuple[int, int], list[str]] = {}
    alarm: str | None = None

    def collect() -> None:
        for index, client in enumerate(clients):
            content: list[bytes] | None = None
            for channel, f in client.take():
                name = type(f).__name__
                if name in ("GetOk", "GetEmpty", "DeclareOk"):
                    replies.setdefault((index, channel), []).append(name)
                if name == "GetOk":
                    content = []
                    got.append(b"")
                elif name == "ContentBody" and content is not None:
                    content.append(f.value)
                    got[-1] = b"".join(content)
                elif name != "ContentHeader":
                    content = None
            sockets[index].read()

    for number, (action, index, channel, size) in enumerate(steps):
        socket, client = sockets[index], clients[index]
        ch = channel + 1
        if action == "get":
            requests.setdefault((index, ch), []).append("Get")
            socket.send(amqp_frame.marshal(commands.Basic.Get(queue="q", no_ack=True), ch))
        elif action in ("publish", "flood"):
            for repeat in range(1 if action == "publish" else 3):
                data = f"{index}:{number}:{repeat}:".encode()
                data += bytes(size if action == "publish" else 400_000)
                published.setdefault((index, ch), []).append(data)
                socket.send(_publish_bytes(data, channel=ch))
        elif action == "marker":
            requests.setdefault((index, ch), []).append("DeclareOk")
            socket.send(amqp_frame.marshal(commands.Queue.Declare(queue="q", passive=True), ch))
        elif action == "gate":
            for held in guards:
                gate.acknowledged(held, gate.announced)
            if channel:
                guards.append(object())
                gate.join(guards[-1])
        elif action == "alarm":
            alarm = None if alarm else "low on memory"
            for each in clients:
                each.conn.publishers_blocked(alarm)
        collect()
        for each, each_socket in zip(clients, sockets, strict=True):
            conn = each.conn
            kept = sum(
                len(p) + KEPT_FRAME_COST
                for c in conn.channels.values()
                for _, p in (c.held_frames or [])
            )
            assert conn.held_bytes == kept
            assert kept < HELD_BYTES_LIMIT + each_socket.largest_read
            blocked = alarm is not None and conn.messages_published > 0
            assert conn.reading_paused == (kept >= HELD_BYTES_LIMIT or blocked)

    for held in guards:
        gate.acknowledged(held, gate.announced)
    for client in clients:
        client.conn.publishers_blocked(None)
    for _ in range(4):  # a read may answer gets, whose replays let the next read in
        collect()
    for index, socket in enumerate(sockets):
        assert not socket.unread and clients[index].conn.held_bytes == 0
    for key, expected in requests.items():
        assert [r if r == "DeclareOk" else "Get" for r in replies.get(key, [])] == expected
    remaining = [entry.message.body for entry in queue.entries()]
    for bodies in published.values():
        mine = [m for m in remaining if m in bodies]
        assert mine == [m for m in bodies if m in mine]  # order kept
    assert sorted(remaining + got) == sorted(m for bodies in published.values() for m in bodies)


def test_a_publish_and_close_read_together_under_an_alarm_leave_reading_on() -> None:
    """A blocked connection's last publish and its connection.close in one read: the close
    is answered and reading is not paused for the alarm, so the client's EOF is seen."""
    client = open_client(capabilities=BLOCKED)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    client.conn.publishers_blocked("low on memory")
    assert client.take() == [] and not client.conn.reading_paused  # blocked at its first publish
    data = amqp_frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
    data += amqp_frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 1)
    data += amqp_frame.marshal(amqp_body.ContentBody(b"x"), 1)
    data += amqp_frame.marshal(commands.Connection.Close(200, "bye", 0, 0), 0)
    client.send_bytes(data)
    assert _kinds(client) == ["CloseOk"]  # closed: not blocked, not paused
    assert not client.conn.reading_paused
