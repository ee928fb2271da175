"""Logins hashing at once share one hash per user and password
(broker/security/password_checks.py; issue 26: every client of a user dials the new primary
at once after a fail-over, and a backup verified none of their passwords).

Real scrypt hashes of a real user database on a real event loop; the hashes are counted by
wrapping the real verification.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from broker.security import users as users_module
from broker.security.login_backoff import LoginBackoff
from broker.security.password_checks import run_password_check
from broker.security.passwords import hash_password, parse_hash, verify_password
from broker.security.sasl import PasswordCheck
from broker.security.users import User, UserDatabase

CLIENTS = 12


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The passwords the real scrypt verification was run on, in order."""
    counted: list[str] = []
    real = verify_password

    def counting(password: str, stored: Any) -> bool:
        counted.append(password)
        return real(password, stored)

    monkeypatch.setattr(users_module, "verify_password", counting)
    return counted


def database() -> UserDatabase:
    # the broker's own cost (a users file's hash): what a new primary pays per password
    return UserDatabase([User("app", parse_hash(hash_password("secret")))])


async def logins(checks: list[PasswordCheck]) -> tuple[list[bool], float]:
    began = time.monotonic()
    results = await asyncio.gather(*(run_password_check(c) for c in checks))
    return list(results), time.monotonic() - began


def test_the_same_user_and_password_at_once_cost_one_hash(hashes: list[str]) -> None:
    users = database()
    checks = [PasswordCheck(users, "PLAIN", "app", "secret") for _ in range(CLIENTS)]
    results, took = asyncio.run(logins(checks))
    assert results == [True] * CLIENTS
    assert hashes == ["secret"]  # one hash for the twelve
    print(f"{CLIENTS} logins of one user at once: {took * 1000:.0f} ms, one hash")
    assert users.check_remembered("app", "secret")  # the next login needs none


def test_different_passwords_are_not_shared_and_a_wrong_one_counts_for_each(
    hashes: list[str],
) -> None:
    users = database()
    backoff = LoginBackoff()
    checks = [
        PasswordCheck(users, "PLAIN", "app", password, f"10.0.0.{n}", backoff)
        for n, password in enumerate(["secret", "guess", "guess", "other", "secret"])
    ]
    results, _ = asyncio.run(logins(checks))
    assert results == [True, False, False, False, True]
    assert sorted(hashes) == ["guess", "other", "secret"]  # one each
    at = time.monotonic()  # the loop's clock
    # every wrong login counts in the back-off, shared hash or not
    assert backoff.failures("10.0.0.99", "app", at) == 3  # the user's: three wrong logins
    by_source = [backoff.failures(f"10.0.0.{n}", "someone", at) for n in range(5)]
    assert by_source == [0, 1, 1, 1, 0]  # each wrong one from its own source


def test_a_later_login_after_the_hash_ended_is_not_given_a_stale_answer(
    hashes: list[str],
) -> None:
    users = database()

    async def scenario() -> list[bool]:
        first = await run_password_check(PasswordCheck(users, "PLAIN", "app", "wrong"))
        second = await run_password_check(PasswordCheck(users, "PLAIN", "app", "wrong"))
        return [first, second]

    assert asyncio.run(scenario()) == [False, False]
    assert hashes == ["wrong", "wrong"]  # not running at once: each its own hash
