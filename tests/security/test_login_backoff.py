"""The back-off after failed logins (issue 25, item 5), its core without sockets or clock:
it never refuses, only delays; its delay is bounded; its memory is bounded under many
sources; a quiet source is forgiven; the replication user from the brokers is exempt."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security.login_backoff import (
    BackoffPolicy,
    LoginBackoff,
    replication_exemption,
    source_key,
)

POLICY = BackoffPolicy()


def test_the_schedule_doubles_from_the_fourth_failure_up_to_the_bound() -> None:
    backoff = LoginBackoff()
    waits = []
    for _ in range(12):
        waits.append(backoff.delay("10.0.0.9", "admin", 0.0))
        backoff.failed("10.0.0.9", "admin", 0.0)
    assert waits == [0, 0, 0, 0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]


def test_per_source_and_per_user() -> None:
    backoff = LoginBackoff()
    for i in range(6):  # one source sprays many users
        backoff.failed("10.0.0.9", f"user{i}", 0.0)
    assert backoff.delay("10.0.0.9", "fresh", 0.0) == 2.0
    assert backoff.delay("10.0.0.7", "fresh", 0.0) == 0  # another source, another user
    for i in range(6):  # many sources guess one user
        backoff.failed(f"10.1.0.{i}", "admin", 0.0)
    assert backoff.delay("10.0.0.7", "admin", 0.0) == 2.0  # slowed, never shut out
    assert backoff.delay("10.0.0.7", "alice", 0.0) == 0


def test_a_quiet_source_is_forgiven() -> None:
    backoff = LoginBackoff()
    for _ in range(50):
        backoff.failed("10.0.0.9", "admin", 0.0)
    horizon = POLICY.forget_after * (POLICY.cap - POLICY.free_failures + 1)
    assert horizon <= 60
    assert backoff.delay("10.0.0.9", "admin", horizon - POLICY.forget_after * 1.5) > 0
    assert backoff.delay("10.0.0.9", "admin", horizon) == 0
    assert backoff.delay("10.0.0.9", "admin", POLICY.forget_after * POLICY.cap) == 0
    assert len(backoff) == 0  # forgotten entries are dropped


def test_ipv6_sources_are_counted_by_their_64() -> None:
    assert source_key("2001:db8:1:2:aaaa::1") == source_key("[2001:db8:1:2:bbbb::2]")
    assert source_key("2001:db8:1:2::1") != source_key("2001:db8:1:3::1")
    assert source_key("::ffff:10.0.0.1") == "10.0.0.1"
    assert source_key(None) is None
    backoff = LoginBackoff()
    for i in range(5):
        backoff.failed(f"2001:db8::{i + 1}", f"u{i}", 0.0)
    assert backoff.delay("2001:db8::ff", "other", 0.0) == 1.0


def test_the_replication_user_from_the_brokers_is_exempt() -> None:
    exempt = replication_exemption("replicator", ["127.0.0.1", "::1", "10.0.0.2"])
    backoff = LoginBackoff(exempt=exempt)
    for _ in range(20):
        backoff.failed("10.9.9.9", "replicator", 0.0)  # a guesser elsewhere
        backoff.failed("127.0.0.1", "replicator", 0.0)  # not counted: exempt
    assert backoff.delay("10.0.0.2", "replicator", 0.0) == 0  # a backup's link
    assert backoff.delay("127.0.0.1", "replicator", 0.0) == 0
    assert backoff.delay("10.9.9.9", "replicator", 0.0) == POLICY.max_delay
    assert backoff.delay("10.0.0.3", "replicator", 0.0) == POLICY.max_delay
    assert backoff.delay("127.0.0.1", "admin", 0.0) == 0  # the source was not counted
    nobody = LoginBackoff(exempt=replication_exemption(None, ["127.0.0.1"]))
    assert not nobody.exempt("127.0.0.1", "guest")


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["10.0.0.1", "10.0.0.2", "2001:db8::1", None, "host"]),
        st.sampled_from(["guest", "admin", "replicator", "x"]),
        st.floats(min_value=0, max_value=30, allow_nan=False),
        st.booleans(),
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_never_refuses_and_the_delay_is_bounded(
    events: list[tuple[str | None, str, float, bool]],
) -> None:
    exempt = replication_exemption("replicator", ["10.0.0.2"])
    backoff = LoginBackoff(exempt=exempt)
    now = 0.0
    for source, user, step, failed in events:
        now += step
        delay = backoff.delay(source, user, now)
        assert 0 <= delay <= POLICY.max_delay  # a number of seconds: there is no refusal
        if source == "10.0.0.2" and user == "replicator":
            assert delay == 0
        if failed:
            backoff.failed(source, user, now)
    later = now + POLICY.forget_after * (POLICY.cap + 1)
    assert all(backoff.delay(s, u, later) == 0 for s, u, _, _ in events)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**32 - 1), min_size=1, max_size=500))
def test_memory_is_bounded_under_many_sources(addresses: list[int]) -> None:
    policy = BackoffPolicy(capacity=16)
    backoff = LoginBackoff(policy)
    for i, number in enumerate(addresses):
        source = ".".join(str((number >> s) & 255) for s in (24, 16, 8, 0))
        backoff.failed(source, f"user{number % 997}", float(i) / 1000)
        assert len(backoff) <= 2 * policy.capacity
