"""The AMQP 1.0 connection core without sockets: headers and SASL, open, sessions, links,
credit, both settlement modes, multi-frame transfers, heartbeats, and each error in its
scope."""

from __future__ import annotations

import functools
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.amqp10.framing import AMQP_HEADER, SASL_HEADER, TLS_HEADER, frame
from broker.amqp10.performatives import (
    Accepted,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Flow,
    Modified,
    Open,
    Released,
    SaslMechanisms,
    SaslOutcome,
    Source,
    Target,
    Transfer,
)
from broker.amqp10.sections import parse_message
from broker.amqp10.session import WINDOW
from broker.core.vhost import VirtualHost
from broker.security.sasl import Authenticator, UserDatabase
from tests.amqp10.helpers import Client10, FakeClock, make_context


def queue_with(vhost: VirtualHost, name: str = "q", durable: bool = False) -> Any:
    vhost.declare_queue(name, durable=durable)
    return vhost.queues[name]


def error_of(performative: Any) -> str:
    return str(performative.error.condition)


def test_sasl_plain_then_open_begin_attach_and_an_accepted_transfer() -> None:
    ctx = make_context()
    queue = queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    assert client.headers == [SASL_HEADER, AMQP_HEADER]
    found = client.take()
    assert isinstance(found[0], SaslMechanisms) and "PLAIN" in found[0].sasl_server_mechanisms
    assert "ANONYMOUS" not in found[0].sasl_server_mechanisms  # authentication is on
    assert isinstance(found[1], SaslOutcome) and found[1].code == 0
    assert isinstance(found[2], Open) and isinstance(found[3], Begin)
    assert client.conn.user == "guest" and client.conn.is_open
    client.attach_sender("q")
    attach, flow = client.take()
    assert isinstance(attach, Attach) and attach.role is True and attach.target.address == "q"
    assert isinstance(flow, Flow) and flow.link_credit == 256 and flow.handle == 0
    client.transfer(0, 0, b"hello", durable=True, content_type="text/plain", message_id="m-1")
    (disposition,) = client.take(Disposition)
    assert disposition.first == 0 and disposition.settled and disposition.state == Accepted()
    (entry,) = queue.entries()
    message = entry.message
    assert message.body == b"hello" and message.persistent
    assert message.exchange == "" and message.routing_key == "q"
    assert message.confirm is None  # settled at its transfer: the queued message keeps none


def test_a_presettled_transfer_gets_no_disposition() -> None:
    ctx = make_context()
    queue = queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("/queues/q", settled=True)
    client.take()
    for i in range(3):
        client.transfer(0, i, b"m%d" % i, settled=True)
    assert client.take(Disposition) == []
    assert [e.message.body for e in queue.entries()] == [b"m0", b"m1", b"m2"]


def test_consecutive_confirms_share_one_disposition_range() -> None:
    ctx = make_context()
    queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("/amq/queue/q")
    client.take()
    # One read holding three transfers: their dispositions go out together, as one range.
    from broker.amqp10.sections import AmqpMessage, Data

    payload = AmqpMessage(body=[Data(b"x")]).encode()
    data = b"".join(
        frame(0, Transfer(handle=0, delivery_id=i, delivery_tag=b"t", settled=False), payload)
        for i in range(3)
    )
    client.send_bytes(data)
    (disposition,) = client.take(Disposition)
    assert (disposition.first, disposition.last) == (0, 2)


