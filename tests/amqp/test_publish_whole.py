"""A basic.publish whose content header and one body frame come in the same read is taken
in one step (``Connection._parse`` and :meth:`~broker.amqp.channel_publish.Publisher.
publish_whole`: no pending content between the frames). Whatever the publish (a missing
exchange, ``immediate``, a refused ``user_id``, a direct reply-to without its consumer, a
body larger than allowed, a header and body that disagree on its size, frames of another
channel between them, a damaged frame, a confirm or a tx channel), the broker answers the
same bytes, ends in the same state and queues the same messages as when each frame is its
own read (never taken whole): whether the three frames are split by broker/amqp/_wire.c's
``scan_publish`` (where it is built: its arguments decoded before, or not yet) or by the
parser's Python."""

from __future__ import annotations

import contextlib
import itertools
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.amqp import framing
from broker.amqp.connection import Connection
from broker.core import properties
from broker.core.errors import AmqpError
from tests.amqp.helpers import Client, make_context

_HEADER_HEAD = struct.Struct(">BHIHHQ")  # a content header's frame head, class, weight, size
_FRAME_HEAD = struct.Struct(">BHI")

#: One publish: (exchange, routing key, mandatory, immediate, properties, declared body
#: size, the body frames' sizes, the channels of its header and of its body frames, the
#: damage done to its frames).
Publish = tuple[str, str, bool, bool, int, int, list[int], tuple[int, int], str]

#: What may be wrong with a publish's frames besides its values (a frame-error close).
_DAMAGE = ["none"] * 6 + ["class", "weight", "method end", "header end", "body end"]

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
    st.sampled_from(_DAMAGE),
)


def _frames(publish: Publish) -> list[bytes]:
    exchange, key, mandatory, immediate, props, size, cuts, channels, damage = publish
    head_channel, body_channel = channels
    method = framing.marshal_publish(1, exchange, key, mandatory)
    if immediate:  # the flags octet's second bit
        method = method[:-2] + bytes((method[-2] | 2,)) + method[-1:]
    if damage == "method end":
        method = method[:-1] + b"\xcd"
    raw = properties.encode(_PROPERTIES[props])
    class_id, weight = 61 if damage == "class" else 60, 1 if damage == "weight" else 0
    head = _HEADER_HEAD.pack(
        framing.FRAME_HEADER, head_channel, 12 + len(raw), class_id, weight, size
    )
    end = b"\x00" if damage == "header end" else framing.FRAME_END_BYTE
    frames = [method, head + raw + end]
    # body frames: -1 the rest of the declared size, -2 one more octet than declared, else n
    left = size
    for cut in cuts:
        n = left if cut == -1 else left + 1 if cut == -2 else cut
        left = max(0, left - n)
        frames.append(_FRAME_HEAD.pack(framing.FRAME_BODY, body_channel, n) + b"b" * n)
        frames[-1] += b"\xff" if damage == "body end" else framing.FRAME_END_BYTE
    return frames


def _decoded_before(frames: list[bytes]) -> None:
    """The publishes' arguments decoded by an earlier publish (the scanner splits only
    those: :data:`~broker.amqp.framing.DECODED_PUBLISHES`)."""
    for frame in frames:
        if frame[0] == framing.FRAME_METHOD:
            with contextlib.suppress(AmqpError):  # malformed: never decoded, never split
                framing.unmarshal_publish(frame[7:-1])


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


def _each_frame(data: bytes) -> list[bytes]:
    frames, pos = [], 0
    while pos < len(data):
        size = _FRAME_HEAD.unpack_from(data, pos)[2]
        frames.append(data[pos : pos + size + 8])
        pos += size + 8
    return frames


@contextlib.contextmanager
def _split_by(split: str | None, data: bytes = b"") -> Iterator[None]:
    """Whole publishes split by the parser's Python (None, "python") or natively (the
    arguments of ``data``'s publishes decoded before, or "not decoded before")."""
    framing.DECODED_PUBLISHES.clear()
    scan = None
    if split not in (None, "python"):
        scan = framing.scan_publish
        if scan is None:
            pytest.skip("broker/amqp/_wire.c not built (tests/amqp/test_native_wire.py says why)")
        if split == "native":
            _decoded_before(_each_frame(data))
    saved, framing.scan_publish = framing.scan_publish, scan
    try:
        yield
    finally:
        framing.scan_publish = saved


