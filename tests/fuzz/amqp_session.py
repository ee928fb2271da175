"""One fuzzing session of AMQP 0-9-1 against the primary, over a raw socket.

A *valid* session (:func:`valid_session`) speaks the protocol: a handshake, then 3-20
methods drawn from :mod:`tests.fuzz.traffic` (declares, binds of queues and exchanges,
unbinds, deletes, purges, publishes, gets and consumes with acks, rejects and requeues,
transactions), each answered before the next. Its channel is in confirm mode, in
transaction mode or neither. The broker may refuse anything with a channel or connection
close; the session then opens another channel (or ends). What must hold:

- every synchronous method is answered (its ``-ok``, or a close) within ``ANSWER_WITHIN``;
- every close carries a known reply code and never 541 INTERNAL_ERROR;
- every publish in confirm mode is confirmed (ack or nack) or its channel or connection is
  closed with a code within ``ANSWER_WITHIN``;
- the broker never drops the socket of a valid session without a close.

A *garbled* session (:func:`garbled_session`) sends a valid session's frames mutated (bytes
flipped, inserted, cut; frames dropped, repeated, swapped) with methods out of order
(content without a publish, an ack of nothing, a commit outside a transaction, a method on
a channel never opened): the broker closes with a known code, never 541, or keeps waiting
for the rest of a cut frame.

Violations are returned as findings (one line each); nothing raises for the broker's sake.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pamqp import body as content_body
from pamqp import commands, frame, header, heartbeat
from pamqp.base import Frame as Method
from pamqp.exceptions import UnmarshalingException

from broker.core.errors import ReplyCode
from tests.fuzz import traffic
from tests.fuzz.traffic import unchecked

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MAX = 131072
#: How long the broker may take to answer a method or settle a confirm (it is a timeout of
#: the fuzzer, never of the broker: a slower answer is reported, not retried).
ANSWER_WITHIN = 15.0
KNOWN_CODES = frozenset(int(code) for code in ReplyCode) - {int(ReplyCode.INTERNAL_ERROR)}
_HEAD = struct.Struct(">BHI")


@dataclass
class Tally:
    """What sessions did (summed over a run)."""

    sessions: Counter[str] = field(default_factory=Counter)
    operations: int = 0
    publishes: int = 0
    confirms: int = 0  # basic.ack received for a confirmed publish
    nacks: int = 0
    closed_confirms: int = 0  # publishes whose channel or connection closed first
    commits: int = 0
    closes: Counter[int] = field(default_factory=Counter)
    #: Reply texts of closes, digits and quoted names blanked (what was refused, roughly).
    reasons: Counter[str] = field(default_factory=Counter)
    contract_refusals: int = 0
    findings: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.sessions.update(other.sessions)
        self.operations += other.operations
        self.publishes += other.publishes
        self.confirms += other.confirms
        self.nacks += other.nacks
        self.closed_confirms += other.closed_confirms
        self.commits += other.commits
        self.closes.update(other.closes)
        self.reasons.update(other.reasons)
        self.contract_refusals += other.contract_refusals
        self.findings += other.findings


class Closed(Exception):
    """The connection ended (a close received, or the socket closed)."""


class ChannelClosed(Exception):
    def __init__(self, close: commands.Channel.Close) -> None:
        super().__init__(close.reply_text)
        self.close = close


class Wire:
    """A socket speaking frames (pamqp), with a deadline on every read."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def method(self, channel: int, method: Method) -> None:
        self.send(frame.marshal(method, channel))

    def read(self, deadline: float) -> tuple[int, Any] | None:
        """The next frame, None at end of stream; TimeoutError after ``deadline``."""
        while True:
            if len(self.buffer) >= 7:
                _, channel, size = _HEAD.unpack_from(self.buffer)
                if len(self.buffer) >= size + 8:
                    raw, self.buffer = self.buffer[: size + 8], self.buffer[size + 8 :]
                    try:
                        return frame.unmarshal(raw)[1:]
                    except UnmarshalingException:
                        return channel, raw
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(262144)
            except TimeoutError:
                raise TimeoutError from None
            except OSError:
                data = b""
            if not data:
                return None
            self.buffer += data

    def close(self) -> None:
        self.sock.close()


