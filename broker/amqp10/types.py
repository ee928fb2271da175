"""The AMQP 1.0 type system as Python values (OASIS AMQP 1.0, part 1: types).

A Python value carries its AMQP type, so that encoding it is a function of the value
alone (:mod:`broker.amqp10.codec`):

================  =====================================================================
AMQP type         Python value
================  =====================================================================
null              ``None``
boolean           ``bool``
ubyte .. ulong    :class:`UByte`, :class:`UShort`, :class:`UInt`, :class:`ULong`
byte .. int       :class:`Byte`, :class:`Short`, :class:`Int`
long              ``int`` (any other ``int``: it must fit in 64 bits signed)
float             :class:`Float` (32 bits)
double            ``float``
decimal32/64/128  :class:`Decimal32`, :class:`Decimal64`, :class:`Decimal128` (raw bytes,
                  carried, never computed with)
char              :class:`Char` (one code point)
timestamp         :class:`Timestamp` (milliseconds since the Unix epoch, signed 64 bits)
uuid              :class:`uuid.UUID`
binary            ``bytes``
string            ``str``
symbol            :class:`Symbol` (ASCII)
list              ``list``
map               ``dict`` (keys and values any AMQP value; insertion order kept)
array             :class:`Array` (one element type, named by its format code)
described         :class:`Described` (a descriptor and a value), or a composite of
                  :mod:`broker.amqp10.performatives` / :mod:`broker.amqp10.sections`
================  =====================================================================

The integer classes check their range when made (``UByte(256)`` raises ``ValueError``),
so a composite's fields are right by construction. No I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

__all__ = [
    "UUID",
    "Array",
    "Byte",
    "Char",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "Described",
    "Float",
    "Int",
    "Short",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
]

UUID = uuid.UUID


class _Ranged(int):
    """An ``int`` of a fixed-width AMQP integer type: its range checked when made."""

    LOW = 0
    HIGH = 0

    def __new__(cls, value: int = 0) -> Any:
        made = super().__new__(cls, value)
        if not cls.LOW <= made <= cls.HIGH:
            raise ValueError(f"{cls.__name__} out of range: {int(value)}")
        return made

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"

    __str__ = int.__repr__  # the number, as for any int (not the repr above)


class UByte(_Ranged):
    HIGH = 0xFF


class UShort(_Ranged):
    HIGH = 0xFFFF


class UInt(_Ranged):
    HIGH = 0xFFFFFFFF


class ULong(_Ranged):
    HIGH = 0xFFFFFFFFFFFFFFFF


class Byte(_Ranged):
    LOW, HIGH = -0x80, 0x7F


class Short(_Ranged):
    LOW, HIGH = -0x8000, 0x7FFF


class Int(_Ranged):
    LOW, HIGH = -0x80000000, 0x7FFFFFFF


class Timestamp(_Ranged):
    """Milliseconds since the Unix epoch."""

    LOW, HIGH = -0x8000000000000000, 0x7FFFFFFFFFFFFFFF


class Float(float):
    """A 32-bit IEEE 754 float (a plain ``float`` is a double)."""

    def __repr__(self) -> str:
        return f"Float({float(self)!r})"

    __str__ = float.__repr__


class Symbol(str):
    """A symbolic value from a constrained domain (ASCII only)."""

    def __new__(cls, value: str = "") -> Any:
        made = super().__new__(cls, value)
        if not made.isascii():
            raise ValueError(f"symbol is not ASCII: {value!r}")
        return made

    def __repr__(self) -> str:
        return f"Symbol({str(self)!r})"


class Char(str):
    """A single Unicode code point (UTF-32BE on the wire)."""

    def __new__(cls, value: str) -> Any:
        made = super().__new__(cls, value)
        if len(made) != 1:
            raise ValueError(f"char is one code point, not {value!r}")
        return made

    def __repr__(self) -> str:
        return f"Char({str(self)!r})"


class _RawDecimal(bytes):
    SIZE = 0

    def __new__(cls, value: bytes) -> Any:
        made = super().__new__(cls, value)
        if len(made) != cls.SIZE:
            raise ValueError(f"{cls.__name__} is {cls.SIZE} bytes, not {len(made)}")
        return made

    def __repr__(self) -> str:
        return f"{type(self).__name__}({bytes(self)!r})"


class Decimal32(_RawDecimal):
    SIZE = 4


class Decimal64(_RawDecimal):
    SIZE = 8


class Decimal128(_RawDecimal):
    SIZE = 16


class Array(list[Any]):
    """An AMQP array: every element of one type, the type named by its format code
    (``Array(0xA3, [Symbol("a")])``: an array of symbols). An empty array still has one."""

    def __init__(self, code: int, items: Any = ()) -> None:
        super().__init__(items)
        self.code = code

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Array) and self.code == other.code and list.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"Array({self.code:#04x}, {list.__repr__(self)})"


@dataclass(frozen=True, slots=True)
class Described:
    """A described value whose descriptor no composite of ours claims: carried as is."""

    descriptor: Any
    value: Any
