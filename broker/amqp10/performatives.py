"""The AMQP 1.0 performatives (part 2, section 2.7), the SASL frames (part 5, section
5.3.3), the error type, and the messaging layer's delivery states and termini (part 3,
sections 3.4 and 3.5), as :class:`~broker.amqp10.composite.Composite` values.

Field names follow the specification with ``-`` as ``_``; a field's Python default is the
specification's default (None where it has none). A ``role`` is ``False`` for a sender
and ``True`` for a receiver (:data:`SENDER`, :data:`RECEIVER`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.amqp10.composite import Composite, composite
from broker.amqp10.types import Described

SENDER = False
RECEIVER = True

#: snd-settle-mode: the sender settles every delivery before sending (pre-settled).
SND_UNSETTLED, SND_SETTLED, SND_MIXED = 0, 1, 2
#: rcv-settle-mode: the receiver settles first (``first``) or after the sender (``second``).
RCV_FIRST, RCV_SECOND = 0, 1


@composite
@dataclass(frozen=True, slots=True)
class Error(Composite):
    """An error condition with its description (amqp:error:list)."""

    CODE, NAME = 0x1D, "amqp:error:list"
    KINDS = ("symbol", "string", "fields")
    MANDATORY = frozenset({"condition"})
    condition: str = ""
    description: str | None = None
    info: dict[Any, Any] | None = None


# -- delivery states (part 3, section 3.4) ---------------------------------------------
@composite
@dataclass(frozen=True, slots=True)
class Received(Composite):
    CODE, NAME = 0x23, "amqp:received:list"
    KINDS = ("uint", "ulong")
    MANDATORY = frozenset({"section_number", "section_offset"})
    section_number: int = 0
    section_offset: int = 0


@composite
@dataclass(frozen=True, slots=True)
class Accepted(Composite):
    CODE, NAME = 0x24, "amqp:accepted:list"
    KINDS = ()


@composite
@dataclass(frozen=True, slots=True)
class Rejected(Composite):
    CODE, NAME = 0x25, "amqp:rejected:list"
    KINDS = (Error,)
    error: Error | None = None


@composite
@dataclass(frozen=True, slots=True)
class Released(Composite):
    CODE, NAME = 0x26, "amqp:released:list"
    KINDS = ()


@composite
@dataclass(frozen=True, slots=True)
class Modified(Composite):
    CODE, NAME = 0x27, "amqp:modified:list"
    KINDS = ("bool", "bool", "fields")
    delivery_failed: bool = False
    undeliverable_here: bool = False
    message_annotations: dict[Any, Any] | None = None


# -- transactions (part 4, section 4.5) ------------------------------------------------
_OUTCOMES = (Accepted, Rejected, Released, Modified, Described)


@composite
@dataclass(frozen=True, slots=True)
class Coordinator(Composite):
    """The target of a link to the transaction coordinator (the client's control link)."""

    CODE, NAME = 0x30, "amqp:coordinator:list"
    KINDS = ("symbols",)
    capabilities: tuple[str, ...] | None = None


@composite
@dataclass(frozen=True, slots=True)
class Declare(Composite):
    """A control message's body: declare a transaction (``global-id``: a distributed one)."""

    CODE, NAME = 0x31, "amqp:declare:list"
    KINDS = ("any",)
    global_id: Any = None


@composite
@dataclass(frozen=True, slots=True)
class Discharge(Composite):
    """A control message's body: end a transaction, committed or (``fail``) rolled back."""

    CODE, NAME = 0x32, "amqp:discharge:list"
    KINDS = ("binary", "bool")
    MANDATORY = frozenset({"txn_id"})
    txn_id: bytes = b""
    fail: bool = False


@composite
@dataclass(frozen=True, slots=True)
class Declared(Composite):
    """The outcome of a declare: the transaction's id."""

    CODE, NAME = 0x33, "amqp:declared:list"
    KINDS = ("binary",)
    MANDATORY = frozenset({"txn_id"})
    txn_id: bytes = b""


@composite
@dataclass(frozen=True, slots=True)
class TransactionalState(Composite):
    """A delivery's state inside a transaction, with the outcome it takes at commit."""

    CODE, NAME = 0x34, "amqp:transactional-state:list"
    KINDS = ("binary", _OUTCOMES)
    MANDATORY = frozenset({"txn_id"})
    txn_id: bytes = b""
    outcome: Any = None


#: A delivery's state or outcome.
DeliveryState = (
    Received | Accepted | Rejected | Released | Modified | Declared | TransactionalState | Described
)
_STATES = (
    Received, Accepted, Rejected, Released, Modified, Declared, TransactionalState, Described
)  # fmt: skip


# -- termini (part 3, section 3.5) -----------------------------------------------------
@composite
@dataclass(frozen=True, slots=True)
class Source(Composite):
    CODE, NAME = 0x28, "amqp:source:list"
    KINDS = (
        "string", "uint", "symbol", "uint", "bool", "fields", "symbol", "map", _STATES,
        "symbols", "symbols",
    )  # fmt: skip
    address: str | None = None
    durable: int = 0
    expiry_policy: str = "session-end"
    timeout: int = 0
    dynamic: bool = False
    dynamic_node_properties: dict[Any, Any] | None = None
    distribution_mode: str | None = None
    filter: dict[Any, Any] | None = None
    default_outcome: Any = None
    outcomes: tuple[str, ...] | None = None
    capabilities: tuple[str, ...] | None = None


@composite
@dataclass(frozen=True, slots=True)
class Target(Composite):
    CODE, NAME = 0x29, "amqp:target:list"
    KINDS = ("string", "uint", "symbol", "uint", "bool", "fields", "symbols")
    address: str | None = None
    durable: int = 0
    expiry_policy: str = "session-end"
    timeout: int = 0
    dynamic: bool = False
    dynamic_node_properties: dict[Any, Any] | None = None
    capabilities: tuple[str, ...] | None = None


_TERMINI = (Source, Target, Coordinator, Described)


# -- performatives (part 2, section 2.7) -----------------------------------------------
@composite
@dataclass(frozen=True, slots=True)
class Open(Composite):
    CODE, NAME = 0x10, "amqp:open:list"
    KINDS = (
        "string", "string", "uint", "ushort", "uint", "symbols", "symbols", "symbols",
        "symbols", "fields",
    )  # fmt: skip
    MANDATORY = frozenset({"container_id"})
    container_id: str = ""
    hostname: str | None = None
    max_frame_size: int = 0xFFFFFFFF
    channel_max: int = 0xFFFF
    idle_time_out: int | None = None
    outgoing_locales: tuple[str, ...] | None = None
    incoming_locales: tuple[str, ...] | None = None
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


@composite
@dataclass(frozen=True, slots=True)
class Begin(Composite):
    CODE, NAME = 0x11, "amqp:begin:list"
    KINDS = ("ushort", "uint", "uint", "uint", "uint", "symbols", "symbols", "fields")
    MANDATORY = frozenset({"next_outgoing_id", "incoming_window", "outgoing_window"})
    remote_channel: int | None = None
    next_outgoing_id: int = 0
    incoming_window: int = 0
    outgoing_window: int = 0
    handle_max: int = 0xFFFFFFFF
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


@composite
@dataclass(frozen=True, slots=True)
class Attach(Composite):
    CODE, NAME = 0x12, "amqp:attach:list"
    KINDS = (
        "string", "uint", "bool", "ubyte", "ubyte", _TERMINI, _TERMINI, "map", "bool",
        "uint", "ulong", "symbols", "symbols", "fields",
    )  # fmt: skip
    MANDATORY = frozenset({"name", "handle", "role"})
    name: str = ""
    handle: int = 0
    role: bool = SENDER
    snd_settle_mode: int = SND_MIXED
    rcv_settle_mode: int = RCV_FIRST
    source: Any = None
    target: Any = None
    unsettled: dict[Any, Any] | None = None
    incomplete_unsettled: bool = False
    initial_delivery_count: int | None = None
    max_message_size: int | None = None
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


def receiving_attach(
    attach: Attach, *, settles_second: bool, target: Any, max_message_size: int | None = None
) -> Attach:
    """The broker's answer to a client's sending link: the receiving end of ``attach``,
    settling first (second when ``settles_second``), with ``target`` as the broker holds it."""
    return Attach(
        name=attach.name,
        handle=attach.handle,
        role=RECEIVER,
        snd_settle_mode=attach.snd_settle_mode,
        rcv_settle_mode=RCV_SECOND if settles_second else RCV_FIRST,
        source=attach.source,
        target=target,
        max_message_size=max_message_size,
    )


@composite
@dataclass(frozen=True, slots=True)
class Flow(Composite):
    CODE, NAME = 0x13, "amqp:flow:list"
    KINDS = (
        "uint", "uint", "uint", "uint", "uint", "uint", "uint", "uint", "bool", "bool",
        "fields",
    )  # fmt: skip
    MANDATORY = frozenset({"incoming_window", "next_outgoing_id", "outgoing_window"})
    next_incoming_id: int | None = None
    incoming_window: int = 0
    next_outgoing_id: int = 0
    outgoing_window: int = 0
    handle: int | None = None
    delivery_count: int | None = None
    link_credit: int | None = None
    available: int | None = None
    drain: bool = False
    echo: bool = False
    properties: dict[Any, Any] | None = None


@composite
@dataclass(frozen=True, slots=True)
class Transfer(Composite):
    CODE, NAME = 0x14, "amqp:transfer:list"
    KINDS = (
        "uint", "uint", "binary", "uint", "bool", "bool", "ubyte", _STATES, "bool", "bool",
        "bool",
    )  # fmt: skip
    MANDATORY = frozenset({"handle"})
    handle: int = 0
    delivery_id: int | None = None
    delivery_tag: bytes | None = None
    message_format: int | None = None
    settled: bool | None = None
    more: bool = False
    rcv_settle_mode: int | None = None
    state: Any = None
    resume: bool = False
    aborted: bool = False
    batchable: bool = False


@composite
@dataclass(frozen=True, slots=True)
class Disposition(Composite):
    CODE, NAME = 0x15, "amqp:disposition:list"
    KINDS = ("bool", "uint", "uint", "bool", _STATES, "bool")
    MANDATORY = frozenset({"role", "first"})
    role: bool = RECEIVER
    first: int = 0
    last: int | None = None
    settled: bool = False
    state: Any = None
    batchable: bool = False


@composite
@dataclass(frozen=True, slots=True)
class Detach(Composite):
    CODE, NAME = 0x16, "amqp:detach:list"
    KINDS = ("uint", "bool", Error)
    MANDATORY = frozenset({"handle"})
    handle: int = 0
    closed: bool = False
    error: Error | None = None


@composite
@dataclass(frozen=True, slots=True)
class End(Composite):
    CODE, NAME = 0x17, "amqp:end:list"
    KINDS = (Error,)
    error: Error | None = None


@composite
@dataclass(frozen=True, slots=True)
class Close(Composite):
    CODE, NAME = 0x18, "amqp:close:list"
    KINDS = (Error,)
    error: Error | None = None


#: The performatives of an AMQP frame (type 0).
PERFORMATIVES = (Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close)


# -- SASL frames (part 5, section 5.3.3) -----------------------------------------------
@composite
@dataclass(frozen=True, slots=True)
class SaslMechanisms(Composite):
    CODE, NAME = 0x40, "amqp:sasl-mechanisms:list"
    KINDS = ("symbols",)
    MANDATORY = frozenset({"sasl_server_mechanisms"})
    sasl_server_mechanisms: tuple[str, ...] = ()


@composite
@dataclass(frozen=True, slots=True)
class SaslInit(Composite):
    CODE, NAME = 0x41, "amqp:sasl-init:list"
    KINDS = ("symbol", "binary", "string")
    MANDATORY = frozenset({"mechanism"})
    mechanism: str = ""
    initial_response: bytes | None = None
    hostname: str | None = None


@composite
@dataclass(frozen=True, slots=True)
class SaslChallenge(Composite):
    CODE, NAME = 0x42, "amqp:sasl-challenge:list"
    KINDS = ("binary",)
    MANDATORY = frozenset({"challenge"})
    challenge: bytes = b""


@composite
@dataclass(frozen=True, slots=True)
class SaslResponse(Composite):
    CODE, NAME = 0x43, "amqp:sasl-response:list"
    KINDS = ("binary",)
    MANDATORY = frozenset({"response"})
    response: bytes = b""


#: sasl-outcome codes.
SASL_OK, SASL_AUTH, SASL_SYS, SASL_SYS_PERM, SASL_SYS_TEMP = 0, 1, 2, 3, 4


@composite
@dataclass(frozen=True, slots=True)
class SaslOutcome(Composite):
    CODE, NAME = 0x44, "amqp:sasl-outcome:list"
    KINDS = ("ubyte", "binary")
    MANDATORY = frozenset({"code"})
    code: int = SASL_OK
    additional_data: bytes | None = None


SASL_FRAMES = (SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome)