#: How a whole read's publishes are split: by the parser's Python, natively with their
#: arguments decoded before, natively with them not yet decoded.
_SPLITS = ["python", "native", "native, not decoded before"]


@pytest.mark.parametrize("split", _SPLITS)
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    mode=st.sampled_from(["plain", "confirm", "tx"]),
    batch=st.lists(publishes, min_size=1, max_size=5),
)
@example(mode="plain", batch=[("", "q", False, False, 0, 100, [-1], (1, 1), "none")])
@example(mode="confirm", batch=[("missing", "q", False, False, 0, 100, [-1], (1, 1), "none")])
@example(mode="tx", batch=[("", "q", True, False, 3, 100, [-1], (1, 1), "none")])
@example(mode="plain", batch=[("", "q", False, True, 0, 100, [-1], (1, 1), "none")])
@example(mode="plain", batch=[("", "q", False, False, 4, 100, [-1], (1, 1), "none")])
@example(mode="confirm", batch=[("", "q", False, False, 0, 5000, [-1], (1, 1), "none")])
@example(mode="plain", batch=[("", "q", False, False, 0, 100, [-2], (1, 1), "none")])
@example(mode="plain", batch=[("", "q", False, False, 0, 0, [0], (1, 1), "none")])
@example(mode="plain", batch=[("", "q", False, False, 0, 100, [-1], (1, 1), "weight")])
@example(mode="confirm", batch=[("", "q", False, False, 0, 9, [-1], (1, 1), "body end")])
@example(mode="confirm", batch=[("amq.direct", "q", True, False, 1, 9, [-1], (1, 1), "none")] * 3)
def test_a_publish_read_whole_does_what_its_frames_read_one_at_a_time_do(
    split: str, mode: str, batch: list[Publish]
) -> None:
    frames = [f for publish in batch for f in _frames(publish)]
    whole = _client(mode)
    with _split_by(split, b"".join(frames)):
        whole.feed(b"".join(frames))
    apart = _client(mode)
    for piece in frames:
        apart.feed(piece)
    if mode == "tx":
        commit = framing.marshal_method(commands.Tx.Commit(), 1)  # if the channel is open
        whole.feed(commit)
        apart.feed(commit)
    assert _outcome(whole) == _outcome(apart)


@pytest.mark.parametrize("split", _SPLITS)
def test_publishes_after_a_close_in_the_same_read_are_not_taken(split: str) -> None:
    """A read of publishes, a channel.close, a publish on another channel, a
    connection.close and more publishes: the same answers and the same queued messages
    however the publishes are split (none taken after the connection's close)."""
    one = framing.marshal_publish(1, "", "q", False) + framing.content_frames(
        1, b"\x00\x00", b"m", 131072
    )
    two = framing.marshal_publish(2, "", "q", False) + framing.content_frames(
        2, b"\x00\x00", b"n", 131072
    )
    data = b"".join(
        (
            one,
            two,
            framing.marshal_method(commands.Channel.Close(200, "bye", 0, 0), 1),
            two,
            framing.marshal_method(commands.Connection.Close(200, "bye", 0, 0), 0),
            two,
            two,
        )
    )
    apart = _client("confirm")
    with _split_by(None):
        for frame in _each_frame(data):
            apart.feed(frame)
    whole = _client("confirm")
    with _split_by(split, data):
        whole.feed(data)
    assert _outcome(whole) == _outcome(apart)
    entries = whole.ctx.vhost.queues["q"].entries()
    assert [e.message.body for e in entries] == [b"m", b"n", b"n"]


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    batch=st.lists(publishes, min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 30_000), max_size=8),
)
def test_reads_cut_anywhere_do_what_one_read_does(batch: list[Publish], cuts: list[int]) -> None:
    """Reads that end inside a frame head, a payload or before an end octet: what was
    left is joined with the next read, and the broker does what it does with one read."""
    data = b"".join(f for publish in batch for f in _frames(publish))
    at = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    one, pieces = _client("confirm"), _client("confirm")
    one.feed(data)
    for start, end in itertools.pairwise(at):
        pieces.feed(data[start:end])
    assert _outcome(pieces) == _outcome(one)


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
