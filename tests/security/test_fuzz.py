"""A bounded fuzz run (issue 13, item 7), part of ``make test``: mutated AMQP byte streams
against the sans-I/O connection and random requests against the management API. No
exception escapes, nothing is logged at error level (an internal error), and the API never
answers 500. The long run is the same code with more examples:
``FUZZ_EXAMPLES=50000 pytest tests/security/test_fuzz.py``."""

from __future__ import annotations

import json
import os
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body as content_body
from pamqp import commands, frame, header

from broker.amqp import framing
from broker.core.errors import ReplyCode
from tests.amqp.helpers import Client, make_context
from tests.management.support import GUEST, FakeBroker, FakeOptions, serve
from tests.security.test_hardening import Events

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))


def _session() -> list[bytes]:
    """A valid client session, frame by frame."""
    frames = [framing.PROTOCOL_HEADER]
    methods: list[tuple[int, Any]] = [
        (0, commands.Connection.StartOk(
            client_properties={"product": "fuzz", "capabilities": {"publisher_confirms": True}},
            mechanism="PLAIN", response="\0guest\0guest")),
        (0, commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0)),
        (0, commands.Connection.Open(virtual_host="/")),
        (1, commands.Channel.Open()),
        (1, commands.Confirm.Select()),
        (1, commands.Queue.Declare(queue="fz", arguments={"x-max-length": 5})),
        (1, commands.Queue.Bind(queue="fz", exchange="amq.topic", routing_key="a.#")),
        (1, commands.Basic.Qos(prefetch_count=2)),
        (1, commands.Basic.Consume(queue="fz", consumer_tag="c")),
    ]  # fmt: skip
    frames += [frame.marshal(m, ch) for ch, m in methods]
    frames.append(frame.marshal(commands.Basic.Publish(exchange="amq.topic", routing_key="a.b"), 1))
    props = commands.Basic.Properties(headers={"h": {"n": [1, 2]}}, delivery_mode=2)
    frames.append(frame.marshal(header.ContentHeader(0, 5, props), 1))
    frames.append(frame.marshal(content_body.ContentBody(b"hello"), 1))
    frames += [
        frame.marshal(commands.Basic.Ack(delivery_tag=1), 1),
        frame.marshal(commands.Queue.Purge(queue="fz"), 1),
        frame.marshal(
            commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 1
        ),
        frame.marshal(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0
        ),
    ]
    return frames


SESSION = _session()
KNOWN_CODES = {int(code) for code in ReplyCode}


@st.composite
def mutated(draw: st.DrawFn) -> list[bytes]:
    frames = list(SESSION)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(frames) - 1))
        data = bytearray(frames[i])
        kind = draw(st.sampled_from(["flip", "insert", "truncate", "drop", "repeat", "swap"]))
        if kind == "flip" and data:
            pos = draw(st.integers(0, len(data) - 1))
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            pos = draw(st.integers(0, len(data)))
            data = bytearray(
                bytes(data[:pos]) + draw(st.binary(min_size=1, max_size=16)) + bytes(data[pos:])
            )
        elif kind == "truncate" and data:
            data = bytearray(bytes(data)[: draw(st.integers(0, len(data) - 1))])
        elif kind == "drop":
            data = bytearray()
        elif kind == "repeat":
            data = bytearray(bytes(data) * 2)
        elif kind == "swap" and len(frames) > 1:
            j = draw(st.integers(0, len(frames) - 1))
            frames[i], frames[j] = frames[j], frames[i]
            continue
        frames[i] = bytes(data)
    return frames


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated(), st.integers(1, 64))
def test_mutated_amqp_sessions(frames: list[bytes], chunk: int) -> None:
    ctx = make_context()
    events = Events()
    ctx.log = events
    client = Client(ctx)
    stream = b"".join(frames)
    for start in range(0, len(stream), chunk * 16):
        client.feed(stream[start : start + chunk * 16])
        client.conn.data_to_send()
        client.conn.tick()
    client.conn.connection_lost()
    errors = [(event, fields) for level, event, fields in events.lines if level == "error"]
    assert errors == []
    for _, event, fields in events.lines:
        if event == "protocol_error" and fields.get("reply_code") is not None:
            assert fields["reply_code"] in KNOWN_CODES and fields["reply_code"] != 541


PATHS = ["/api/queues", "/api/queues/q", "/api/exchanges/x", "/api/bindings", "/api/ha",
         "/api/ha/promote", "/api/ha/lease", "/api/acl/reload", "/api/connections/1",
         "/api/status", "/metrics", "/api/queues/%ff", "/api/queues/" + "q" * 300]  # fmt: skip
BODIES = [b"", b"{}", b"[]", b"null", b'{"durable": "yes"}', b'{"lease": 1e999}',
          b'{"cluster_manager": true, "lease": ' + b"9" * 400 + b"}", b"{" * 3000,
          b'{"arguments": {"x-max-length": -1}}', b"\xff\xfe", b'{"epoch": -1}']  # fmt: skip


def test_random_management_requests() -> None:
    rng = random.Random(13)
    broker = FakeBroker(options=FakeOptions(auth=True))
    count = max(200, EXAMPLES)

    async def scenario(client: Any) -> None:
        for _ in range(count):
            method = rng.choice(["GET", "PUT", "POST", "DELETE", "PATCH", "HEAD"])
            path = rng.choice(PATHS)
            data = rng.choice(BODIES)
            if rng.random() < 0.3:
                data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))
            headers = dict(GUEST) if rng.random() < 0.8 else {"Authorization": "Basic xx"}
            headers["Content-Type"] = "application/json"
            response = await client.request(method, path, data=data, headers=headers)
            assert response.status < 500 or response.status == 501, (method, path, data[:40])
            if method != "HEAD" and path != "/metrics" and response.status >= 400:
                json.loads(await response.text())

    serve(broker, scenario)
