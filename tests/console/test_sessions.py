"""Console sessions (pure): tokens, idle and absolute timeouts, logout, the cap."""

from __future__ import annotations

from broker.management.console import sessions
from broker.management.console.sessions import IDLE_TIMEOUT, MAX_AGE, SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_names_its_user_until_logout() -> None:
    store = SessionStore(Clock())
    token = store.create("admin")
    assert len(token) >= 43 and store.user_of(token) == "admin"
    assert store.user_of(token + "x") is None and store.user_of(None) is None
    assert store.user_of("y" * 500) is None
    assert store.end(token) == "admin"
    assert store.user_of(token) is None and store.end(token) is None


def test_only_digests_are_kept() -> None:
    store = SessionStore(Clock())
    token = store.create("admin")
    assert token not in repr(store._sessions)


def test_idle_and_absolute_timeouts() -> None:
    clock = Clock()
    store = SessionStore(clock)
    idle = store.create("a")
    clock.now += IDLE_TIMEOUT + 1
    assert store.user_of(idle) is None
    busy, created = store.create("b"), clock.now
    while clock.now <= created + MAX_AGE:
        assert store.user_of(busy) == "b"
        clock.now += IDLE_TIMEOUT / 2
    assert store.user_of(busy) is None
    assert len(store) == 0


def test_the_oldest_session_goes_past_the_cap(monkeypatch) -> None:
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 3)
    store = SessionStore(Clock())
    tokens = [store.create(f"u{i}") for i in range(4)]
    assert store.user_of(tokens[0]) is None
    assert [store.user_of(t) for t in tokens[1:]] == ["u1", "u2", "u3"]
