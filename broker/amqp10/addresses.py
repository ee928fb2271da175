"""What a link's address names: a queue, or an exchange and routing key.

The forms (``docs/amqp-1-0.md``, "Addresses"):

=============================  ==========================================================
``NAME`` (no leading ``/``)    the queue NAME (Qpid's style)
``/queues/NAME``               the queue NAME (RabbitMQ 4's v2 address; NAME percent-encoded)
``/amq/queue/NAME``            the queue NAME (RabbitMQ 3's v1 address)
``/queue/NAME``                the queue NAME (v1; RabbitMQ 3 declares it, we do not yet)
``/exchanges/X/KEY``           exchange X, routing key KEY (v2; a target only)
``/exchanges/X``               exchange X, routing key "" (v2; a target only)
``/exchange/X/KEY``            exchange X, routing key KEY (v1; a target only)
``/topic/KEY``                 ``amq.topic``, routing key KEY (v1; a target only)
=============================  ==========================================================

A target without an address is the anonymous relay: each message's ``to`` is its address.
A source (the broker sends from it) must name a queue; an exchange source (a temporary
queue bound for the link) is not implemented yet. A malformed address is
``amqp:invalid-field``. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from broker.amqp10.errors import INVALID_FIELD, NOT_IMPLEMENTED, Amqp10Error, Scope


@dataclass(frozen=True, slots=True)
class QueueAddress:
    queue: str


@dataclass(frozen=True, slots=True)
class ExchangeAddress:
    exchange: str
    routing_key: str


Address = QueueAddress | ExchangeAddress


def _bad(address: str, why: str) -> Amqp10Error:
    return Amqp10Error(INVALID_FIELD, f"address {address!r}: {why}", Scope.LINK)


def _name(address: str, raw: str, encoded: bool) -> str:
    name = unquote(raw, errors="strict") if encoded else raw
    if not name:
        raise _bad(address, "no name")
    if len(name.encode()) > 255:
        raise _bad(address, "a name is at most 255 bytes")
    return name


def parse(address: str) -> Address:
    """The queue or exchange ``address`` names.

    :raises Amqp10Error: ``amqp:invalid-field`` (link scope) for a malformed address.
    """
    if not address.startswith("/"):
        return QueueAddress(_name(address, address, False))
    parts = address[1:].split("/")
    head = parts[0]
    try:
        if head == "queues" and len(parts) == 2:
            return QueueAddress(_name(address, parts[1], True))
        if head == "exchanges" and len(parts) in (2, 3):
            key = unquote(parts[2], errors="strict") if len(parts) == 3 else ""
            return ExchangeAddress(_name(address, parts[1], True), key)
    except UnicodeDecodeError:
        raise _bad(address, "not UTF-8 once percent-decoded") from None
    if head == "amq" and len(parts) == 3 and parts[1] == "queue":
        return QueueAddress(_name(address, parts[2], False))
    if head == "queue" and len(parts) == 2:
        return QueueAddress(_name(address, parts[1], False))
    if head == "exchange" and len(parts) in (2, 3):
        return ExchangeAddress(_name(address, parts[1], False), parts[2] if len(parts) == 3 else "")
    if head == "topic" and len(parts) == 2:
        return ExchangeAddress("amq.topic", parts[1])
    raise _bad(address, "not a queue name, /queues/NAME, /exchanges/X/KEY or a v1 address")


def route_of(address: Address) -> tuple[str, str]:
    """The exchange and routing key a message sent to ``address`` is published with: a
    queue through the default exchange under its name (0-9-1's ``basic.publish`` to
    ``""``), ``amq.default`` as the default exchange."""
    if isinstance(address, QueueAddress):
        return "", address.queue
    exchange = "" if address.exchange == "amq.default" else address.exchange
    return exchange, address.routing_key


def parse_source(address: str | None) -> QueueAddress:
    """The queue a receiving client's link (our sending end) takes messages from.

    :raises Amqp10Error: no address (a dynamic source is the session's, not an address), a
        malformed one, or an exchange (not implemented yet).
    """
    if not address:
        raise Amqp10Error(NOT_IMPLEMENTED, "a source without an address", Scope.LINK)
    found = parse(address)
    if not isinstance(found, QueueAddress):
        raise Amqp10Error(
            NOT_IMPLEMENTED, f"source {address!r}: consuming from an exchange", Scope.LINK
        )
    return found