def test_a_receiver_gets_what_its_credit_allows_and_settles_by_outcome() -> None:
    ctx = make_context()
    queue = queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q")
    for i in range(3):
        client.transfer(0, i, b"m%d" % i, settled=True, content_type="text/plain")
    client.attach_receiver("q", handle=1)
    client.take()
    client.credit(1, 2)
    sent = client.transfers()
    assert [parse_message(p).data for _, p in sent] == [b"m0", b"m1"]
    properties = parse_message(sent[0][1]).properties
    assert properties is not None and properties.content_type == "text/plain"
    assert all(t.settled is False for t, _ in sent)
    assert queue.message_count == 1 and queue.unacked == 2
    first, second = (int(t.delivery_id or 0) for t, _ in sent)
    client.send(0, Disposition(role=True, first=first, settled=True, state=Accepted()))
    assert queue.unacked == 1 and queue.acked_total == 1
    client.send(0, Disposition(role=True, first=second, settled=True, state=Released()))
    assert queue.unacked == 0 and queue.message_count == 2  # released: back on the queue
    client.credit(1, 5, delivery_count=2)
    again = client.transfers()
    assert [parse_message(p).data for _, p in again] == [b"m1", b"m2"]
    header = parse_message(again[0][1]).header
    assert header is not None and header.delivery_count == 1 and not header.first_acquirer
    ids = [int(t.delivery_id or 0) for t, _ in again]
    client.send(
        0,
        Disposition(role=True, first=ids[0], last=ids[1], settled=True,
                    state=Modified(undeliverable_here=True)),
    )  # fmt: skip
    assert queue.message_count == 0 and queue.unacked == 0  # dead-lettered (none: dropped)


def test_a_detach_requeues_what_was_not_settled() -> None:
    ctx = make_context()
    queue = queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q", settled=True)
    client.transfer(0, 0, b"only", settled=True)
    client.attach_receiver("q", handle=1)
    client.credit(1, 10)
    assert len(client.transfers()) == 1 and queue.unacked == 1
    client.take()
    client.send(0, Detach(handle=1, closed=True))
    (detach,) = client.take(Detach)
    assert detach.handle == 1 and detach.error is None
    assert queue.unacked == 0 and queue.message_count == 1 and queue.consumer_count == 0


def test_a_presettled_receiver_takes_messages_off_at_once() -> None:
    ctx = make_context()
    queue = queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q", settled=True)
    client.transfer(0, 0, b"a", settled=True)
    client.attach_receiver("q", handle=1, settled=True)
    (reply,) = [a for a in client.take(Attach) if a.handle == 1]
    assert reply.snd_settle_mode == 1
    client.credit(1, 1)
    ((transfer, _),) = client.transfers()
    assert transfer.settled is True and queue.unacked == 0 and queue.message_count == 0


def test_large_messages_cross_in_several_frames_both_ways() -> None:
    ctx = make_context(frame_max=4096)
    queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect(max_frame_size=512)
    client.attach_sender("q")
    client.take()
    from broker.amqp10.sections import AmqpMessage, Data

    body = bytes(range(256)) * 40  # 10 KiB
    payload = AmqpMessage(body=[Data(body)]).encode()
    chunks = [payload[i : i + 3000] for i in range(0, len(payload), 3000)]
    for index, chunk in enumerate(chunks):
        more = index < len(chunks) - 1
        first = index == 0
        client.send(
            0,
            Transfer(handle=0, delivery_id=0 if first else None,
                     delivery_tag=b"big" if first else None, more=more),
            chunk,
        )  # fmt: skip
    (disposition,) = client.take(Disposition)
    assert disposition.state == Accepted()
    client.attach_receiver("q", handle=1)
    client.credit(1, 1)
    frames = client.transfers()
    assert len(frames) > 20  # the client's max-frame-size is 512
    assert all(t.more for t, _ in frames[:-1]) and not frames[-1][0].more
    assert parse_message(b"".join(p for _, p in frames)).data == body


def test_an_aborted_delivery_is_dropped() -> None:
    ctx = make_context()
    queue = queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q")
    client.send(0, Transfer(handle=0, delivery_id=0, delivery_tag=b"a", more=True), b"\x00Su")
    client.send(0, Transfer(handle=0, aborted=True))
    assert queue.message_count == 0 and client.take(Disposition) == []


def test_the_plain_amqp_header_needs_auth_off() -> None:
    ctx = make_context()
    client = Client10(ctx)
    client.send_bytes(AMQP_HEADER)
    assert client.headers == [SASL_HEADER] and client.conn.should_close
    off = make_context()
    off.authenticator = Authenticator(UserDatabase.default(), False)
    anonymous = Client10(off)
    anonymous.send_bytes(AMQP_HEADER)
    anonymous.open()
    assert anonymous.headers == [AMQP_HEADER] and anonymous.conn.is_open
    assert anonymous.conn.user == "anonymous"


