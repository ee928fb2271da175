"""Two lean bench clients of the same shape, one per protocol: the broker's share, measured.

bench/amqp10_throughput.py's other client pairs (Proton and pika, rhea and amqplib) are
whole libraries whose own cost per message decides the rate on a machine whose two cores
the clients share with the broker: Proton's Python binding spends several times pika's CPU
a message, rhea about twice amqplib's. These two clients are written alike, against the
specifications, so the client side costs about the same in either protocol and little:

- one blocking socket a process, one ``recv`` of up to :data:`READ` bytes at a time, every
  frame of it handled, then at most one ``sendall`` of everything that read made due;
- the producer's frames built from a template (only the sequence number and the delivery
  id change), the broker's answers read by hand (0-9-1: basic.ack; 1.0: a disposition or
  a flow, by the broker's own hand reader of ``broker.amqp10.framing``; one frame covers
  many messages);
- the consumer settles in ranges (0-9-1: basic.ack multiple; 1.0: one disposition, accepted
  and settled, and one flow topping the link credit back up to the prefetch, as 0-9-1's
  basic.qos would) each time a quarter of the prefetch is unsettled, and at the end.

The handshakes (0-9-1: PLAIN, a channel, confirm.select or basic.qos and basic.consume; 1.0:
SASL PLAIN, open, begin, attach, the consumer's first flow) are encoded by pamqp and by the
broker's 1.0 codec (``broker.amqp10``): they are not timed. Bodies start with
:data:`throughput_clients.HEADER` (producer id, sequence number) and the consumer checks
each arrives exactly once. :func:`run_client` is a child process's whole life (the
multiprocessing contract of bench/amqp10_throughput.py: ``("ready", role)``, then one
``(role, result)``).
"""

from __future__ import annotations

import signal
import socket
import struct
import time
from array import array
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pamqp import commands, frame
from throughput_clients import GRACE_S, HEADER, ChildSpec, child_signals

from broker.amqp10 import codec
from broker.amqp10.framing import (
    AMQP_HEADER,
    FRAME_SASL,
    SASL_HEADER,
    delivery_transfer,
    read_flow_or_disposition,
    read_transfer,
)
from broker.amqp10.framing import frame as frame10
from broker.amqp10.performatives import (
    RECEIVER,
    SENDER,
    Accepted,
    Attach,
    Begin,
    Close,
    Disposition,
    Flow,
    Open,
    SaslInit,
    SaslOutcome,
    Source,
    Target,
)

#: The most one ``recv`` takes.
READ = 1 << 18
_HEAD10 = struct.Struct(">IBBH")
_HEAD091 = struct.Struct(">BHI")
_TAG = struct.Struct(">Q")
#: What the 1.0 client's begin offers as its incoming window (never runs out in a run).
_WINDOW = 1 << 30


class Failed(Exception):
    """The broker refused or closed something: one line for the report."""


