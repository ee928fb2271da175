"""Headers-exchange matching (``amq.match``/``amq.headers``, RabbitMQ semantics).

A binding's arguments name the headers to compare; ``x-match`` says how: ``all`` (default)
or ``any``, ignoring arguments whose names start with ``x-``; ``all-with-x`` and
``any-with-x`` compare those too. A binding argument with no value (void) matches a header
of that name with any value.
"""

from __future__ import annotations

from typing import Any

from broker.core.errors import precondition_failed

X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")


def validate_binding(arguments: dict[str, Any]) -> None:
    """Refuse a bad ``x-match`` with PRECONDITION_FAILED."""
    mode = arguments.get("x-match", "all")
    if mode not in X_MATCH_MODES:
        raise precondition_failed(
            f"invalid x-match field value {mode!r}; expected one of {', '.join(X_MATCH_MODES)}"
        )


def headers_match(binding: dict[str, Any], headers: dict[str, Any]) -> bool:
    """True when message ``headers`` satisfy the ``binding`` arguments."""
    mode = str(binding.get("x-match", "all"))
    with_x = mode.endswith("-with-x")
    want_all = mode.startswith("all")
    for name, expected in binding.items():
        if name == "x-match" or (name.startswith("x-") and not with_x):
            continue
        matched = name in headers and (expected is None or headers[name] == expected)
        if want_all and not matched:
            return False
        if not want_all and matched:
            return True
    # all: every checked header matched (vacuously true with none); any: none matched.
    return want_all