def reason(code: int, text: str) -> str:
    """``text`` without its names and numbers: the kind of refusal."""
    text = re.sub(r"'[^']*'", "'.'", text)
    return f"{code} " + re.sub(r"[0-9]+", "N", text)[:70]


def _is_contract_refusal(text: str) -> bool:
    return "bytes" in text or "nest" in text or "32-bit" in text


class Session:
    """A valid session's client side: one channel at a time, its mode kept on reopening."""

    def __init__(self, port: int, rng: random.Random, tally: Tally) -> None:
        self.rng = rng
        self.tally = tally
        self.wire = Wire(port)
        self.channel = 0
        self.mode = rng.choice(("confirm", "confirm", "tx", "plain"))
        self.next_seq = 1
        self.unconfirmed: set[int] = set()
        self.deliveries: list[int] = []  # delivery tags to settle
        self.consumers: list[str] = []

    # -- reading ---------------------------------------------------------------------
    def _handle(self, channel: int, value: Any) -> None:
        """A frame that is not the awaited answer."""
        if isinstance(value, commands.Connection.Close):
            self._closed_by_broker(int(value.reply_code or 0), str(value.reply_text), "connection")
            self.wire.method(0, commands.Connection.CloseOk())
            raise Closed
        if isinstance(value, commands.Channel.Close):
            self._closed_by_broker(int(value.reply_code or 0), str(value.reply_text), "channel")
            raise ChannelClosed(value)
        if isinstance(value, commands.Basic.Ack | commands.Basic.Nack):
            tag = int(value.delivery_tag or 0)
            done = {s for s in self.unconfirmed if s <= tag} if value.multiple else {tag}
            done &= self.unconfirmed
            self.unconfirmed -= done
            if isinstance(value, commands.Basic.Ack):
                self.tally.confirms += len(done)
            else:
                self.tally.nacks += len(done)
        elif isinstance(value, commands.Basic.Deliver):
            self.deliveries.append(int(value.delivery_tag or 0))

    def _closed_by_broker(self, code: int, text: str, scope: str) -> None:
        self.tally.closes[code] += 1
        self.tally.reasons[reason(code, text)] += 1
        if code not in KNOWN_CODES:
            self.tally.findings.append(f"{scope} closed with {code}: {text}")
        if code == ReplyCode.PRECONDITION_FAILED and _is_contract_refusal(text):
            self.tally.contract_refusals += 1
        self.tally.closed_confirms += len(self.unconfirmed)
        self.unconfirmed.clear()
        self.deliveries.clear()
        self.consumers.clear()

    def await_answer(self, *answers: type[Method], what: str) -> Any:
        deadline = time.monotonic() + ANSWER_WITHIN
        while True:
            try:
                got = self.wire.read(deadline)
            except TimeoutError:
                self.tally.findings.append(f"no answer to {what} in {ANSWER_WITHIN} s")
                raise Closed from None
            if got is None:
                self.tally.findings.append(f"socket closed without a close after {what}")
                raise Closed
            channel, value = got
            if isinstance(value, answers) and channel == self.channel:
                return value
            self._handle(channel, value)

    def call(self, method: Method, *answers: type[Method]) -> Any:
        """Send ``method`` and wait for one of ``answers``; now and then with ``nowait``
        set where the method has it (no answer then: a refusal closes the channel, met
        by a later wait)."""
        self.tally.operations += 1
        if hasattr(method, "nowait") and self.rng.random() < 0.1:
            method.nowait = True
            self.wire.method(self.channel, method)
            return None
        self.wire.method(self.channel, method)
        return self.await_answer(*answers, what=method.name)

    # -- the session -----------------------------------------------------------------
    def handshake(self) -> None:
        self.wire.send(PROTOCOL_HEADER)
        self.await_answer(commands.Connection.Start, what="the protocol header")
        self.wire.method(
            0,
            commands.Connection.StartOk(
                client_properties={
                    "product": "ha fuzz",
                    "capabilities": {"publisher_confirms": True},
                },
                mechanism="PLAIN",
                response="\0guest\0guest",
            ),
        )
        self.await_answer(commands.Connection.Tune, what="start-ok")
        self.wire.method(
            0, commands.Connection.TuneOk(channel_max=0, frame_max=FRAME_MAX, heartbeat=0)
        )
        self.wire.method(0, commands.Connection.Open(virtual_host="/"))
        self.await_answer(commands.Connection.OpenOk, what="connection.open")

    def open_channel(self) -> None:
        self.channel += 1
        self.next_seq = 1
        self.call(commands.Channel.Open(), commands.Channel.OpenOk)
        if self.mode == "confirm":
            self.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        elif self.mode == "tx":
            self.call(commands.Tx.Select(), commands.Tx.SelectOk)

    def run(self) -> None:
        try:
            self.handshake()
            self.open_channel()
            if self.rng.random() < 0.7:  # most sessions work on a queue that is there
                self.call(
                    unchecked(
                        commands.Queue.Declare,
                        queue=(name := self.rng.choice(traffic.QUEUES[:4])),
                        arguments=traffic.USUAL_ARGUMENTS[name],
                    ),
                    commands.Queue.DeclareOk,
                )
            for _ in range(self.rng.randint(3, 20)):
                try:
                    self.step()
                except ChannelClosed as closed:
                    self.wire.method(self.channel, commands.Channel.CloseOk())
                    del closed
                    self.open_channel()
            self.wait_confirms()
            if self.rng.random() < 0.7:
                self.channel = 0  # connection.close goes on channel 0
                close = commands.Connection.Close(
                    reply_code=200, reply_text="bye", class_id=0, method_id=0
                )
                self.call(close, commands.Connection.CloseOk)
        except (Closed, ChannelClosed):
            pass
        except OSError as exc:  # a reset: the broker closed the socket without a close
            self.tally.findings.append(f"socket error in a valid session: {exc}")
        finally:
            self.wire.close()

    def wait_confirms(self) -> None:
        deadline = time.monotonic() + ANSWER_WITHIN
        while self.unconfirmed:
            try:
                got = self.wire.read(deadline)
            except TimeoutError:
                self.tally.findings.append(
                    f"{len(self.unconfirmed)} confirms missing after {ANSWER_WITHIN} s"
                )
                raise Closed from None
            if got is None:
                self.tally.findings.append("socket closed with confirms outstanding")
                raise Closed
            self._handle(*got)

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.12:
            name = traffic.queue_name(rng)
            self.call(
                unchecked(
                    commands.Queue.Declare,
                    queue=name,
                    passive=rng.random() < 0.1,
                    durable=rng.random() < 0.5,
                    exclusive=rng.random() < 0.1,
                    auto_delete=rng.random() < 0.1,
                    arguments=traffic.queue_arguments(rng, name),
                ),
                commands.Queue.DeclareOk,
            )
        elif roll < 0.2:
            self.call(
                unchecked(
                    commands.Exchange.Declare,
                    exchange=traffic.declared_exchange(rng),
                    exchange_type=rng.choice((*traffic.EXCHANGE_TYPES, "bogus")),
                    passive=rng.random() < 0.05,
                    durable=rng.random() < 0.5,
                    auto_delete=rng.random() < 0.05,
                    internal=rng.random() < 0.05,
                    arguments=traffic.exchange_arguments(rng),
                ),
                commands.Exchange.DeclareOk,
            )
        elif roll < 0.3:
            bind = rng.random() < 0.7
            kind = commands.Queue.Bind if bind else commands.Queue.Unbind
            answer = commands.Queue.BindOk if bind else commands.Queue.UnbindOk
            self.call(
                unchecked(
                    kind,
                    queue=traffic.queue_name(rng),
                    exchange=traffic.declared_exchange(rng),
                    routing_key=traffic.routing_key(rng),
                    arguments=traffic.binding_arguments(rng),
                ),
                answer,
            )
        elif roll < 0.36:
            bind = rng.random() < 0.65
            ekind = commands.Exchange.Bind if bind else commands.Exchange.Unbind
            eanswer = commands.Exchange.BindOk if bind else commands.Exchange.UnbindOk
            self.call(
                unchecked(
                    ekind,
                    destination=traffic.declared_exchange(rng),
                    source=traffic.declared_exchange(rng),
                    routing_key=traffic.routing_key(rng),
                    arguments=traffic.binding_arguments(rng),
                ),
                eanswer,
            )
        elif roll < 0.39:
            self.call(
                unchecked(commands.Queue.Purge, queue=traffic.queue_name(rng)),
                commands.Queue.PurgeOk,
            )
        elif roll < 0.42:
            self.call(
                unchecked(
                    commands.Queue.Delete,
                    queue=traffic.queue_name(rng),
                    if_unused=rng.random() < 0.2,
                    if_empty=rng.random() < 0.2,
                ),
                commands.Queue.DeleteOk,
            )
        elif roll < 0.44:
            self.call(
                unchecked(
                    commands.Exchange.Delete,
                    exchange=traffic.exchange_name(rng),
                    if_unused=rng.random() < 0.2,
                ),
                commands.Exchange.DeleteOk,
            )
        elif roll < 0.7:
            for _ in range(rng.randint(1, 5)):
                self.publish()
            if rng.random() < 0.4:
                self.wait_confirms()  # as a client waiting for its confirms does
        elif roll < 0.8:
            self.get()
        elif roll < 0.84:
            self.consume()
        elif roll < 0.93:
            self.settle()
        elif roll < 0.97:
            self.transaction()
        else:
            self.odd()

    def publish(self) -> None:
        rng = self.rng
        self.tally.operations += 1
        self.tally.publishes += 1
        data = traffic.body(rng)
        frames = frame.marshal(
            unchecked(
                commands.Basic.Publish,
                exchange="" if rng.random() < 0.6 else traffic.exchange_name(rng),
                routing_key=traffic.queue_name(rng)
                if rng.random() < 0.6
                else traffic.routing_key(rng),
                mandatory=rng.random() < 0.2,
            ),
            self.channel,
        )
        frames += frame.marshal(
            header.ContentHeader(0, len(data), traffic.properties(rng)), self.channel
        )
        chunk = FRAME_MAX - 8
        for start in range(0, len(data), chunk):
            frames += frame.marshal(
                content_body.ContentBody(data[start : start + chunk]), self.channel
            )
        self.wire.send(frames)
        if self.mode == "confirm":
            self.unconfirmed.add(self.next_seq)
            self.next_seq += 1

    def get(self) -> None:
        answer = self.call(
            unchecked(
                commands.Basic.Get,
                queue=traffic.queue_name(self.rng),
                no_ack=self.rng.random() < 0.2,
            ),
            commands.Basic.GetOk,
            commands.Basic.GetEmpty,
        )
        if isinstance(answer, commands.Basic.GetOk):
            if not self.rng.random() < 0.2:  # not no_ack: settle it later
                self.deliveries.append(int(answer.delivery_tag or 0))
            self._skip_content(int(answer.delivery_tag or 0))

    def _skip_content(self, tag: int) -> None:
        """Read the get-ok's header and body frames (other frames handled meanwhile)."""
        deadline = time.monotonic() + ANSWER_WITHIN
        size: int | None = None
        received = 0
        while size is None or received < size:
            got = self.wire.read(deadline)
            if got is None:
                self.tally.findings.append(f"socket closed inside the content of get-ok {tag}")
                raise Closed
            channel, value = got
            if isinstance(value, header.ContentHeader) and channel == self.channel and size is None:
                size = int(value.body_size or 0)
            elif isinstance(value, content_body.ContentBody) and channel == self.channel:
                received += len(value.value)
            elif isinstance(value, bytes) and value[0] == 2 and size is None:  # a header
                size = struct.unpack_from(">Q", value, 11)[0]  # pamqp could not decode
            elif isinstance(value, bytes) and value[0] == 3:
                received += len(value) - 8
            else:
                self._handle(channel, value)

    def consume(self) -> None:
        tag = f"c{len(self.consumers)}"
        self.call(
            unchecked(commands.Basic.Qos, prefetch_count=self.rng.randint(0, 5)),
            commands.Basic.QosOk,
        )
        self.call(
            unchecked(commands.Basic.Consume, queue=traffic.queue_name(self.rng), consumer_tag=tag),
            commands.Basic.ConsumeOk,
        )
        self.consumers.append(tag)
        if self.rng.random() < 0.5:
            self.call(unchecked(commands.Basic.Cancel, consumer_tag=tag), commands.Basic.CancelOk)
            self.consumers.remove(tag)

    def settle(self) -> None:
        """Ack, reject or nack (requeue or not) held deliveries; now and then a tag never
        delivered (the broker closes the channel with 406)."""
        rng = self.rng
        if not self.deliveries and rng.random() < 0.8:
            self.publish()
            return
        self.tally.operations += 1
        if not self.deliveries or rng.random() < 0.05:
            tag = rng.randint(1, 1000)
        else:
            tag = self.deliveries.pop(rng.randrange(len(self.deliveries)))
        kind = rng.choice(("ack", "ack", "reject", "nack"))
        requeue = rng.random() < 0.5
        if kind == "ack":
            method: Method = unchecked(
                commands.Basic.Ack, delivery_tag=tag, multiple=rng.random() < 0.2
            )
        elif kind == "reject":
            method = unchecked(commands.Basic.Reject, delivery_tag=tag, requeue=requeue)
        else:
            method = unchecked(
                commands.Basic.Nack, delivery_tag=tag, multiple=rng.random() < 0.2, requeue=requeue
            )
        self.wire.method(self.channel, method)

    def odd(self) -> None:
        """A method clients seldom send, or one the channel's mode refuses (406)."""
        choice = self.rng.randrange(5)
        if choice == 0:
            self.call(unchecked(commands.Basic.Recover, requeue=True), commands.Basic.RecoverOk)
        elif choice == 1:
            self.call(commands.Channel.Flow(active=True), commands.Channel.FlowOk)
        elif choice == 2:
            self.call(commands.Confirm.Select(), commands.Confirm.SelectOk)  # 406 in tx mode
        elif choice == 3:
            self.call(commands.Tx.Select(), commands.Tx.SelectOk)  # 406 in confirm mode
        else:
            self.tally.operations += 1
            publish = unchecked(commands.Basic.Publish, routing_key="fz.q", immediate=True)
            self.wire.method(self.channel, publish)  # refused (540): its content never sent

    def transaction(self) -> None:
        if self.mode != "tx" and self.rng.random() < 0.8:
            self.publish()  # a commit outside a transaction now and then only (503)
            return
        if self.rng.random() < 0.7:
            self.tally.commits += 1
            self.call(commands.Tx.Commit(), commands.Tx.CommitOk)
        else:
            self.call(commands.Tx.Rollback(), commands.Tx.RollbackOk)


