"""What the HA fuzzer sends: names, field tables, properties and bodies a client may send.

Everything here is drawn from a :class:`random.Random` (a run is reproduced by its seed) and
is what the AMQP codec accepts: names of 0-255 bytes of any UTF-8, field tables of every
field type nested up to 35 deep (the codec takes 64; an HA cluster's replication contract
refuses more than its wire carries with 406, a valid answer), properties with every field,
headers, bodies from empty to a few frames. Names come mostly from a small pool, so that
declares, binds, publishes and deletes of different sessions meet on the same objects.
"""

from __future__ import annotations

import datetime
import decimal
import random
import string
from typing import Any, TypeVar

from pamqp import commands
from pamqp.base import _AMQData

M = TypeVar("M", bound=_AMQData)

#: Queue names every run uses (awkward ones: RabbitMQ takes any UTF-8 up to 255 bytes). The
#: last ones straddle the replication contract's limit for level-all queue names (format 1:
#: 241 bytes, the stream name ``qpid.ha-queue:`` + name within 255).
QUEUES = (
    "fz.q",
    "fz.q2",
    "fz.t.a=b",
    "fz.é",
    "fz.a*b",
    "<img src=x onerror=alert(1)>",
    "%2F",
    "/",
    "fz." + "q" * 237,  # 240 bytes
    "fz." + "é" * 119,  # 241 bytes
    "fz." + "q" * 239,  # 242 bytes: refused when replicated with level all (format 1)
)
EXCHANGES = ("fz.x", "fz.topic", "fz.x/y", "fz.é", "fz.h", "amq.direct", "amq.topic", "")
EXCHANGE_TYPES = ("direct", "topic", "fanout", "headers")
ROUTING_KEYS = ("", "k", "k.x", "fz.q", "fz.q2", "#", "*.x", "k.#")
LEVELS = ("all", "configuration", "none")


def unchecked(cls: type[M], **fields: Any) -> M:
    """``cls(**fields)`` without pamqp's checks (its name pattern refuses names RabbitMQ
    and this broker take, ``t.a=b`` or ``é``), also when it is marshalled."""
    method = cls.__new__(cls)
    method.validate = lambda: None  # type: ignore[attr-defined]
    method.__init__(**fields)  # type: ignore[misc]
    return method


def text(rng: random.Random, low: int, high: int) -> str:
    """Text of ``low``-``high`` characters: ASCII mostly, any code point now and then."""
    count = rng.randint(low, high)
    if rng.random() < 0.7:
        return "".join(rng.choice(string.printable) for _ in range(count))
    chars = []
    for _ in range(count):
        code = rng.choice(
            (rng.randint(32, 126), rng.randint(0xA0, 0x2FFF), rng.randint(0, 0x10FFFF))
        )
        if 0xD800 <= code <= 0xDFFF:  # surrogates are not UTF-8
            code = 0xE9
        chars.append(chr(code))
    return "".join(chars)


def fit(name: str, limit: int = 255) -> str:
    """``name`` cut to at most ``limit`` bytes of UTF-8 (on a character boundary)."""
    data = name.encode()
    if len(data) <= limit:
        return name
    return data[:limit].decode("utf-8", "ignore")


