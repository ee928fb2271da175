"""A bound on how deeply AMQP field tables and arrays nest (fuzzing found 500 levels).

pamqp decodes nested tables recursively, so a peer could send a table nested deeply enough
to exhaust the interpreter's stack. :func:`check_depth` walks a decoded value without
recursion and refuses one nested more than :data:`MAX_DEPTH` tables or arrays deep; the
decoders (:func:`broker.amqp.framing.unmarshal_method`, :func:`broker.core.properties.decode`)
also turn a ``RecursionError`` into the same refusal, so the answer is a syntax error
(502), never an internal error. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Any

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
