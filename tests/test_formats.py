"""Format ranges and their negotiation (common.formats): the rule both ends of a link and
every agent apply, held for any two ranges."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.formats import FormatRange, choose, no_common_format, parse_range
from common.version import (
    REPLICATION_FORMATS,
    TEST_REPLICATION_FORMATS_ENV,
    replication_formats,
)


@st.composite
def ranges(draw: st.DrawFn) -> FormatRange:
    low = draw(st.integers(1, 12))
    return FormatRange(low, draw(st.integers(low, 12)))


@given(ranges(), ranges())
def test_the_highest_common_format_is_chosen_the_same_on_both_sides(
    a: FormatRange, b: FormatRange
) -> None:
    chosen = choose(a, b)
    assert chosen == choose(b, a)
    common = [f for f in range(1, 13) if f in a and f in b]
    assert chosen == (max(common) if common else None)


@given(ranges())
def test_a_range_reads_back_from_its_text(a: FormatRange) -> None:
    assert parse_range(a.text) == a
    assert parse_range(a.text.encode()) == a  # as an AMQP field table may carry it


@pytest.mark.parametrize("bad", ["", "1", "2-1", "0-1", "a-b", "1-2-3", " 1-1", 1, None, "-1-1"])
def test_a_bad_range_is_a_value_error_naming_it(bad: object) -> None:
    with pytest.raises(ValueError, match="format"):
        parse_range(bad)


def test_the_refusal_line_names_both_ranges_and_whom_to_upgrade() -> None:
    line = no_common_format("replication", FormatRange(1, 1), FormatRange(3, 4), "backup n3:5672")
    assert line == (
        "no common replication format: this broker speaks replication format 1,"
        " backup n3:5672 replication formats 3-4: upgrade this broker"
        " (docs/deploy.md, 'Upgrading a cluster')"
    )
    older = no_common_format("replication", FormatRange(3, 4), FormatRange(1, 2), "backup b")
    assert older.endswith("upgrade backup b (docs/deploy.md, 'Upgrading a cluster')")
    none = no_common_format("replication", FormatRange(1, 1), None, "backup b")
    assert "backup b announced none (a build before release 0.1.0)" in none


def test_the_test_only_override(monkeypatch: pytest.MonkeyPatch) -> None:
    assert replication_formats() == REPLICATION_FORMATS
    monkeypatch.setenv(TEST_REPLICATION_FORMATS_ENV, "99-99")
    assert replication_formats() == FormatRange(99, 99)
    monkeypatch.setenv(TEST_REPLICATION_FORMATS_ENV, "x")
    with pytest.raises(ValueError, match=TEST_REPLICATION_FORMATS_ENV):
        replication_formats()
