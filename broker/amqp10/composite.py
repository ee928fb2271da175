"""Composite types (OASIS AMQP 1.0, part 1, section 1.4): a described list whose fields
have names, types, defaults and a mandatory flag; the base of every performative,
delivery state, terminus and message section of this package.

A composite is a frozen dataclass whose fields are the composite's fields in their wire
order; the class says its descriptor (``CODE``, ``NAME``) and each field's wire type
(``KINDS``, one of :data:`KINDS`' keys, or the composite class a field holds). Encoding
gives each value its wire type (``UInt`` for a ``uint`` field...) and leaves out trailing
nulls; decoding checks every field's type and that mandatory ones are there, and raises
:class:`~broker.amqp10.codec.DecodeError` otherwise. Subclasses register themselves with
the codec, so :func:`broker.amqp10.codec.decode` returns them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from broker.amqp10 import codec
from broker.amqp10.codec import DecodeError
from broker.amqp10.types import Array, Symbol, Timestamp, UByte, UInt, ULong, UShort


def _integer(kind: type[int]) -> Callable[[Any], Any]:
    def coerce(value: Any) -> Any:
        if not isinstance(value, int) or isinstance(value, bool):
            raise DecodeError(f"expected {kind.__name__}, got {type(value).__name__}")
        try:
            return kind(value)
        except ValueError as exc:
            raise DecodeError(str(exc)) from None

    return coerce


def _typed(kind: type, what: str) -> Callable[[Any], Any]:
    def coerce(value: Any) -> Any:
        if not isinstance(value, kind):
            raise DecodeError(f"expected {what}, got {type(value).__name__}")
        return value

    return coerce


def _symbols(value: Any) -> tuple[Symbol, ...]:
    """A ``multiple`` symbol field: one symbol or an array (or list) of them."""
    if isinstance(value, str):
        return (Symbol(value),)
    if isinstance(value, list | tuple):
        if not all(isinstance(v, str) for v in value):
            raise DecodeError("expected symbols")
        return tuple(Symbol(v) for v in value)
    raise DecodeError(f"expected symbols, got {type(value).__name__}")


def _symbol(value: Any) -> Symbol:
    if not isinstance(value, str):
        raise DecodeError(f"expected symbol, got {type(value).__name__}")
    try:
        made: Symbol = Symbol(value)
    except ValueError as exc:
        raise DecodeError(str(exc)) from None
    return made


def _fields(value: Any) -> dict[Any, Any]:
    """A ``fields`` map: symbol keys (as the specification asks)."""
    if not isinstance(value, dict):
        raise DecodeError(f"expected a map, got {type(value).__name__}")
    return value


#: How a field of each kind is checked when decoded (and typed when encoded).
KINDS: dict[str, Callable[[Any], Any]] = {
    "ubyte": _integer(UByte),
    "ushort": _integer(UShort),
    "uint": _integer(UInt),
    "ulong": _integer(ULong),
    "timestamp": _integer(Timestamp),
    "bool": _typed(bool, "boolean"),
    "string": _typed(str, "string"),
    "binary": _typed(bytes, "binary"),
    "symbol": _symbol,
    "symbols": _symbols,
    "map": _typed(dict, "map"),
    "fields": _fields,
    "list": _typed(list, "list"),
    "any": lambda value: value,
}


def _wire(kind: str | type | tuple[type, ...], value: Any) -> Any:
    """``value`` as its field's wire type (for encoding)."""
    if value is None or not isinstance(kind, str):
        return value
    if kind == "symbols":
        symbols = _symbols(value)
        return symbols[0] if len(symbols) == 1 else Array(0xA3, symbols)
    if kind == "fields":
        return {Symbol(k) if isinstance(k, str) else k: v for k, v in value.items()}
    if kind in ("any", "map", "list", "binary", "string", "bool"):
        return value
    return KINDS[kind](value)


class Composite:
    """A composite type's value; see the module docstring."""

    CODE: ClassVar[int]
    NAME: ClassVar[str]
    #: Each field's kind, in field order (a KINDS key, or the class(es) it holds).
    KINDS: ClassVar[tuple[str | type | tuple[type, ...], ...]]
    #: The names of the mandatory fields.
    MANDATORY: ClassVar[frozenset[str]] = frozenset()
    _NAMES: ClassVar[tuple[str, ...]]
    _DEFAULTS: ClassVar[tuple[Any, ...]]
    _REQUIRED: ClassVar[frozenset[int]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "CODE" in cls.__dict__:
            codec.register(cls.CODE, cls.NAME, cls.from_described)

    @classmethod
    def _prepare(cls) -> None:
        found = dataclasses.fields(cls)  # type: ignore[arg-type]
        cls._NAMES = tuple(f.name for f in found)
        cls._DEFAULTS = tuple(
            None if f.default is dataclasses.MISSING else f.default for f in found
        )
        cls._REQUIRED = frozenset(i for i, n in enumerate(cls._NAMES) if n in cls.MANDATORY)
        if len(cls._NAMES) != len(cls.KINDS):
            raise TypeError(f"{cls.__name__}: {len(cls.KINDS)} kinds for {len(found)} fields")

    def described(self) -> tuple[int, Any]:
        """(descriptor, the list of fields) for the codec; trailing nulls left out."""
        cls = type(self)
        values = [
            _wire(kind, getattr(self, name))
            for name, kind in zip(cls._NAMES, cls.KINDS, strict=True)
        ]
        for index, default in enumerate(cls._DEFAULTS):
            if index not in cls._REQUIRED and default is not None and values[index] == default:
                values[index] = None  # null is the default (shorter, and the same)
        while values and values[-1] is None:
            values.pop()
        return cls.CODE, values

    @classmethod
    def from_described(cls, value: Any) -> Any:
        if not isinstance(value, list):
            raise DecodeError(f"{cls.NAME}: expected a list, got {type(value).__name__}")
        names = cls._NAMES
        if len(value) > len(names):
            value = value[: len(names)]  # fields of a later version: ignored
        made: dict[str, Any] = {}
        for index, name in enumerate(names):
            item = value[index] if index < len(value) else None
            if item is None:
                if name in cls.MANDATORY:
                    raise DecodeError(f"{cls.NAME}: mandatory field {name} is missing")
                continue
            kind = cls.KINDS[index]
            if isinstance(kind, str):
                item = KINDS[kind](item)
            elif not isinstance(item, kind):
                raise DecodeError(f"{cls.NAME}: field {name} of type {type(item).__name__}")
            made[name] = item
        return cls(**made)

    def encode(self) -> bytes:
        return codec.encode(self)


class Wrapper:
    """A described value that is not a list (a message section holding a map, binary or
    any value); ``KIND`` checks it as :data:`KINDS` does."""

    CODE: ClassVar[int]
    NAME: ClassVar[str]
    KIND: ClassVar[str]

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        codec.register(cls.CODE, cls.NAME, cls.from_described)

    @classmethod
    def from_described(cls, value: Any) -> Any:
        return cls(KINDS[cls.KIND](value))

    def described(self) -> tuple[int, Any]:
        return self.CODE, _wire(self.KIND, self.value)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Wrapper) and type(other) is type(self) and other.value == self.value
        )

    def __hash__(self) -> int:
        return hash((self.CODE, repr(self.value)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


def composite(cls: type[Composite]) -> type[Composite]:
    """Finish a composite dataclass (its field names and defaults read once)."""
    cls._prepare()
    return cls
