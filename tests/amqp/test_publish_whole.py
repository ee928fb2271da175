"""A basic.publish whose content header and one body frame come in the same read is taken
in one step (``Connection._parse`` and :meth:`~broker.amqp.channel_publish.Publisher.
publish_whole`: no pending content between the frames). Whatever the publish (a missing
exchange, ``immediate``, a refused ``user_id``, a direct reply-to without its consumer, a
body larger than allowed, a header and body that disagree on its size, frames of another
channel between them, a confirm or a tx channel), the broker answers the same bytes, ends
in the same state and queues the same messages as when each frame is its own read (never
taken whole)."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.amqp import framing
from broker.amqp.connection import Connection
from broker.core import properties
from tests.amqp.helpers import Client, make_context

_HEADER_HEAD = struct.Struct(">BHIHHQ")  # a content header's frame head, class, weight, size
_FRAME_HEAD = struct.Struct(">BHI")

#: One publish: (exchange, routing key, mandatory, immediate, properties, declared body
#: size, the body frames' sizes, the channels of its header and of its body frames).
Publish = tuple[str, str, bool, bool, int, int, list[int], tuple[int, int]]

_PROPERTIES = [
    commands.Basic.Properties(),
    commands.Basic.Properties(message_id="m", delivery_mode=2, headers={"k": 1}),
    commands.Basic.Properties(user_id="guest"),
    commands.Basic.Properties(user_id="someone-else"),
    commands.Basic.Properties(reply_to="amq.rabbitmq.reply-to"),
]

_MAX_BODY = 3000

publishes = st.tuples(
    st.sampled_from(["", "amq.direct", "amq.fanout", "missing"]),
    st.sampled_from(["q", "nowhere"]),
    st.booleans(),
    st.sampled_from([False, False, False, True]),
    st.integers(0, len(_PROPERTIES) - 1),
    st.sampled_from([0, 1, 100, 2500, _MAX_BODY, _MAX_BODY + 1, 5000]),
    st.sampled_from([[], [-1], [-1, -1], [0], [1], [-2], [50, -1]]),
    st.sampled_from([(1, 1), (1, 1), (1, 1), (2, 2), (2, 1), (1, 2)]),
)


def _frames(publish: Publish) -> list[bytes]:
    exchange, key, mandatory, immediate, props, size, cuts, (head_channel, body_channel) = publish
    method = framing.marshal_publish(1, exchange, key, mandatory)
    if immediate:  # the flags octet's second bit
        method = method[:-2] + bytes((method[-2] | 2,)) + method[-1:]
    raw = properties.encode(_PROPERTIES[props])
    head = _HEADER_HEAD.pack(framing.FRAME_HEADER, head_channel, 12 + len(raw), 60, 0, size)
    frames = [method, head + raw + framing.FRAME_END_BYTE]
    # body frames: -1 the rest of the declared size, -2 one more octet than declared, else n
    left = size
    for cut in cuts:
        n = left if cut == -1 else left + 1 if cut == -2 else cut
        left = max(0, left - n)
        frames.append(_FRAME_HEAD.pack(framing.FRAME_BODY, body_channel, n) + b"b" * n)
        frames[-1] += framing.FRAME_END_BYTE
    return frames


def _client(mode: str) -> Client:
    client = Client(make_context(max_body_size=_MAX_BODY))
    client.handshake()
    client.open_channel(1)
    client.open_channel(2)
    if mode == "confirm":
        client.send(1, commands.Confirm.Select())
    elif mode == "tx":
        client.send(1, commands.Tx.Select())
    client.send(1, commands.Queue.Declare(queue="q"))
    client.send(1, commands.Queue.Bind(queue="q", exchange="amq.direct", routing_key="q"))
    client.send(1, commands.Queue.Bind(queue="q", exchange="amq.fanout"))
    client.take()
    return client


def _outcome(client: Client) -> tuple[object, ...]:
    conn: Connection = client.conn
    out = conn.data_to_send()
    queue = client.ctx.vhost.queues["q"]
    entries = [(e.message.body, e.message.properties_raw) for e in queue.entries()]
    channel = conn.channels.get(1)
    state = None if channel is None else channel.state
    return out, conn.state, state, entries


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    mode=st.sampled_from(["plain", "confirm", "tx"]),
    batch=st.lists(publishes, min_size=1, max_size=5),
)
@example(mode="plain", batch=[("", "q", False, False, 0, 100, [-1], (1, 1))])
@example(mode="confirm", batch=[("missing", "q", False, False, 0, 100, [-1], (1, 1))])
@example(mode="tx", batch=[("", "q", True, False, 3, 100, [-1], (1, 1))])
@example(mode="plain", batch=[("", "q", False, True, 0, 100, [-1], (1, 1))])
@example(mode="plain", batch=[("", "q", False, False, 4, 100, [-1], (1, 1))])
@example(mode="confirm", batch=[("", "q", False, False, 0, 5000, [-1], (1, 1))])
@example(mode="plain", batch=[("", "q", False, False, 0, 100, [-2], (1, 1))])
@example(mode="plain", batch=[("", "q", False, False, 0, 0, [0], (1, 1))])
def test_a_publish_read_whole_does_what_its_frames_read_one_at_a_time_do(
    mode: str, batch: list[Publish]
) -> None:
    frames = [f for publish in batch for f in _frames(publish)]
    whole = _client(mode)
    whole.feed(b"".join(frames))
    apart = _client(mode)
    for piece in frames:
        apart.feed(piece)
    if mode == "tx":
        commit = framing.marshal_method(commands.Tx.Commit(), 1)  # if the channel is open
        whole.feed(commit)
        apart.feed(commit)
    assert _outcome(whole) == _outcome(apart)


def test_a_publish_read_whole_is_queued_and_confirmed() -> None:
    """The common case: taken whole, queued with its properties, confirmed once."""
    client = _client("confirm")
    raw = properties.encode(_PROPERTIES[1])
    data = b"".join(
        framing.marshal_publish(1, "", "q", False)
        + framing.content_frames(1, raw, b"x" * 100, 131072)
        for _ in range(3)
    )
    client.feed(data)
    acks = [m for m in client.methods() if isinstance(m, commands.Basic.Ack)]
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(3, True)]
    entries = client.ctx.vhost.queues["q"].entries()
    assert [(e.message.body, e.message.properties_raw) for e in entries] == [(b"x" * 100, raw)] * 3