def queue_name(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.75:
        return rng.choice(QUEUES)
    if roll < 0.8:
        return ""
    if roll < 0.87:  # near the limits
        return fit("fz." + text(rng, 200, 255), rng.choice((240, 241, 242, 255)))
    if roll < 0.9:
        return rng.choice(("amq.", "qpid.ha-queue:", "qpid.ha-")) + text(rng, 0, 8)
    return fit("fz." + text(rng, 0, 20))


def exchange_name(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.3:
        return ""
    if roll < 0.85:
        return rng.choice(EXCHANGES)
    if roll < 0.9:
        return rng.choice(("amq.", "qpid.ha-", "amq.fanout", "amq.headers", "amq.match"))
    return fit("fz." + text(rng, 0, 20))


def declared_exchange(rng: random.Random) -> str:
    """A name to declare an exchange with: the run's own mostly (``amq.`` ones are refused
    with 403, ``""`` too)."""
    if rng.random() < 0.9:
        return rng.choice(EXCHANGES[:5])
    return exchange_name(rng)


def routing_key(rng: random.Random) -> str:
    if rng.random() < 0.8:
        return rng.choice(ROUTING_KEYS)
    return fit(text(rng, 0, 30))


def value(rng: random.Random, depth: int) -> Any:
    """One field value of any type pamqp encodes; tables and arrays down to ``depth``."""
    kinds = ["int", "str", "bool", "float", "decimal", "time", "bytes", "none"]
    if depth > 0:
        kinds += ["table", "array"] * 2
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice((0, 1, -1, rng.randint(-(2**63), 2**63 - 1), rng.randint(0, 2**31)))
    if kind == "str":
        return text(rng, 0, 12)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float":
        return rng.choice((0.5, -1e30, 3.25, float(rng.randint(-1000, 1000)) / 8))
    if kind == "decimal":
        return decimal.Decimal(rng.randint(-99999, 99999)).scaleb(-rng.randint(0, 5))
    if kind == "time":
        return datetime.datetime.fromtimestamp(rng.randint(0, 2**32), tz=datetime.UTC)
    if kind == "bytes":
        return bytearray(rng.randbytes(rng.randint(0, 8)))
    if kind == "none":
        return None
    if kind == "table":
        return {fit(text(rng, 0, 6)): value(rng, depth - 1) for _ in range(rng.randint(0, 3))}
    return [value(rng, depth - 1) for _ in range(rng.randint(0, 3))]


def nested(depth: int) -> dict[str, Any]:
    """A table ``depth`` tables deep."""
    table: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        table = {"x": table}
    return table


def table(rng: random.Random) -> dict[str, Any]:
    """A field table: random keys and values, now and then one nested near the contract's
    limit (format 1: 29 levels)."""
    result = {fit(text(rng, 1, 8)): value(rng, 2) for _ in range(rng.randint(0, 3))}
    if rng.random() < 0.05:
        result["x-deep"] = nested(rng.randint(26, 35))
    return result


#: The arguments each pool queue is declared with mostly (a declare with others is refused
#: with 406 while the queue exists: a valid answer, but a channel lost).
USUAL_ARGUMENTS: dict[str, dict[str, Any]] = {
    "fz.q": {},
    "fz.q2": {"x-max-length": 50},
    "fz.t.a=b": {"qpid.replicate": "configuration"},
    "fz.é": {"x-max-priority": 5},
}


def queue_arguments(rng: random.Random, name: str = "") -> dict[str, Any]:
    if name in USUAL_ARGUMENTS and rng.random() < 0.8:
        return dict(USUAL_ARGUMENTS[name])
    if rng.random() < 0.3:
        return {}
    arguments = table(rng) if rng.random() < 0.3 else {}
    choices: list[tuple[str, Any]] = [
        ("qpid.replicate", rng.choice((*LEVELS, "bogus", 1))),
        ("x-max-length", rng.choice((0, 2, 5, -1, "x"))),
        ("x-max-length-bytes", rng.choice((10, 1000))),
        ("x-overflow", rng.choice(("drop-head", "reject-publish", "bogus"))),
        ("x-dead-letter-exchange", exchange_name(rng)),
        ("x-dead-letter-routing-key", routing_key(rng)),
        ("x-max-priority", rng.choice((1, 10, 255, 256, -3))),
        ("x-queue-type", rng.choice(("classic", "quorum", "stream", "bogus"))),
        ("x-single-active-consumer", rng.random() < 0.5),
        ("x-message-ttl", rng.choice((60_000, 3_600_000, -5, "1"))),
        ("x-queue-mode", rng.choice(("lazy", "default"))),
        ("alternate-exchange", exchange_name(rng)),
    ]
    for key, item in rng.sample(choices, rng.randint(0, 3)):
        arguments[key] = item
    return arguments


def exchange_arguments(rng: random.Random) -> dict[str, Any]:
    arguments = table(rng) if rng.random() < 0.3 else {}
    if rng.random() < 0.3:
        arguments["qpid.replicate"] = rng.choice((*LEVELS, "bogus"))
    if rng.random() < 0.15:
        arguments["alternate-exchange"] = exchange_name(rng)
    return arguments


def binding_arguments(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.7:
        return {}
    arguments = table(rng)
    if rng.random() < 0.5:
        arguments["x-match"] = rng.choice(("all", "any", "all-with-x", "bogus"))
    return arguments


def properties(rng: random.Random) -> commands.Basic.Properties:
    """Basic properties with a random set of fields, headers among them."""
    fields: dict[str, Any] = {}
    pickers: dict[str, Any] = {
        "content_type": lambda: fit(text(rng, 0, 20)),
        "content_encoding": lambda: fit(text(rng, 0, 10)),
        "headers": lambda: table(rng),
        "delivery_mode": lambda: rng.choice((1, 2, 2, 0, 7)),
        "priority": lambda: rng.randint(0, 255),
        "correlation_id": lambda: fit(text(rng, 0, 30)),
        "reply_to": lambda: fit(text(rng, 0, 30)),
        "expiration": lambda: rng.choice(("60000",) * 8 + ("0", "-1", "x")),
        "message_id": lambda: fit(text(rng, 0, 30)),
        "timestamp": lambda: datetime.datetime.fromtimestamp(
            rng.randint(0, 2**32), tz=datetime.UTC
        ),
        "message_type": lambda: fit(text(rng, 0, 10)),
        "user_id": lambda: rng.choice(("guest",) * 8 + ("mallory",)),
        "app_id": lambda: fit(text(rng, 0, 10)),
    }
    for name in rng.sample(sorted(pickers), rng.randint(0, 6)):
        fields[name] = pickers[name]()
    return unchecked(commands.Basic.Properties, **fields)


def body(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.1:
        return b""
    if roll < 0.95:
        return rng.randbytes(rng.randint(1, 2000))
    return rng.randbytes(rng.randint(100_000, 300_000))  # more than one frame