def test_anonymous_is_offered_only_with_auth_off() -> None:
    off = make_context()
    off.authenticator = Authenticator(UserDatabase.default(), False)
    client = Client10(off)
    client.send_bytes(SASL_HEADER)
    (mechanisms,) = client.take(SaslMechanisms)
    assert "ANONYMOUS" in mechanisms.sasl_server_mechanisms


def test_the_tls_header_is_answered_with_ours_and_closed() -> None:
    client = Client10(make_context())
    client.send_bytes(TLS_HEADER)
    assert client.headers == [SASL_HEADER] and client.conn.should_close


def test_a_wrong_password_fails_sasl_and_closes() -> None:
    client = Client10(make_context())
    client.send_bytes(SASL_HEADER)
    from broker.amqp10.framing import FRAME_SASL
    from broker.amqp10.performatives import SaslInit

    client.send_bytes(
        frame(0, SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00bad"), kind=FRAME_SASL)
    )
    outcome = client.take(SaslOutcome)
    assert outcome[0].code == 1 and client.conn.should_close and client.conn.user is None


def test_garbage_after_the_header_closes_with_a_decode_error() -> None:
    client = Client10(make_context())
    client.login()
    client.take()
    client.send_bytes(b"\x00\x00\x00\x0c\x02\x00\x00\x00\xff\xfe\xfd\xfc")
    opened, closed = client.take()
    assert isinstance(opened, Open)  # an open first: the client had none of ours yet
    assert isinstance(closed, Close) and error_of(closed) == "amqp:decode-error"


def test_a_frame_larger_than_max_frame_size_is_a_framing_error() -> None:
    ctx = make_context(frame_max=1024)
    client = Client10(ctx)
    client.connect()
    client.take()
    client.send_bytes(b"\x00\x00\x10\x00\x02\x00\x00\x00" + bytes(4088))
    (closed,) = client.take(Close)
    assert error_of(closed) == "amqp:connection:framing-error"
    assert "exceeds max-frame-size 1024" in closed.error.description


def test_an_open_with_a_frame_size_below_512_is_refused() -> None:
    client = Client10(make_context())
    client.login()
    client.take()
    client.open(max_frame_size=100)
    (closed,) = client.take(Close)
    assert error_of(closed) == "amqp:frame-size-too-small"


def test_an_attach_to_a_missing_queue_is_not_found_and_the_session_goes_on() -> None:
    ctx = make_context()
    queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.take()
    client.attach_sender("missing")
    attach, detach = client.take()
    assert isinstance(attach, Attach) and attach.target is None
    assert isinstance(detach, Detach) and detach.closed and error_of(detach) == "amqp:not-found"
    client.attach_receiver("/queues/missing", handle=1)
    attach, detach = client.take()
    assert attach.source is None and error_of(detach) == "amqp:not-found"
    client.attach_sender("q", handle=2)
    assert isinstance(client.take(Attach)[0], Attach) and client.conn.is_open


def test_a_transfer_before_attach_ends_the_session() -> None:
    client = Client10(make_context())
    client.connect()
    client.take()
    client.transfer(5, 0, b"x")
    (end,) = client.take(End)
    assert error_of(end) == "amqp:session:unattached-handle"
    client.send(0, End())  # the client's answer: the channel is free again
    client.send(0, Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10))
    assert client.take(Begin) and client.conn.is_open


def test_a_frame_before_open_is_illegal() -> None:
    client = Client10(make_context())
    client.login()
    client.take()
    client.send(0, Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=1))
    opened, closed = client.take()
    assert isinstance(opened, Open) and error_of(closed) == "amqp:illegal-state"


def test_a_bad_address_is_an_invalid_field() -> None:
    client = Client10(make_context())
    client.connect()
    client.take()
    client.attach_sender("/nonsense/a/b/c")
    _, detach = client.take()
    assert error_of(detach) == "amqp:invalid-field"


