"""The field table writer's remembered field names (a snapshot's 10,000 rows use the same
seven: checked and encoded once): the same bytes as the first time, the same errors every
time, and never more than it keeps."""

from __future__ import annotations

import pytest

from broker.core import field_table_codec
from broker.core.field_table_codec import decode_table, encode_table, lossless_grammar

GRAMMAR = lossless_grammar(8, "test table")


def test_a_remembered_name_writes_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # an empty memory of its own: the worker's earlier tests may have filled the real one
    # (it keeps at most _FIELD_NAMES_KEPT names, then remembers no more)
    monkeypatch.setattr(field_table_codec, "_FIELD_NAMES", {})
    row = {"name": "q", "durable": True, "arguments": {"x-max-length": 5}, "ünï": None}
    first = encode_table(row, max_depth=8, what="t")
    assert "ünï" in field_table_codec._FIELD_NAMES
    assert encode_table(row, max_depth=8, what="t") == first
    assert decode_table(first, GRAMMAR) == row


def test_a_bad_name_fails_every_time_and_is_not_remembered() -> None:
    long = "k" * 256
    for _ in range(2):
        with pytest.raises(ValueError, match="more than 255"):
            encode_table({long: 1}, max_depth=8, what="t")
        with pytest.raises(ValueError, match="is not a str"):
            encode_table({1: 1}, max_depth=8, what="t")
    assert long not in field_table_codec._FIELD_NAMES


def test_no_more_names_than_it_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(field_table_codec, "_FIELD_NAMES", {})
    monkeypatch.setattr(field_table_codec, "_FIELD_NAMES_KEPT", 3)
    table = {f"k{i}": i for i in range(10)}
    data = encode_table(table, max_depth=8, what="t")
    assert len(field_table_codec._FIELD_NAMES) == 3
    assert decode_table(data, GRAMMAR) == table
