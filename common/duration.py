"""Durations as the qpid options write them: ``0.1``, ``10s``, ``10ms``, ``250us``, ``5ns``.

Seed 001 (footnote [b] of section 1.12.3): "Values specified as SECONDS can be a fraction of
a second, e.g. "0.1" for a tenth of a second. They can also have an explicit unit, e.g. 10s
(seconds), 10ms (milliseconds), 10us (microseconds), 10ns (nanoseconds)".

:func:`parse_duration` reads that text into seconds (a float); :func:`format_duration`
writes seconds back in a form that :func:`parse_duration` reads to the very same float.
Both are pure functions.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

__all__ = ["UNITS", "format_duration", "parse_duration"]

#: Unit suffix -> how many of that unit make one second.
UNITS: dict[str, int] = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}

_DURATION = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<unit>s|ms|us|ns)?")

_EXPECTED = "expected a number of seconds, optionally with unit s, ms, us or ns"


def parse_duration(text: str) -> float:
    """Return the duration ``text`` in seconds.

    ``text`` is a non-negative decimal number (``"10"``, ``"2.5"``, ``".5"``), optionally
    followed directly by a unit (``s``, ``ms``, ``us``, ``ns``); no unit means seconds.
    Surrounding whitespace is ignored. Signs, exponents, ``nan`` and ``inf`` are refused.
    The result is the float nearest to the exact decimal value.

    :raises ValueError: naming ``text`` when it is not a duration.
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}: {_EXPECTED}")
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"invalid duration {text!r}: {_EXPECTED}")
    exact = Fraction(match["number"]) / UNITS[match["unit"] or "s"]
    try:
        seconds = float(exact)
    except OverflowError:
        seconds = math.inf
    if math.isinf(seconds):
        raise ValueError(f"invalid duration {text!r}: too large")
    return seconds


def format_duration(seconds: float) -> str:
    """Render ``seconds`` so that ``parse_duration(format_duration(x)) == x`` exactly.

    Uses the largest unit in which the value is at least 1 (``"10s"``, ``"2.5s"``,
    ``"100ms"``, ``"1.5ms"``, ``"250us"``), plain decimal notation, and ``"0s"`` for zero.

    :raises ValueError: for negative, NaN or infinite ``seconds``.
    """
    value = float(seconds)
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ValueError(f"invalid duration {seconds!r}: must be a finite number >= 0")
    if value == 0:
        return "0s"
    # repr() is the shortest decimal that reads back as the same float; scaling it by a
    # power of ten in Decimal is exact, and parse_duration divides it back exactly.
    exact = Decimal(repr(value))
    for unit, per_second in UNITS.items():
        scaled = exact * per_second
        if scaled >= 1 or unit == "ns":
            return _plain(scaled) + unit
    raise AssertionError("unreachable")  # pragma: no cover


def _plain(number: Decimal) -> str:
    """``number`` in positional notation without trailing zeros (``2.50`` -> ``2.5``)."""
    text = format(number, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
