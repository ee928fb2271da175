"""What a client's field tables may hold: a bound on how deeply AMQP field tables and arrays
nest (fuzzing found 500 levels), and the one contract for a declare's arguments.

pamqp decodes nested tables recursively, so a peer could send a table nested deeply enough
to exhaust the interpreter's stack. :func:`check_depth` walks a decoded value without
recursion and refuses one nested more than :data:`MAX_DEPTH` tables or arrays deep; the
decoders (:func:`broker.amqp.framing.unmarshal_method`, :func:`broker.core.properties.decode`)
also turn a ``RecursionError`` into the same refusal, so the answer is a syntax error
(502), never an internal error.

:func:`check_arguments` is **the contract for a declare's arguments**, whatever brought them
(an AMQP method, the management API's JSON): a field table the AMQP codec carries, which the
store and replication format 2 write back exactly (:mod:`broker.core.field_table_codec`).
A virtual host applies it to every new queue, exchange and binding a client declares, before
an HA cluster member's replication contract (:mod:`broker.core.declare_contract`) adds the
wire's limits; a refusal is 406 PRECONDITION_FAILED naming the limit (the management API's
400). Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.core.errors import precondition_failed
from broker.core.field_table_codec import encode_table

#: Deepest nesting of tables and arrays accepted from a peer (RabbitMQ's clients and
#: brokers never nest more than a few levels).
MAX_DEPTH = 64


class TooDeep(ValueError):
    """A field table or array nests more than :data:`MAX_DEPTH` levels."""


def depth(value: Any) -> int:
    """How many tables or arrays deep ``value`` nests (0 for a scalar)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level) for child in children)
    return deepest


def check_depth(value: Any, what: str) -> None:
    """:raises TooDeep: naming ``what`` when ``value`` nests more than :data:`MAX_DEPTH`."""
    if depth(value) > MAX_DEPTH:
        raise TooDeep(f"{what} nests tables or arrays more than {MAX_DEPTH} levels deep")


def check_arguments(what: str, arguments: Mapping[str, Any]) -> None:
    """406 PRECONDITION_FAILED naming ``what`` (``queue 'q'``) and the limit unless
    ``arguments`` is a field table the AMQP codec carries: nested at most :data:`MAX_DEPTH`
    tables or arrays deep, field names of at most 255 bytes of UTF-8, integers of 64 bits,
    strings of UTF-8 (see :mod:`broker.core.field_table_codec` for every type)."""
    if not arguments:
        return
    if depth(arguments) > MAX_DEPTH:
        raise precondition_failed(
            f"arguments of {what} nest more than {MAX_DEPTH} tables or arrays deep: the AMQP"
            f" codec carries at most {MAX_DEPTH}"
        )
    try:
        encode_table(arguments, max_depth=MAX_DEPTH, what=f"arguments of {what}:")
    except ValueError as exc:
        raise precondition_failed(f"{exc} (the AMQP codec's limit)") from None