def test_a_message_beyond_max_body_size_detaches_the_link() -> None:
    ctx = make_context(max_body_size=100)
    queue = queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q")
    client.take()
    client.transfer(0, 0, bytes(200))
    (detach,) = client.take(Detach)
    assert error_of(detach) == "amqp:link:message-size-exceeded"
    assert queue.message_count == 0
    client.transfer(0, 1, b"ignored until the client's detach")  # not an unattached handle
    assert client.take(End) == [] and client.conn.is_open


def test_the_session_window_is_refreshed_before_it_runs_out() -> None:
    ctx = make_context()
    queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q", settled=True)
    client.take()
    session = client.conn.sessions[0]
    session.incoming_window = WINDOW // 2 + 1
    client.transfer(0, 0, b"x", settled=True)
    flows = [f for f in client.take(Flow) if f.handle is None]
    assert flows and flows[-1].incoming_window == WINDOW


def test_heartbeats_both_ways() -> None:
    clock = FakeClock()
    ctx = make_context(clock, heartbeat=10)
    client = Client10(ctx)
    client.connect(idle_time_out=4000)
    (opened,) = client.take(Open)
    assert opened.idle_time_out == 10000
    clock.now += 2.5
    client.conn.tick()
    client.flush()
    assert any(p is None for _, _, p, _ in client.frames)  # an empty frame
    clock.now += 10
    client.conn.tick()  # found silent: what waited unread is read before the next tick
    clock.now += 0.25
    client.conn.tick()
    (closed,) = client.take(Close)
    assert error_of(closed) == "amqp:resource-limit-exceeded"


def test_the_client_closes() -> None:
    ctx = make_context()
    queue = queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q", settled=True)
    client.transfer(0, 0, b"a", settled=True)
    client.attach_receiver("q", handle=1)
    client.credit(1, 1)
    client.take()
    client.send(0, Close())
    assert client.take(Close) and client.conn.should_close
    assert queue.message_count == 1 and queue.consumer_count == 0  # requeued


def test_a_broker_close_is_connection_forced() -> None:
    from broker.core.errors import ReplyCode

    client = Client10(make_context())
    client.connect()
    client.take()
    client.conn.close(ReplyCode.CONNECTION_FORCED, "broker shutdown")
    (closed,) = client.take(Close)
    assert error_of(closed) == "amqp:connection:forced"


def test_the_connection_limit_counts_both_protocols() -> None:
    ctx = make_context(max_connections=1)
    first = Client10(ctx)
    first.connect()
    assert first.conn.is_open and ctx.open_connection_count() == 1
    second = Client10(ctx)
    second.login()
    second.take()
    second.open()
    (closed,) = second.take(Close)
    assert error_of(closed) == "amqp:not-allowed" and "connection limit" in str(closed.error)
    assert ctx.connection_limit_reached(1) and not ctx.connection_limit_reached(2)
    first.conn.connection_lost()
    assert ctx.open_connection_count() == 0
    assert not ctx.connection_limit_reached(1)


@functools.cache
def _fuzz_context() -> Any:
    """One broker context for every example (a fresh connection each)."""
    ctx = make_context()
    ctx.authenticator = Authenticator(UserDatabase.default(), False)  # no password hash
    queue_with(ctx.vhost)
    return ctx


@settings(max_examples=60)
@given(st.binary(max_size=300), st.booleans())
def test_arbitrary_bytes_never_escape_as_an_exception(data: bytes, framed: bool) -> None:
    """Whatever follows the login (raw, or inside a well-sized frame) is read, or answered
    with a close naming a condition: never a traceback."""
    client = Client10(_fuzz_context())
    client.send_bytes(AMQP_HEADER)
    client.open()
    client.send(0, Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10))
    client.attach_sender("q", settled=True)
    client.take()
    if framed:
        data = struct.pack(">IBBH", 8 + len(data), 2, 0, 0) + data
    client.send_bytes(data)
    closes = client.take(Close)
    assert not closes or closes[0].error is not None
    if closes:
        assert str(closes[0].error.condition).startswith("amqp:")


