"""Password hashes and the users database, without I/O (issue 13, item 2)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security.passwords import (
    PasswordHashError,
    hash_password,
    parse_hash,
    verify_password,
)
from broker.security.roles import Role
from broker.security.users import User, UserDatabase

passwords = st.text(min_size=1, max_size=20)


@settings(deadline=None, max_examples=30)
@given(passwords, passwords)
def test_a_hash_verifies_its_password_only(password: str, other: str) -> None:
    stored = parse_hash(hash_password(password, log_n=10))
    assert verify_password(password, stored)
    assert verify_password(other, stored) is (other == password)
    assert parse_hash(stored.encode()) == stored
    assert password not in stored.encode() or len(password) < 3


def test_salts_differ_and_parameters_travel_with_the_hash() -> None:
    first, second = hash_password("guest", log_n=10), hash_password("guest", log_n=10)
    assert first != second
    assert first.startswith("$scrypt$ln=10,r=8,p=1$")
    assert hash_password("guest").startswith("$scrypt$ln=14,r=8,p=1$")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("guest", "not a $scrypt$"),
        ("$scrypt$ln=14,r=8,p=1$c2FsdA$", "not a $scrypt$"),
        ("$scrypt$ln=9,r=8,p=1$c2FsdHNhbHQ$" + "A" * 43, "ln=9 outside 10..20"),
        ("$scrypt$ln=21,r=8,p=1$c2FsdHNhbHQ$" + "A" * 43, "ln=21 outside"),
        ("$scrypt$ln=14,r=33,p=1$c2FsdHNhbHQ$" + "A" * 43, "r=33 outside"),
        ("$scrypt$ln=14,r=8,p=17$c2FsdHNhbHQ$" + "A" * 43, "p=17 outside"),
        ("$scrypt$ln=14,r=8,p=1$c2E$" + "A" * 43, "too short"),
        ("$pbkdf2$i=1$c2FsdHNhbHQ$AAAA", "not a $scrypt$"),
    ],
)
def test_bad_hashes(text: str, reason: str) -> None:
    with pytest.raises(PasswordHashError, match=reason.replace("$", r"\$")):
        parse_hash(text)


def test_empty_password_and_bad_parameters_refused() -> None:
    with pytest.raises(ValueError):
        hash_password("")
    with pytest.raises(ValueError):
        hash_password("x", log_n=30)


def test_a_repeat_login_skips_the_slow_hash() -> None:
    stored = parse_hash(hash_password("s3cret", log_n=16))  # ~200 ms a verification
    users = UserDatabase([User("alice", stored, frozenset({Role.MONITORING}))])
    started = time.perf_counter()
    assert users.check("alice", "s3cret")
    slow = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(100):
        assert users.check("alice", "s3cret")
    fast = (time.perf_counter() - started) / 100
    assert fast * 20 < slow
    # A wrong password is never remembered: it pays the hash and fails every time.
    assert not users.check("alice", "S3cret") and not users.check("alice", "S3cret")
    assert users.check("alice", "s3cret")
    assert not users.check("bob", "s3cret")


def test_format_and_parse_round_trip() -> None:
    users = UserDatabase.from_passwords({"b": "x", "a": "y"}, roles=[Role.MONITORING])
    users = users.with_user(User("c", parse_hash(hash_password("z", log_n=10))))
    text = users.format()
    again = UserDatabase.parse(text)
    assert list(again) == ["a", "b", "c"]
    assert again.roles("a") == {Role.MONITORING} and again.roles("c") == frozenset()
    assert again.check("c", "z") and not again.check("c", "y")
    assert "x\n" not in text and ":y" not in text
    assert list(again.without("b")) == ["a", "c"]
    with pytest.raises(KeyError):
        again.without("nobody")


def test_default_user_has_every_role() -> None:
    users = UserDatabase.default()
    assert list(users) == ["guest"] and users.roles("guest") == set(Role)
    assert users.check("guest", "guest")