def valid_session(port: int, rng: random.Random) -> Tally:
    tally = Tally()
    tally.sessions["valid"] += 1
    Session(port, rng, tally).run()
    return tally


# -- garbled sessions ---------------------------------------------------------------------
def _frames(rng: random.Random) -> list[bytes]:
    """A valid session's frames (one channel, random methods), for mutation."""
    q, x, key = traffic.queue_name, traffic.exchange_name, traffic.routing_key
    arguments = traffic.queue_arguments(rng)
    start_ok = commands.Connection.StartOk(
        client_properties={"product": "garbled"}, mechanism="PLAIN", response="\0guest\0guest"
    )
    methods: list[tuple[int, Method]] = [
        (0, start_ok),
        (0, commands.Connection.TuneOk(channel_max=0, frame_max=FRAME_MAX, heartbeat=0)),
        (0, commands.Connection.Open(virtual_host="/")),
        (1, commands.Channel.Open()),
        (1, rng.choice((commands.Confirm.Select(), commands.Tx.Select()))),
        (1, unchecked(commands.Queue.Declare, queue=q(rng), arguments=arguments)),
        (1, unchecked(commands.Queue.Bind, queue=q(rng), exchange=x(rng), routing_key=key(rng))),
        (1, unchecked(commands.Exchange.Bind, destination=x(rng), source=x(rng))),
        (1, unchecked(commands.Basic.Consume, queue=q(rng))),
    ]
    frames = [PROTOCOL_HEADER] + [frame.marshal(m, ch) for ch, m in methods]
    for _ in range(rng.randint(1, 3)):
        data = traffic.body(rng)[:5000]
        frames.append(
            frame.marshal(
                unchecked(commands.Basic.Publish, exchange="", routing_key=traffic.queue_name(rng)),
                1,
            )
        )
        frames.append(frame.marshal(header.ContentHeader(0, len(data), traffic.properties(rng)), 1))
        if data:
            frames.append(frame.marshal(content_body.ContentBody(data), 1))
    frames += [
        frame.marshal(unchecked(commands.Basic.Ack, delivery_tag=1), 1),
        frame.marshal(commands.Tx.Commit(), 1),
        frame.marshal(unchecked(commands.Queue.Purge, queue=traffic.queue_name(rng)), 1),
        frame.marshal(unchecked(commands.Queue.Delete, queue=traffic.queue_name(rng)), 1),
        frame.marshal(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0
        ),
    ]
    return frames


