"""common.duration: the SECONDS values of seed 001 footnote [b]."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.duration import UNITS, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0.1", 0.1),  # the seed's "a tenth of a second"
        ("10", 10.0),
        ("2.5", 2.5),
        ("0", 0.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("10s", 10.0),
        ("10ms", 0.01),
        ("10us", 0.00001),
        ("10ns", 0.00000001),
        ("250us", 0.00025),
        ("5ns", 5e-9),
        ("1.5ms", 0.0015),
        ("  7s\n", 7.0),
    ],
)
def test_parse_examples(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    ["", " ", "10 parsecs", "-1", "+1", "nan", "inf", "1e3", "10 s", "10m", "10S", "s", "1.2.3"],
)
def test_parse_rejects_naming_the_value(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(text)
    assert f"invalid duration {text!r}" in str(info.value)
    assert "s, ms, us or ns" in str(info.value)


def test_parse_rejects_overflow() -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_duration("9" * 400)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (10.0, "10s"),
        (2.5, "2.5s"),
        (60.0, "60s"),
        (0.1, "100ms"),
        (0.01, "10ms"),
        (0.0015, "1.5ms"),
        (0.00025, "250us"),
        (5e-9, "5ns"),
        (1e-12, "0.001ns"),
    ],
)
def test_format_examples(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_format_rejects(bad: float) -> None:
    with pytest.raises(ValueError):
        format_duration(bad)


@given(st.floats(min_value=0, allow_nan=False, allow_infinity=False))
def test_format_reads_back_exactly(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@given(
    whole=st.integers(min_value=0, max_value=10**12),
    fraction=st.none() | st.text(alphabet="0123456789", max_size=9),
    unit=st.sampled_from(["", *UNITS]),
)
def test_parse_is_the_exact_decimal_value(whole: int, fraction: str | None, unit: str) -> None:
    number = str(whole) if fraction is None else f"{whole}.{fraction}"
    expected = float(Fraction(number) / UNITS[unit or "s"])
    assert parse_duration(number + unit) == expected
    assert parse_duration(f" {number}{unit} ") == expected


@given(st.text(max_size=12))
def test_parse_only_raises_value_error(text: str) -> None:
    try:
        result = parse_duration(text)
    except ValueError as exc:
        assert repr(text) in str(exc)
    else:
        assert result >= 0 and math.isfinite(result)
