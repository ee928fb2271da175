"""A link's queue streams never have more than :data:`~broker.ha.link_credit.LINK_BYTES`
(plus a batch) ahead of a lease request (issue 25: a member catching up starved the
primary's member lease), without sockets: the core, then the primary's real streams on an
in-memory link, where the backlog of several queues would fill every channel's credit."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from broker.core.message import Message
from broker.ha.link_credit import LINK_BYTES, LinkCredit
from broker.ha.link_format import codec_of
from broker.ha.names import LEASE_STREAM
from broker.ha.streams import PrimaryStreams
from tests.amqp.helpers import Client, open_client
from tests.ha.test_streams import BACKUP_PROPS, primary_context

#: The largest batch a queue stream sends (ReplicatingSubscription's max_batch_bytes), and a
#: message's framing besides (a batch is cut after the message that crosses it).
BATCH = 64 * 1024 + 1024
QUEUES = 4
BODY = 200
MESSAGES = 3000  # a queue: 600 KB, more than the link's bound on its own


class Pumps:
    def __init__(self) -> None:
        self.asked: list[int] = []

    def pump_of(self, key: int) -> Any:
        return lambda: self.asked.append(key)


def test_either_count_under_the_bound_opens_the_link() -> None:
    link = LinkCredit(limit=100)
    pumps = Pumps()
    link.sent(60)
    assert link.open
    link.sent(60)  # one batch past the bound at most: it was open before it
    assert not link.open and link.unread == 120
    link.wait(1, pumps.pump_of(1))
    link.wait(2, pumps.pump_of(2))
    link.wait(1, pumps.pump_of(1))  # once each
    mark = link.mark()  # a lease request written after both batches
    link.sent(30)
    assert link.unread == 150 and not link.open
    link.answered(mark)  # the backup read both batches, though it acknowledged neither
    assert link.unread == 30 and link.open and pumps.asked == [1, 2]
    assert link.unacknowledged == 150  # held batches stay unacknowledged: no matter
    link.sent(100)
    link.wait(3, pumps.pump_of(3))
    assert link.unread == 130 and not link.open
    link.acknowledged(150)  # acknowledged: the other count
    assert link.unread == 100 and not link.open and pumps.asked == [1, 2]
    link.acknowledged(60)
    assert link.unread == 40 and link.open and pumps.asked == [1, 2, 3]
    link.answered(mark)  # an older answer (multiple acks) never counts back
    link.wait(4, pumps.pump_of(4))
    link.forget(4)
    link.acknowledged(10)
    assert pumps.asked == [1, 2, 3]


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("send"), st.integers(1, 5000)),
            st.tuples(st.just("ack"), st.integers(0, 50)),
            st.tuples(st.just("ask"), st.just(0)),
            st.tuples(st.just("answer"), st.integers(0, 50)),
        ),
        max_size=80,
    )
)
def test_what_is_unread_is_bounded_and_never_undercounted(ops: list[tuple[str, int]]) -> None:
    """Streams send only while the link is open; whatever the order of acknowledgements and
    answers, the bytes truly unread (written after the newest answered request and not
    acknowledged) are within the count, and the count within the bound plus one batch."""
    limit = 10_000
    link = LinkCredit(limit=limit)
    batches: list[tuple[int, int]] = []  # (offset at its end, size), unacknowledged
    requests: list[int] = []
    read = 0
    for op, n in ops:
        if op == "send" and link.open:
            link.sent(n)
            batches.append((link.written, n))
        elif op == "ack" and batches:
            _, size = batches.pop(n % len(batches))
            link.acknowledged(size)
        elif op == "ask":
            requests.append(link.mark())
        elif op == "answer" and requests:
            mark = requests.pop(n % len(requests))
            link.answered(mark)
            read = max(read, mark)
        unread = sum(size for end, size in batches if end > read)
        assert unread <= link.unread <= limit + 5000


def lease_link(ctx: Any) -> tuple[Client, PrimaryStreams]:
    streams = ctx.streams
    assert isinstance(streams, PrimaryStreams)

    class Events:
        def lease_granted(self, backup_id: str, seq: int) -> None:
            pass

        def lease_stream_opened(self, backup_id: str) -> None:
            pass

    streams.lease_events = Events()
    backup = open_client(
        ctx, client_properties={**BACKUP_PROPS, "qpid.ha-replication-formats": "1-3"}
    )
    backup.send(1, commands.Basic.Consume(queue=LEASE_STREAM))
    return backup, streams


def queue_bytes(frames: list[tuple[int, Any]]) -> tuple[int, list[tuple[int, int]]]:
    """Bytes of queue-stream batches (channels 2 on) in ``frames``, and the deliveries of
    the lease channel (channel, delivery tag)."""
    size = 0
    leases: list[tuple[int, int]] = []
    for channel, frame in frames:
        if type(frame).__name__ == "ContentBody" and channel >= 2:
            size += len(frame.value)
        elif isinstance(frame, commands.Basic.Deliver) and channel == 1:
            leases.append((channel, int(frame.delivery_tag or 0)))
    return size, leases


def test_a_backlog_on_several_queues_waits_on_the_primary_not_ahead_of_a_request() -> None:
    ctx, _ = primary_context()
    backup, streams = lease_link(ctx)
    codec = codec_of(3)
    for i in range(QUEUES):
        name = f"q{i}"
        ctx.vhost.declare_queue(name)
        for _ in range(MESSAGES):
            ctx.vhost.publish(ctx.vhost.exchange(""), Message("", name, body=b"x" * BODY))
    for i in range(QUEUES):
        backup.send(2 + i, commands.Channel.Open())
        stream, arguments = codec.queue_stream(f"q{i}")
        backup.send(2 + i, commands.Basic.Consume(queue=stream, arguments=arguments))
    sent, _ = queue_bytes(backup.take())
    # each channel's credit alone would let every backlog go (32 batches a channel)
    assert LINK_BYTES <= sent <= LINK_BYTES + BATCH
    lease = streams.lease_streams["b1"]
    assert lease.link is not None and all(s.link is lease.link for s in streams.queue_streams["b1"])
    assert queue_bytes(backup.take())[0] == 0  # nothing more: nothing acknowledged

    # the backup holds every batch unacknowledged (as behind a staged transaction): its
    # answer to a lease request written after them proves them read, and more go
    assert lease.request(1, 1, 0.8, True)
    size, leases = queue_bytes(backup.take())
    assert size == 0 and len(leases) == 1
    backup.send(1, commands.Basic.Ack(delivery_tag=leases[0][1]))
    more, _ = queue_bytes(backup.take())
    assert LINK_BYTES - BATCH <= more <= LINK_BYTES + BATCH

    # a request written now has at most the bound (plus a batch) ahead of it
    assert lease.request(2, 1, 0.8, True)
    assert lease.link.unread <= LINK_BYTES + BATCH

    # closing a channel gives its bytes back: they are no longer ahead of anything
    unacknowledged = lease.link.unacknowledged
    backup.send(2, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    backup.take()
    assert lease.link.unacknowledged < unacknowledged


def test_a_format_2_link_has_no_link_credit() -> None:
    ctx, _ = primary_context()
    streams = ctx.streams
    assert isinstance(streams, PrimaryStreams)
    backup = open_client(
        ctx, client_properties={**BACKUP_PROPS, "qpid.ha-replication-formats": "1-2"}
    )
    stream, arguments = codec_of(2).queue_stream("q")
    backup.send(2, commands.Channel.Open())
    backup.send(2, commands.Basic.Consume(queue=stream, arguments=arguments))
    backup.take()
    assert [s.link for s in streams.queue_streams["b1"]] == [None]


def test_a_wake_calls_the_waiting_only_while_the_link_is_open_in_their_order() -> None:
    """10,000 waiting streams (a member catching up every queue): an acknowledgement calls
    pumps in the order they waited until one fills the link again, and leaves the rest
    waiting, in their order, uncalled (they were all called, each finding it full: a
    104 ms step in the scale soak); a pump that sent and waits anew goes to the back."""
    link = LinkCredit(limit=100)
    asked: list[int] = []

    def pump_of(key: int) -> Any:
        def pump() -> None:
            asked.append(key)
            link.sent(60)  # a batch each: two fill the link again
            link.wait(key, pump)  # it has more

        return pump

    link.sent(100)
    for key in range(10_000):
        link.wait(key, pump_of(key))
    link.acknowledged(100)
    assert asked == [0, 1] and not link.open
    link.acknowledged(120)
    assert asked == [0, 1, 2, 3]
    link.acknowledged(120)
    assert asked == [0, 1, 2, 3, 4, 5]  # 0 and 1 wait at the back, after 9,999
