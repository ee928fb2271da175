"""The scheduling list of tests/conftest.py: each entry still names collected tests, and the
sort puts them first in their order, the others in theirs."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FIRST, slow_first_rank

ROOT = Path(__file__).resolve().parents[1]


def test_each_entry_names_a_test_file_or_the_start_of_a_test_s_name() -> None:
    for prefix in SLOW_FIRST:
        path, _, name = prefix.partition("::")
        assert (ROOT / path).is_file(), prefix
        if name:  # a test function's name, or the start of one
            assert f"def {name}" in (ROOT / path).read_text(), prefix


def test_listed_tests_first_in_order_others_unchanged() -> None:
    ids = ["tests/a.py::t1", SLOW_FIRST[1] + "::x", "tests/b.py::t2", SLOW_FIRST[0] + "::y"]
    ranked = sorted(ids, key=slow_first_rank)
    assert ranked == [SLOW_FIRST[0] + "::y", SLOW_FIRST[1] + "::x", "tests/a.py::t1",
                      "tests/b.py::t2"]  # fmt: skip
