"""Topic-exchange pattern matching against a regex reference and RabbitMQ's own examples."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.topic import topic_matches


def _rabbit_words(text: str) -> list[str]:
    """RabbitMQ's split: the empty key has no words, otherwise split on every dot."""
    return text.split(".") if text else []


def reference_matches(pattern: str, routing_key: str) -> bool:
    """Translate the pattern to a regex over the key written as ``word.`` per word."""
    parts = []
    for word in _rabbit_words(pattern):
        if word == "#":
            parts.append(r"(?:[^.]*\.)*")
        elif word == "*":
            parts.append(r"[^.]*\.")
        else:
            parts.append(re.escape(word) + r"\.")
    subject = "".join(word + "." for word in _rabbit_words(routing_key))
    return re.fullmatch("".join(parts), subject) is not None


KEY_WORDS = st.sampled_from(["a", "b", "", "ab", "*", "#"])
PATTERN_WORDS = st.sampled_from(["a", "b", "", "ab", "*", "#", "*", "#"])


def _join(words: list[str]) -> str:
    return ".".join(words)


@settings(max_examples=600, deadline=None)
@given(
    pattern=st.lists(PATTERN_WORDS, max_size=6).map(_join),
    key=st.lists(KEY_WORDS, max_size=6).map(_join),
)
def test_matches_reference(pattern: str, key: str) -> None:
    assert topic_matches(pattern, key) == reference_matches(pattern, key)


@settings(max_examples=300, deadline=None)
@given(key=st.lists(KEY_WORDS, max_size=6).map(_join))
def test_hash_matches_every_key(key: str) -> None:
    assert topic_matches("#", key)
    assert topic_matches("#.#", key)


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.sampled_from(["a", "b", "ab", "x-y"]), min_size=1, max_size=6))
def test_literal_pattern_matches_only_itself(words: list[str]) -> None:
    key = _join(words)
    assert topic_matches(key, key)
    assert not topic_matches(key, key + ".a")
    assert not topic_matches(key + ".a", key)
    # Every word replaced by * still matches, and "#" anywhere in place of a run too.
    assert topic_matches(_join(["*"] * len(words)), key)
    assert topic_matches(_join(["#", *words[1:]]), key)
    assert topic_matches(_join([*words[:-1], "#"]), key)


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("#", "", True),
        ("#", "a", True),
        ("#", "a.b.c", True),
        ("#.#", "", True),
        ("#.#", "a.b", True),
        ("a.*", "a", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("a.#", "b.a", False),
        ("*.b.#", "a.b", True),
        ("*.b.#", "a.b.c.d", True),
        ("*.b.#", "b", False),
        ("*.b.#", "a.a.b", False),
        ("#.b", "b", True),
        ("#.b", "a.a.b", True),
        ("#.b", "a.b.a", False),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("*", "", False),
        ("*", "a", True),
        ("*", "a.b", False),
        ("", "", True),
        ("", "a", False),
        ("a", "", False),
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("*", ".", False),
        ("*.*", ".", True),
        ("a.", "a.", True),
        ("a.*", "a.", True),
        ("a", "A", False),
    ],
)
def test_classic_examples(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected
    assert reference_matches(pattern, key) is expected


# RabbitMQ's own topic-exchange test (rabbit_tests.erl, test_topic_matching).
RABBIT_BINDINGS = {
    "t1": "a.b.c",
    "t2": "a.*.c",
    "t3": "a.#.b",
    "t4": "a.b.b.c",
    "t5": "#",
    "t6": "#.#",
    "t7": "#.b",
    "t8": "*.*",
    "t9": "a.*",
    "t10": "*.b.c",
    "t11": "a.#",
    "t12": "a.#.#",
    "t13": "b.b.c",
    "t14": "a.b.b",
    "t15": "a.b",
    "t16": "b.c",
    "t17": "",
    "t18": "*.*.*",
    "t19": "vodka.martini",
    "t20": "a.b.c",
    "t21": "*.#",
    "t22": "#.*.#",
    "t23": "*.#.#",
    "t24": "#.#.#",
    "t25": "*",
    "t26": "#.b.#",
}

RABBIT_EXPECTED = {
    "a.b.c": "t1 t2 t5 t6 t10 t11 t12 t18 t20 t21 t22 t23 t24 t26",
    "a.b": "t3 t5 t6 t7 t8 t9 t11 t12 t15 t21 t22 t23 t24 t26",
    "a.b.b": "t3 t5 t6 t7 t11 t12 t14 t18 t21 t22 t23 t24 t26",
    "": "t5 t6 t17 t24",
    "b.c.c": "t5 t6 t18 t21 t22 t23 t24 t26",
    "a.a.a.a.a": "t5 t6 t11 t12 t21 t22 t23 t24",
    "vodka.gin": "t5 t6 t8 t21 t22 t23 t24",
    "vodka.martini": "t5 t6 t8 t19 t21 t22 t23 t24",
    "b.b.c": "t5 t6 t10 t13 t18 t21 t22 t23 t24 t26",
    "nothing.here.at.all": "t5 t6 t21 t22 t23 t24",
    "oneword": "t5 t6 t21 t22 t23 t24 t25",
}


@pytest.mark.parametrize("key", sorted(RABBIT_EXPECTED))
def test_rabbitmq_topic_table(key: str) -> None:
    matched = {name for name, pattern in RABBIT_BINDINGS.items() if topic_matches(pattern, key)}
    assert matched == set(RABBIT_EXPECTED[key].split())
