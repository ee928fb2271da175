"""Headers-exchange matching (RabbitMQ semantics) and x-match validation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.errors import AmqpError, ReplyCode
from broker.core.headers_match import headers_match, validate_binding

HEADERS = {"format": "pdf", "type": "report", "pages": 3, "x-tenant": "acme"}


@pytest.mark.parametrize(
    ("binding", "expected"),
    [
        # all (the default): every named header present and equal
        ({"format": "pdf"}, True),
        ({"x-match": "all", "format": "pdf", "type": "report"}, True),
        ({"format": "pdf", "type": "log"}, False),
        ({"format": "pdf", "missing": "x"}, False),
        ({"pages": 3}, True),
        ({"pages": 4}, False),
        ({"pages": "3"}, False),
        # any: at least one named header present and equal
        ({"x-match": "any", "format": "doc", "type": "report"}, True),
        ({"x-match": "any", "format": "doc", "type": "log"}, False),
        ({"x-match": "any", "missing": "x", "pages": 3}, True),
        ({"x-match": "any", "missing": "x"}, False),
        # x- arguments are ignored by all/any ...
        ({"format": "pdf", "x-tenant": "other"}, True),
        ({"x-match": "any", "x-tenant": "acme"}, False),
        ({"x-match": "any", "x-tenant": "acme", "format": "doc"}, False),
        ({"x-match": "all", "x-tenant": "other"}, True),
        # ... and compared by all-with-x/any-with-x
        ({"x-match": "all-with-x", "format": "pdf", "x-tenant": "acme"}, True),
        ({"x-match": "all-with-x", "format": "pdf", "x-tenant": "other"}, False),
        ({"x-match": "all-with-x", "x-missing": "v"}, False),
        ({"x-match": "any-with-x", "format": "doc", "x-tenant": "acme"}, True),
        ({"x-match": "any-with-x", "format": "doc", "x-tenant": "other"}, False),
        ({"x-match": "any-with-x", "x-tenant": "acme"}, True),
        # void (None) binding values match on presence alone
        ({"format": None}, True),
        ({"format": None, "type": None}, True),
        ({"missing": None}, False),
        ({"x-match": "any", "missing": None, "format": None}, True),
        ({"x-match": "any", "missing": None}, False),
        ({"x-match": "all-with-x", "x-tenant": None}, True),
        ({"x-match": "any-with-x", "x-other": None}, False),
        # no arguments: all matches everything, any matches nothing
        ({}, True),
        ({"x-match": "all"}, True),
        ({"x-match": "any"}, False),
        ({"x-match": "all-with-x"}, True),
        ({"x-match": "any-with-x"}, False),
    ],
)
def test_headers_match(binding: dict[str, Any], expected: bool) -> None:
    assert headers_match(binding, HEADERS) is expected


def test_message_without_headers() -> None:
    assert headers_match({}, {})
    assert not headers_match({"a": 1}, {})
    assert not headers_match({"a": None}, {})
    assert not headers_match({"x-match": "any", "a": 1}, {})
    assert headers_match({"x-match": "all", "x-foo": 1}, {})


def test_void_header_value_matches_only_void_or_presence() -> None:
    headers = {"a": None}
    assert headers_match({"a": None}, headers)
    assert not headers_match({"a": "x"}, headers)


def test_binding_values_compare_by_value() -> None:
    headers = {"n": 1, "s": "1", "nested": {"k": [1, 2]}}
    assert headers_match({"n": 1}, headers)
    assert not headers_match({"n": "1"}, headers)
    assert headers_match({"s": "1"}, headers)
    assert headers_match({"nested": {"k": [1, 2]}}, headers)
    assert not headers_match({"nested": {"k": [2, 1]}}, headers)


@pytest.mark.parametrize("mode", ["all", "any", "all-with-x", "any-with-x"])
def test_validate_accepts_modes(mode: str) -> None:
    validate_binding({"x-match": mode, "a": 1})


def test_validate_accepts_default() -> None:
    validate_binding({})
    validate_binding({"a": 1})


@pytest.mark.parametrize("mode", ["ALL", "some", "", 1, None])
def test_validate_refuses_bad_mode(mode: object) -> None:
    with pytest.raises(AmqpError) as info:
        validate_binding({"x-match": mode})
    assert info.value.reply_code == ReplyCode.PRECONDITION_FAILED
    assert "x-match" in info.value.reply_text


NAMES = st.sampled_from(["a", "b", "c", "x-a", "x-b"])
VALUES = st.sampled_from([None, 1, 2, "s"])


def _reference(binding: dict[str, Any], headers: dict[str, Any]) -> bool:
    mode = binding.get("x-match", "all")
    checked = {
        k: v
        for k, v in binding.items()
        if k != "x-match" and (mode.endswith("-with-x") or not k.startswith("x-"))
    }
    results = [k in headers and (v is None or headers[k] == v) for k, v in checked.items()]
    return all(results) if mode.startswith("all") else any(results)


@settings(max_examples=400, deadline=None)
@given(
    mode=st.sampled_from([None, "all", "any", "all-with-x", "any-with-x"]),
    binding=st.dictionaries(NAMES, VALUES, max_size=5),
    headers=st.dictionaries(NAMES, VALUES.filter(lambda v: v is not None), max_size=5),
)
def test_matches_reference(
    mode: str | None, binding: dict[str, Any], headers: dict[str, Any]
) -> None:
    if mode is not None:
        binding = {**binding, "x-match": mode}
    assert headers_match(binding, headers) is _reference(binding, headers)