# -- AMQP 0-9-1 ------------------------------------------------------------------------------
class Conn091:
    """A 0-9-1 socket after the handshake, channel 1 open; ``timeout``: seconds any one
    socket call may block (None: for ever)."""

    def __init__(self, host: str, port: int, timeout: float | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(commands.Connection.Start)
        self.send(0, commands.Connection.StartOk(
            client_properties={"product": "lean bench"}, mechanism="PLAIN",
            response="\0guest\0guest"))  # fmt: skip
        tune = self.expect(commands.Connection.Tune)
        self.send(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                frame_max=tune.frame_max, heartbeat=0))  # fmt: skip
        self.send(0, commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)
        self.send(1, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def send(self, channel: int, value: Any) -> None:
        self.sock.sendall(frame.marshal(value, channel))

    def expect(self, kind: type) -> Any:
        while True:
            while len(self.buf) >= 7:
                size = _HEAD091.unpack_from(self.buf, 0)[2]
                if len(self.buf) < size + 8:
                    break
                _, _, value = frame.unmarshal(bytes(self.buf[: size + 8]))
                del self.buf[: size + 8]
                if isinstance(value, kind):
                    return value
                if isinstance(value, commands.Connection.Close | commands.Channel.Close):
                    raise Failed(f"{value.reply_code} {value.reply_text}")
            data = self.sock.recv(READ)
            if not data:
                raise Failed("socket closed in the handshake")
            self.buf += data


def produce_091(host: str, port: int, queue: str, idx: int, count: int, size: int,
                window: int, go: Any, *, persistent: bool = False,
                timeout: float | None = None,
                ready: Callable[[], Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Publish ``count`` bodies to ``queue`` with confirms, at most ``window`` unconfirmed,
    once ``go`` is set (``ready`` called before waiting for it); ``persistent``:
    delivery_mode 2 (the content header's one property), else none."""
    conn = Conn091(host, port, timeout)
    conn.send(1, commands.Confirm.Select())
    conn.expect(commands.Confirm.SelectOk)
    if ready is not None:
        ready()
    sock, buf = conn.sock, conn.buf
    key = queue.encode()
    method = b"\x00\x3c\x00\x28\x00\x00\x00" + bytes((len(key),)) + key + b"\x00"
    # method frame, content header (class 60; no properties, or delivery-mode alone: flag
    # bit 12, then its octet), the body frame's head
    props = b"\x10\x00\x02" if persistent else b"\x00\x00"
    head = (
        _HEAD091.pack(1, 1, len(method)) + method + b"\xce"
        + _HEAD091.pack(2, 1, 12 + len(props)) + b"\x00\x3c\x00\x00" + _TAG.pack(size)
        + props + b"\xce" + _HEAD091.pack(3, 1, size)
    )  # fmt: skip
    pad = b"x" * (size - HEADER.size) + b"\xce"
    sent_at = array("d", bytes(8 * count))
    latencies: list[float] = []
    go.wait()
    first_at = now = time.monotonic()
    cpu = time.process_time()
    sent = confirmed = refused = 0
    pack = HEADER.pack
    while True:
        out = []
        while sent < count and sent - confirmed - refused < window:
            out.append(head + pack(idx, sent) + pad)
            sent_at[sent] = time.monotonic()
            sent += 1
        if out:
            sock.sendall(b"".join(out))
        if confirmed + refused >= count:
            break
        data = sock.recv(READ)
        if not data:
            raise Failed("socket closed")
        buf += data
        pos, end, now = 0, len(buf), time.monotonic()
        while end - pos >= 7:
            kind, _ch, fsize = _HEAD091.unpack_from(buf, pos)
            if end - pos < fsize + 8:
                break
            cm = bytes(buf[pos + 7 : pos + 11])
            if cm in (b"\x00\x3c\x00\x50", b"\x00\x3c\x00\x78"):  # basic.ack, basic.nack
                upto = _TAG.unpack_from(buf, pos + 11)[0]  # the tag: sequence number + 1
                multiple = buf[pos + 19] & 1  # every tag not yet confirmed, up to it
                first = confirmed + refused if multiple else upto - 1
                for seq in range(first, upto):
                    latencies.append(now - sent_at[seq])
                if cm == b"\x00\x3c\x00\x50":
                    confirmed += upto - first
                else:
                    refused += upto - first
            elif kind == 1:
                raise Failed(f"unexpected method {cm.hex()}")
            pos += fsize + 8
        del buf[:pos]
    cpu = time.process_time() - cpu
    sock.close()
    return {"accepted": confirmed, "refused": refused, "latencies": latencies, "cpu_s": cpu,
            "first_at": first_at, "last_at": now}  # fmt: skip


def consume_091(host: str, port: int, queue: str, count: int, size: int, prefetch: int,
                ready: Any, *, idx: int | None = None, linger: float = 0.0,
                timeout: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Consume ``count`` bodies from ``queue``, acking in ranges. ``idx``: the producer whose
    sequence numbers 0..count-1 are expected (another's, or one out of range, is counted as
    foreign and not as received); ``linger``: seconds to go on reading once ``count`` have
    come, any more counted (duplicates or foreign)."""
    conn = Conn091(host, port, timeout)
    conn.send(1, commands.Basic.Qos(prefetch_count=prefetch))
    conn.expect(commands.Basic.QosOk)
    conn.send(1, commands.Basic.Consume(queue=queue, consumer_tag="c"))
    conn.expect(commands.Basic.ConsumeOk)
    ready()
    sock, buf = conn.sock, conn.buf
    seen: set[tuple[int, int]] = set()
    duplicates = foreign = received = acked = last_tag = 0
    first_at = last_at = 0.0
    every = max(1, prefetch // 4)
    unpack = HEADER.unpack_from
    cpu = time.process_time()
    until: float | None = None  # with linger: when to stop reading
    # Deliveries may have come in the same read as consume-ok: what is buffered goes first.
    read = not buf
    while True:
        if received >= count:
            if until is None:
                until = time.monotonic() + linger
            left = until - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
        if read:
            try:
                data = sock.recv(READ)
            except TimeoutError:
                if until is None:
                    raise
                break  # lingered long enough
            if not data:
                raise Failed("socket closed")
            buf += data
        read = True
        pos, end = 0, len(buf)
        while end - pos >= 7:
            kind, _ch, fsize = _HEAD091.unpack_from(buf, pos)
            if end - pos < fsize + 8:
                break
            if kind == 3:  # a body (one frame: frame_max is far above the body size)
                if fsize != size:
                    raise Failed(f"a body frame of {fsize} bytes, not {size}")
                key = unpack(buf, pos + 7)
                if idx is not None and (key[0] != idx or not 0 <= key[1] < count):
                    foreign += 1
                elif key in seen:
                    duplicates += 1
                else:
                    seen.add(key)
                    received += 1
            elif kind == 1:
                if buf[pos + 7 : pos + 11] == b"\x00\x3c\x00\x3c":  # basic.deliver
                    at = pos + 12 + buf[pos + 11]
                    last_tag = _TAG.unpack_from(buf, at)[0]
                else:
                    raise Failed(f"unexpected method {bytes(buf[pos + 7 : pos + 11]).hex()}")
            pos += fsize + 8
        del buf[:pos]
        if received and not first_at:
            first_at = time.monotonic()
        if until is None:
            last_at = time.monotonic()
        if last_tag - acked >= every or (received >= count and last_tag > acked):
            payload = b"\x00\x3c\x00\x50" + _TAG.pack(last_tag) + b"\x01"
            sock.sendall(_HEAD091.pack(1, 1, len(payload)) + payload + b"\xce")
            acked = last_tag
    cpu = time.process_time() - cpu
    sock.close()
    return {"received": len(seen), "duplicates": duplicates, "foreign": foreign,
            "first_at": first_at, "last_at": last_at, "cpu_s": cpu}  # fmt: skip


# -- AMQP 1.0 --------------------------------------------------------------------------------
class Conn10:
    """A 1.0 socket after SASL PLAIN, open and begin (channel 0), with one link attached."""

    def __init__(self, host: str, port: int, attach: Attach) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pending: list[Any] = []
        self.sock.sendall(SASL_HEADER)
        self.expect(None)  # the header, sasl-mechanisms
        init = SaslInit(mechanism="PLAIN", initial_response=b"\0guest\0guest")
        self.sock.sendall(frame10(0, init, kind=FRAME_SASL))
        outcome = self.expect(SaslOutcome)
        if outcome.code != 0:
            raise Failed(f"sasl-outcome {outcome.code}")
        self.sock.sendall(
            AMQP_HEADER
            + frame10(0, Open(container_id="lean-bench", max_frame_size=1 << 20))
            + frame10(
                0, Begin(next_outgoing_id=0, incoming_window=_WINDOW, outgoing_window=_WINDOW)
            )
            + frame10(0, attach)
        )
        self.expect(Attach)

    def frames(self) -> list[tuple[bytes, int]]:
        """Every whole frame read so far: (body, offset of the first frame byte) pairs,
        the buffer keeping what is left."""
        buf, pos, end, found = self.buf, 0, len(self.buf), []
        while end - pos >= 8:
            if buf[pos : pos + 4] == b"AMQP":
                pos += 8
                continue
            fsize, doff = _HEAD10.unpack_from(buf, pos)[:2]
            if end - pos < fsize:
                break
            found.append((bytes(buf[pos + doff * 4 : pos + fsize]), pos))
            pos += fsize
        del buf[:pos]
        return found

    def expect(self, kind: type | None) -> Any:
        """The next performative of ``kind`` (None: any); what followed it in the same
        read waits in :attr:`pending`."""
        while True:
            found = None
            for body, _ in self.frames():
                if not body:
                    continue
                value, _at = codec.decode(body)
                if isinstance(value, Close):
                    raise Failed(f"closed: {value.error}")
                if found is not None:
                    self.pending.append(value)
                elif kind is None or isinstance(value, kind):
                    found = value
            if found is not None:
                return found
            data = self.sock.recv(READ)
            if not data:
                raise Failed("socket closed in the handshake")
            self.buf += data


def produce_10(host: str, port: int, address: str, idx: int, count: int, size: int,
               window: int, go: Any) -> dict[str, Any]:  # fmt: skip
    attach = Attach(name=f"lean-sender-{idx}", handle=0, role=SENDER, snd_settle_mode=0,
                    source=Source(address="lean"), target=Target(address=address),
                    initial_delivery_count=0)  # fmt: skip
    conn = Conn10(host, port, attach)
    sock = conn.sock
    credit_limit = 0  # delivery-count + link-credit of the broker's last flow
    for value in conn.pending:
        if isinstance(value, Flow) and value.link_credit is not None:
            credit_limit = int(value.delivery_count or 0) + int(value.link_credit)
    section = b"\x00\x53\x75\xb0" + struct.pack(">I", size)
    pad = b"x" * (size - HEADER.size)
    sent_at = array("d", bytes(8 * count))
    latencies: list[float] = []
    go.wait()
    cpu = time.process_time()
    sent = accepted = refused = 0
    pack = HEADER.pack
    while True:
        out = []
        while sent < count and sent - accepted - refused < window and sent < credit_limit:
            performative = delivery_transfer(0, sent, False)
            fsize = 8 + len(performative) + len(section) + size
            out.append(_HEAD10.pack(fsize, 2, 0, 0) + performative + section
                       + pack(idx, sent) + pad)  # fmt: skip
            sent_at[sent] = time.monotonic()
            sent += 1
        if out:
            sock.sendall(b"".join(out))
        if accepted + refused >= count:
            break
        data = sock.recv(READ)
        if not data:
            raise Failed("socket closed")
        conn.buf += data
        now = time.monotonic()
        for body, _ in conn.frames():
            if not body:
                continue
            value, _at = read_flow_or_disposition(body) or codec.decode(body)
            if isinstance(value, Disposition):
                last = value.first if value.last is None else value.last
                for seq in range(value.first, last + 1):
                    latencies.append(now - sent_at[seq])
                if isinstance(value.state, Accepted):
                    accepted += last + 1 - value.first
                else:
                    refused += last + 1 - value.first
            elif isinstance(value, Flow):
                if value.handle is not None and value.link_credit is not None:
                    credit_limit = int(value.delivery_count or 0) + int(value.link_credit)
            elif isinstance(value, Close):
                raise Failed(f"closed: {value.error}")
    cpu = time.process_time() - cpu
    sock.close()
    return {"accepted": accepted, "refused": refused, "latencies": latencies, "cpu_s": cpu}


def _settle(first: int, last: int, received: int, prefetch: int) -> bytes:
    """The consumer's disposition of ``first``..``last`` (accepted, settled) and its flow
    back to ``prefetch`` credit."""
    disposition = Disposition(role=RECEIVER, first=first, last=last, settled=True, state=Accepted())
    flow = Flow(
        next_incoming_id=received, incoming_window=_WINDOW, next_outgoing_id=0,
        outgoing_window=_WINDOW, handle=0, delivery_count=received, link_credit=prefetch,
    )  # fmt: skip
    return frame10(0, disposition) + frame10(0, flow)


def consume_10(host: str, port: int, address: str, count: int, size: int, prefetch: int,
               ready: Any) -> dict[str, Any]:  # fmt: skip
    attach = Attach(name="lean-receiver", handle=0, role=RECEIVER, snd_settle_mode=0,
                    rcv_settle_mode=0, source=Source(address=address),
                    target=Target(address="lean"))  # fmt: skip
    conn = Conn10(host, port, attach)
    sock = conn.sock
    sock.sendall(frame10(0, Flow(
        next_incoming_id=0, incoming_window=_WINDOW, next_outgoing_id=0,
        outgoing_window=_WINDOW, handle=0, delivery_count=0, link_credit=prefetch)))  # fmt: skip
    ready()
    seen: set[tuple[int, int]] = set()
    duplicates = received = settled = 0
    last_id = -1
    last_at = 0.0
    every = max(1, prefetch // 4)
    unpack = HEADER.unpack_from
    section = b"\x00\x53\x75\xb0" + struct.pack(">I", size)
    cpu = time.process_time()
    while received < count:
        data = sock.recv(READ)
        if not data:
            raise Failed("socket closed")
        conn.buf += data
        for body, _ in conn.frames():
            if body[:3] == b"\x00\x53\x14":  # a transfer: one frame a message here
                fields = read_transfer(body)
                if fields is not None and fields[1] is not None:
                    last_id = fields[1]
                else:  # another broker's shape (RabbitMQ's): the codec reads it
                    transfer, _at = codec.decode(body)
                    if transfer.delivery_id is None or transfer.more:
                        raise Failed("a transfer the lean client cannot read")
                    last_id = transfer.delivery_id
                at = len(body) - size  # the data section is the last
                if body[at - 8 : at] != section:
                    raise Failed("a delivery whose last section is not its data")
                key = unpack(body, at)
                if key in seen:
                    duplicates += 1
                seen.add(key)
                received += 1
            elif body:
                value, _at = codec.decode(body)
                if isinstance(value, Close):
                    raise Failed(f"closed: {value.error}")
        last_at = time.monotonic()
        if last_id + 1 - settled >= every or (received >= count and last_id >= settled):
            sock.sendall(_settle(settled, last_id, received, prefetch))
            settled = last_id + 1
    cpu = time.process_time() - cpu
    sock.close()
    return {"received": len(seen), "duplicates": duplicates, "last_at": last_at, "cpu_s": cpu}


def run_client(proto: str, role: str, spec: dict[str, Any], go: Any, results: Any) -> None:
    """A child process: one client, its result on ``results``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    host, port = spec["host"], spec["port"]
    try:
        if role == "consumer":
            consume = consume_10 if proto == "1.0" else consume_091
            data = consume(host, port, spec["address"], spec["count"], spec["size"],
                           spec["prefetch"],
                           lambda: results.put(("ready", role)))  # fmt: skip
        else:
            produce = produce_10 if proto == "1.0" else produce_091
            results.put(("ready", role))
            data = produce(host, port, spec["address"], spec["idx"], spec["count"],
                           spec["size"], spec["window"], go)  # fmt: skip
        results.put((role, data))
    except Exception as exc:  # one line back to the parent
        results.put((role, {"error": f"{type(exc).__name__}: {exc}"}))


# -- bench/throughput_run.py's children ------------------------------------------------------
# run_once(client="lean"): the 0-9-1 pair above as run_once's producer and consumer processes,
# with the contract of throughput_clients (a ("ready", role, idx, cpu_s), then exactly one
# ("result", role, idx, dict) with the same keys as its pika Producer's and Consumer's).


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5672


def _timeout(spec: ChildSpec) -> float:
    """Seconds a socket call may block: until the child's deadline."""
    return max(1.0, spec.deadline - time.monotonic())


def run_lean_consumer(spec: ChildSpec, expected: int, prefetch: int, size: int) -> None:
    """A consumer process of run_once: :func:`consume_091` of ``expected`` bodies of
    ``size`` bytes from producer ``spec.idx``, lingering as the pika consumer does."""
    child_signals()
    host, port = _host_port(spec.url)
    res: dict[str, Any] = {"received": 0, "distinct": 0, "missing": expected, "duplicates": 0,
                           "foreign": 0, "first_ts": 0.0, "last_ts": 0.0}  # fmt: skip
    error = None
    try:
        got = consume_091(
            host, port, spec.queue, expected, size, prefetch,
            lambda: spec.results.put(("ready", "consumer", spec.idx, time.process_time())),
            idx=spec.idx, linger=GRACE_S, timeout=_timeout(spec),
        )  # fmt: skip
        res.update(
            received=got["received"] + got["duplicates"] + got["foreign"],
            distinct=got["received"], missing=expected - got["received"],
            duplicates=got["duplicates"], foreign=got["foreign"],
            first_ts=got["first_at"], last_ts=got["last_at"],
        )  # fmt: skip
    except Exception as exc:  # one line back to the parent
        error = f"{type(exc).__name__}: {exc}"
    res.update(cpu_s=time.process_time(), error=error, stopped=spec.stop.is_set())
    spec.results.put(("result", "consumer", spec.idx, res))


def run_lean_producer(spec: ChildSpec, count: int, size: int, window: int, go: Any,
                      persistent: bool = False) -> None:  # fmt: skip
    """A producer process of run_once: :func:`produce_091` to ``spec.queue``."""
    child_signals()
    host, port = _host_port(spec.url)
    res: dict[str, Any] = {"published": 0, "acked": 0, "nacked": 0, "first_ts": 0.0,
                           "last_confirm_ts": 0.0, "latency": array("d")}  # fmt: skip
    error = None
    try:
        got = produce_091(
            host, port, spec.queue, spec.idx, count, size, window, go,
            persistent=persistent, timeout=_timeout(spec),
            ready=lambda: spec.results.put(("ready", "producer", spec.idx, time.process_time())),
        )  # fmt: skip
        res.update(
            published=got["accepted"] + got["refused"], acked=got["accepted"],
            nacked=got["refused"], first_ts=got["first_at"], last_confirm_ts=got["last_at"],
            latency=array("d", got["latencies"]),
        )  # fmt: skip
    except Exception as exc:  # one line back to the parent
        error = f"{type(exc).__name__}: {exc}"
    stopped = spec.stop.is_set()
    if stopped:
        res.pop("latency")  # as the pika producer: the parent may not be reading any more
    res.update(cpu_s=time.process_time(), error=error, stopped=stopped)
    spec.results.put(("result", "producer", spec.idx, res))