def test_the_anonymous_relay_routes_each_message_by_its_to() -> None:
    ctx = make_context()
    first, second = queue_with(ctx.vhost, "a"), queue_with(ctx.vhost, "b")
    client = Client10(ctx)
    client.connect()
    (opened,) = client.take(Open)
    assert "ANONYMOUS-RELAY" in (opened.offered_capabilities or ())
    client.send(
        0,
        Attach(name="relay", handle=0, role=False, source=Source(address="c"),
               target=Target(), initial_delivery_count=0),
    )  # fmt: skip
    client.take()
    client.transfer(0, 0, b"to a", to="a")
    client.transfer(0, 1, b"to b", to="/queues/b")
    client.transfer(0, 2, b"nowhere", to="/queues/missing")
    states = [d.state for d in client.take(Disposition)]
    assert states[-1] == Released() and Accepted() in states
    assert [e.message.body for e in first.entries()] == [b"to a"]
    assert [e.message.body for e in second.entries()] == [b"to b"]
    client.transfer(0, 3, b"no to")
    (detach,) = client.take(Detach)
    assert error_of(detach) == "amqp:invalid-field"


def test_external_with_a_verified_certificate() -> None:
    from broker.amqp10.framing import FRAME_SASL
    from broker.amqp10.performatives import SaslInit

    client = Client10(make_context(), tls_identity="guest")
    client.send_bytes(SASL_HEADER)
    (mechanisms,) = client.take(SaslMechanisms)
    assert mechanisms.sasl_server_mechanisms[0] == "EXTERNAL"
    client.send_bytes(frame(0, SaslInit(mechanism="EXTERNAL"), kind=FRAME_SASL))
    (outcome,) = client.take(SaslOutcome)
    assert outcome.code == 0 and client.conn.user == "guest"


def test_the_acl_is_asked_for_publish_and_consume() -> None:
    from broker.amqp.access import AccessControl
    from broker.security.acl import Acl

    ctx = make_context()
    queue_with(ctx.vhost, "ok.1")
    queue_with(ctx.vhost, "no.1")
    ctx.acl = AccessControl(
        Acl.parse(
            "acl allow all access virtualhost\n"
            "acl allow guest consume queue name=ok.*\n"
            "acl allow guest publish exchange routingkey=ok.*\n"
            "acl deny all all\n"
        ),
        ctx.log,
    )
    client = Client10(ctx)
    client.connect()
    client.take()
    client.attach_sender("ok.1", handle=0)
    client.attach_receiver("ok.1", handle=1)
    assert [a.handle for a in client.take(Attach)] == [0, 1] and not client.take(Detach)
    client.attach_sender("no.1", handle=2)
    client.attach_receiver("no.1", handle=3)
    denied = client.take(Detach)
    assert [d.handle for d in denied] == [2, 3]
    assert all(error_of(d) == "amqp:unauthorized-access" for d in denied)


def test_a_resource_alarm_grants_publishers_no_credit_until_it_clears() -> None:
    from broker.amqp10.receiver import CREDIT

    ctx = make_context()
    queue_with(ctx.vhost)
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q", settled=True)
    (granted,) = [f for f in client.take(Flow) if f.handle == 0]
    assert granted.link_credit == CREDIT
    ctx.publish_alarm = "memory"
    client.conn.publishers_blocked("memory")
    for i in range(CREDIT // 2 + 1):  # past the point where credit is topped up
        client.transfer(0, i, b"m", settled=True)
    client.attach_sender("q", handle=5, settled=True)  # a link attached during the alarm
    assert [f for f in client.take(Flow) if f.handle is not None] == []
    ctx.publish_alarm = None
    client.conn.publishers_blocked(None)
    flows = {int(f.handle): f.link_credit for f in client.take(Flow) if f.handle is not None}
    assert flows == {0: CREDIT, 5: CREDIT}
