"""The broker options' converters: an option's text to its value, and a default back to text.

Contract: each converter takes the option's text (as typed on the command line or after
``=`` in the config file) and returns the value, or raises :class:`ValueError` whose message
says what was expected (``expected an integer from 0 to 65535``); :mod:`broker.options`
adds the option's name and the bad value. Leading and trailing whitespace is ignored.
:func:`show` writes a default the way the option would accept it (``yes``, ``10s``, ...),
for the help text. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from broker.core.alarms import memory_limit_bytes, parse_size
from common.duration import format_duration, parse_duration
from common.url import parse_url

__all__ = [
    "broker_url",
    "byte_size",
    "choice",
    "duration",
    "int_range",
    "memory_amount",
    "non_empty",
    "parse_bool",
    "positive_duration",
    "show",
    "upper_choice",
]

_TRUE = frozenset({"yes", "true", "1", "on"})
_FALSE = frozenset({"no", "false", "0", "off"})
_DIGITS = re.compile(r"[0-9]+")


def parse_bool(text: str) -> bool:
    """``yes``/``no`` (also ``true``/``false``, ``on``/``off``, ``1``/``0``), any case."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError("expected yes or no (or true/false, on/off, 1/0)")


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    expected = (
        f"expected an integer from {low} to {high}"
        if high is not None
        else f"expected an integer >= {low}"
    )

    def convert(text: str) -> int:
        digits = text.strip()
        if _DIGITS.fullmatch(digits) is None or len(digits) > 30:
            raise ValueError(expected)
        value = int(digits)
        if value < low or (high is not None and value > high):
            raise ValueError(expected)
        return value

    return convert


def choice(*choices: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        word = text.strip().lower()
        if word not in choices:
            raise ValueError("expected one of: " + ", ".join(choices))
        return word

    return convert


def non_empty(text: str) -> str:
    value = text.strip()
    if not value:
        raise ValueError("expected a non-empty value")
    return value


def agent_name(text: str) -> str:
    """A qpid-ha-agent's node name: 1 to 255 printable characters, no white space."""
    if not 0 < len(text) <= 255 or not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError("expected the agent's node name (no white space, at most 255)")
    return text


def name_list(text: str) -> str:
    """Comma-separated names, normalised to ``a,b`` (empty: none)."""
    names = [name.strip() for name in text.split(",")]
    if any(not name or any(c.isspace() for c in name) for name in names) and text.strip():
        raise ValueError("expected comma-separated names without spaces, e.g. guest,admin")
    return ",".join(name for name in names if name)


def duration(maximum: float) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            seconds = parse_duration(text)
        except ValueError:
            raise ValueError(
                "expected a duration: seconds (e.g. 0.5) or a number with unit s, ms, us or ns"
            ) from None
        if seconds > maximum:
            raise ValueError(f"expected at most {format_duration(maximum)}")
        return seconds

    return convert


def positive_duration(maximum: float) -> Callable[[str], float]:
    """Like :func:`duration`, refusing zero."""
    convert_duration = duration(maximum)

    def convert(text: str) -> float:
        seconds = convert_duration(text)
        if seconds <= 0:
            raise ValueError("expected a duration greater than 0")
        return seconds

    return convert


def fraction_below(limit: float) -> Callable[[str], float]:
    """A fraction from 0 up to (not including) ``limit``, e.g. 0.01."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(
                f"expected a fraction, e.g. 0.01 (at least 0, below {limit:g})"
            ) from None
        if not 0.0 <= value < limit:
            raise ValueError(f"expected a fraction at least 0 and below {limit:g}")
        return value

    return convert


def upper_choice(*choices: str) -> Callable[[str], str]:
    """One of ``choices`` (upper case names, e.g. SASL mechanisms), any case accepted."""

    def convert(text: str) -> str:
        word = text.strip().upper()
        if word not in choices:
            raise ValueError("expected one of: " + ", ".join(choices))
        return word

    return convert


def broker_url(text: str) -> str:
    """A broker URL (:func:`common.url.parse_url` checks it); the text is kept, stripped."""
    try:
        parse_url(text)
    except ValueError as exc:
        reason = str(exc)
        prefix = f"invalid broker URL {text!r}: "
        if reason.startswith(prefix):
            reason = reason[len(prefix) :]
        raise ValueError(
            f"expected a broker URL like host1,host2:5673 or amqp:tcp:host:5672 ({reason})"
        ) from None
    return text.strip()


def byte_size(text: str) -> int:
    """A size in bytes: ``1048576``, ``50MB`` (10^6), ``50MiB`` or ``50M`` (2^20), ..."""
    return parse_size(text)


def memory_amount(text: str) -> str:
    """A memory limit: a size (``2GiB``) or a share of the machine's memory (``40%``)."""
    memory_limit_bytes(text, 1)
    return text.strip()


def show(value: object) -> str:
    """A default value as the help text shows it (and as the option would accept it)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format_duration(value)
    return str(value)