#: Methods out of order: valid frames where the protocol does not expect them.
def _out_of_order(rng: random.Random) -> bytes:
    channel = rng.choice((1, 1, 2, 7, 65535))
    choice = rng.randrange(6)
    if choice == 0:
        return frame.marshal(
            header.ContentHeader(0, 3, unchecked(commands.Basic.Properties)), channel
        )
    if choice == 1:
        return frame.marshal(content_body.ContentBody(b"abc"), channel)
    if choice == 2:
        return frame.marshal(
            unchecked(commands.Basic.Ack, delivery_tag=rng.randint(0, 99), multiple=True), channel
        )
    if choice == 3:
        return frame.marshal(commands.Tx.Commit(), channel)
    if choice == 4:
        return frame.marshal(commands.Connection.Open(virtual_host="/"), 0)
    return frame.marshal(heartbeat.Heartbeat(), channel)


def garbled_session(port: int, rng: random.Random, linger: float = 0.5) -> Tally:
    tally = Tally()
    tally.sessions["garbled"] += 1
    frames = _frames(rng)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(1, len(frames))
        data = bytearray(frames[i])
        kind = rng.choice(("flip", "insert", "truncate", "drop", "repeat", "swap", "order"))
        if kind == "flip" and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
            frames[i] = bytes(data)
        elif kind == "insert":
            at = rng.randint(0, len(data))
            frames[i] = bytes(data[:at]) + rng.randbytes(rng.randint(1, 16)) + bytes(data[at:])
        elif kind == "truncate":
            frames[i] = bytes(data[: rng.randrange(len(data) or 1)])
        elif kind == "drop":
            del frames[i]
        elif kind == "repeat":
            frames.insert(i, frames[i])
        elif kind == "swap" and i + 1 < len(frames):
            frames[i], frames[i + 1] = frames[i + 1], frames[i]
        else:
            frames.insert(i, _out_of_order(rng))
    tally.operations += len(frames)
    wire = Wire(port)
    try:
        try:
            wire.send(b"".join(frames))
        except OSError:
            return tally  # closed while we were still sending: fine
        deadline = time.monotonic() + linger
        while True:
            try:
                got = wire.read(deadline)
            except (TimeoutError, OSError):
                return tally  # waiting for the rest of a cut frame, or reset after a close
            if got is None:
                return tally
            _, value = got
            if isinstance(value, commands.Connection.Close | commands.Channel.Close):
                tally.closes[int(value.reply_code or 0)] += 1
                if value.reply_code not in KNOWN_CODES:
                    tally.findings.append(
                        f"garbled session closed with {value.reply_code}: {value.reply_text}"
                    )
    finally:
        wire.close()
