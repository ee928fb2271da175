"""The member lease's rule (broker/ha/member_lease.py), without sockets.

The state machine drives one primary and three backups, each with its own clock (a rate
within the drift bound of real time, any offset), over a network that delays, reorders and
loses requests and answers, while the committed set changes. After every step: whatever
the primary counts as granted, the backup still holds as promised (so while the primary
may serve, no member of its set may serve a newer epoch).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from broker.ha.member_lease import GrantLedger, LeaseTimes, MemberLeases

DRIFT = 0.05
EPOCH = 7
BACKUPS = ("a", "b", "c")
rates = st.sampled_from([1 - DRIFT, 1.0, 1 + DRIFT]) | st.floats(1 - DRIFT, 1 + DRIFT)


class Clock:
    def __init__(self, rate: float, offset: float) -> None:
        self.rate, self.offset = rate, offset

    def at(self, real: float) -> float:  # the clock's reading at real time ``real``
        return self.rate * real + self.offset


class LeaseNetwork(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.real = 0.0
        self.times = LeaseTimes(duration=1.0, drift=DRIFT)
        self.leases = MemberLeases(self.times)
        self.leases.set_enabled(True)
        self.primary_clock = Clock(1.0, 0.0)
        self.clocks = {b: Clock(1.0, 0.0) for b in BACKUPS}
        self.ledgers = {b: GrantLedger(self.times) for b in BACKUPS}
        self.requests: list[tuple[str, int, float, bool]] = []  # (backup, seq, lease, needed)
        self.answers: list[tuple[str, int]] = []

    @initialize(primary=rates, a=rates, b=rates, c=rates, offset=st.floats(-1e6, 1e6))
    def set_clocks(self, primary: float, a: float, b: float, c: float, offset: float) -> None:
        self.primary_clock = Clock(primary, offset)
        for backup, rate in zip(BACKUPS, (a, b, c), strict=True):
            self.clocks[backup] = Clock(rate, -offset / 2)

    @rule(seconds=st.sampled_from([0.0, 0.01, 0.1, 0.5, 0.9, 0.96, 1.0]) | st.floats(0.0, 2.0))
    def time_passes(self, seconds: float) -> None:
        self.real += seconds

    @rule(backup=st.sampled_from(BACKUPS))
    def request(self, backup: str) -> None:
        seq, needed = self.leases.requested(backup, self.primary_clock.at(self.real))
        self.requests.append((backup, seq, self.times.duration, needed))

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), lose=st.booleans())
    def deliver_request(self, data: st.DataObject, lose: bool) -> None:
        i = data.draw(st.integers(0, len(self.requests) - 1))
        backup, seq, duration, needed = self.requests.pop(i)
        if lose:
            return
        if needed:  # as the backup does: a promise only when asked for one
            self.ledgers[backup].grant(EPOCH, duration, self.clocks[backup].at(self.real))
        self.answers.append((backup, seq))

    @precondition(lambda self: self.answers)
    @rule(data=st.data(), lose=st.booleans())
    def deliver_answer(self, data: st.DataObject, lose: bool) -> None:
        backup, seq = self.answers.pop(data.draw(st.integers(0, len(self.answers) - 1)))
        if not lose:
            self.leases.granted(backup, seq)

    @rule(members=st.frozensets(st.sampled_from(BACKUPS)))
    def set_changes(self, members: frozenset[str]) -> None:
        self.leases.set_members(members)

    @rule(backup=st.sampled_from(BACKUPS))
    def link_goes(self, backup: str) -> None:
        self.leases.link_gone(backup)

    @invariant()
    def primary_never_counts_longer_than_the_backup_holds(self) -> None:
        now = self.primary_clock.at(self.real)
        for backup in BACKUPS:
            if self.leases.granted_by(backup, now):
                ledger = self.ledgers[backup]
                assert not ledger.grant_lapsed(EPOCH + 1, self.clocks[backup].at(self.real))

    @invariant()
    def every_grant_ends_on_the_primary_first_in_real_time(self) -> None:
        """Whenever checked: the real instant the primary's count of a grant ends is no
        later than the real instant the backup's promise ends."""
        primary = self.primary_clock
        for backup, until in self.leases.expiry.items():
            clock = self.clocks[backup]
            ends_on_primary = (until - primary.offset) / primary.rate
            ends_on_backup = (self.ledgers[backup].lapse_at(EPOCH + 1) - clock.offset) / clock.rate
            assert ends_on_primary <= ends_on_backup + 1e-6

    @invariant()
    def serving_needs_every_member_that_may_hold_a_grant(self) -> None:
        """Serving: every asked member's grant is unexpired on both sides, and a member
        never asked holds no grant to this epoch (it cannot take over by a lapse)."""
        now = self.primary_clock.at(self.real)
        if self.leases.may_serve(now):
            for member in self.leases.members:
                ledger = self.ledgers[member]
                if member in self.leases.asked:
                    assert self.leases.granted_by(member, now)
                    assert not ledger.grant_lapsed(EPOCH + 1, self.clocks[member].at(self.real))
                else:
                    assert ledger.lapse_at(EPOCH + 1) == -math.inf

    @invariant()
    def cached_answer_is_the_full_check(self) -> None:
        now = self.primary_clock.at(self.real)
        full = all(self.leases.granted_by(m, now) for m in self.leases.members & self.leases.asked)
        assert self.leases.may_serve(now) == full


TestLeaseNetwork = LeaseNetwork.TestCase
TestLeaseNetwork.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_the_backup_holds_the_drift_bound_longer() -> None:
    times = LeaseTimes(duration=2.0, drift=0.01)
    assert times.held(2.0) == pytest.approx(2.0 * 1.01 / 0.99)
    assert times.interval == 0.5


def test_an_empty_set_needs_no_grant_and_a_disabled_lease_none() -> None:
    leases = MemberLeases(LeaseTimes(1.0, 0.01))
    assert leases.may_serve(0.0)
    leases.set_members(frozenset({"a"}))
    assert leases.may_serve(0.0)  # not enabled: the agent's lease alone
    leases.set_enabled(True)
    assert leases.may_serve(0.0)  # never asked: it holds no grant it could take over by
    assert leases.lapsed(0.0) == []
    seq, needed = leases.requested("a", 10.0)
    assert needed and not leases.may_serve(10.0)  # asked: counted before it answers
    assert leases.lapsed(10.0) == [("a", None)]
    assert leases.granted("a", seq)
    assert leases.may_serve(10.5) and not leases.may_serve(11.0)
    assert leases.lapsed(11.5) == [("a", 0.5)]
    assert leases.remaining(10.25) == pytest.approx(0.75)
    leases.set_members(frozenset())
    assert leases.may_serve(100.0) and leases.remaining(100.0) is None


def test_a_promoted_broker_waits_for_its_own_older_grant() -> None:
    times = LeaseTimes(1.0, 0.0)
    ledger = GrantLedger(times)
    ledger.grant(3, 1.0, 100.0)
    ledger.grant(3, 1.0, 100.5)
    ledger.grant(3, 1.0, 100.2)  # an older request delivered late extends nothing
    assert ledger.lapse_at(4) == 101.5
    assert ledger.lapse_at(3) == -math.inf  # nothing granted to an epoch before 3
    assert not ledger.grant_lapsed(4, 101.4) and ledger.grant_lapsed(4, 101.5)
    leases = MemberLeases(times)
    leases.serve_after(ledger.lapse_at(4))
    assert not leases.may_serve(101.0) and leases.may_serve(101.5)


def test_answers_to_unknown_or_forgotten_requests_extend_nothing() -> None:
    leases = MemberLeases(LeaseTimes(1.0, 0.0))
    leases.set_enabled(True)
    leases.set_members(frozenset({"a"}))
    assert not leases.granted("a", 99)
    seq, _ = leases.requested("a", 0.0)
    leases.link_gone("a")
    assert not leases.granted("a", seq)
    assert not leases.may_serve(0.1)


def test_an_answer_to_a_request_that_needed_no_grant_counts_as_an_answer_only() -> None:
    leases = MemberLeases(LeaseTimes(1.0, 0.0))
    leases.set_enabled(True)
    seq, needed = leases.requested("a", 0.0)  # not a member yet: no promise asked
    assert not needed
    leases.set_members(frozenset({"a"}))
    assert not leases.granted("a", seq)  # answered, but it promised nothing
    assert leases.answered == {"a"} and leases.may_serve(0.1)  # a member not asked yet
    seq, needed = leases.requested("a", 0.2)
    assert needed and not leases.may_serve(0.2)  # asked: its answer is awaited
    assert leases.granted("a", seq) and leases.may_serve(1.1)


def test_clients_are_closed_one_interval_after_a_lapse_unless_it_serves_again() -> None:
    """Issue 26, item 4: a lapse that lasts one request interval closes the clients; one a
    grant ends sooner (a slow primary) and a promotion's wait never do."""
    leases = MemberLeases(LeaseTimes(2.0, 0.0))  # interval 0.5 s
    leases.set_enabled(True)
    leases.set_members(frozenset({"a"}))
    seq, _ = leases.requested("a", 0.0)
    assert leases.granted("a", seq)
    assert not leases.close_clients_due(1.9, None)  # serving
    lapsed = 2.0
    assert not leases.may_serve(lapsed)
    assert not leases.close_clients_due(lapsed + 0.49, lapsed)
    assert leases.close_clients_due(lapsed + 0.5, lapsed)
    # its link closed or went silent (pending removal): the commit of its removal makes
    # the primary serve again, and the confirms held for it meanwhile stay with the clients
    assert not leases.close_clients_due(lapsed + 5.0, lapsed, leaving={"a"})
    seq, _ = leases.requested("a", lapsed)  # asked again at once: the grant comes back
    assert leases.granted("a", seq)
    assert not leases.close_clients_due(lapsed + 0.5, lapsed)  # it serves again
    waiting = MemberLeases(LeaseTimes(2.0, 0.0))
    waiting.serve_after(10.0)  # a promoted broker waits for its own older grant
    assert not waiting.close_clients_due(9.9, 0.0)
    assert waiting.may_serve(10.0) and not waiting.close_clients_due(10.0, 0.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_settings_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="member lease"):
        LeaseTimes(bad, 0.01)
    with pytest.raises(ValueError, match="clock drift"):
        LeaseTimes(1.0, bad if bad != 0.0 else 0.5)


def test_a_request_that_asks_no_promise_says_the_primary_no_longer_counts_this_backup() -> None:
    ledger = GrantLedger(LeaseTimes(1.0, 0.0))
    ledger.asked(3)  # nothing granted yet: nothing to mark
    assert ledger.unneeded == frozenset()
    ledger.grant(3, 1.0, 100.0)
    assert ledger.answer(4, 100.0)["grants"] == [
        {"epoch": 3, "remaining_ms": 1000.0, "needed": True}
    ]
    ledger.asked(3)  # it left that primary's set: its grant still holds, not counted
    answer = ledger.answer(4, 100.5)
    assert answer["grants"] == [{"epoch": 3, "remaining_ms": 500.0, "needed": False}]
    assert answer["linked_epoch"] is None
    assert ledger.lapse_at(4) == 101.0
    ledger.grant(3, 1.0, 100.6)  # counted again
    assert ledger.unneeded == frozenset()


def test_past_the_managers_lease_every_member_must_grant_asked_or_not() -> None:
    """Issue 26, item 2: ``grants_until`` is over every member of the committed set (a
    member never asked holds no grant to this epoch: a primary past its cluster manager's
    lease must not serve beside it), None with an empty set or the lease not in force."""
    leases = MemberLeases(LeaseTimes(1.0, 0.01))
    assert leases.grants_until() is None
    leases.set_members(frozenset({"a", "b"}))
    assert leases.grants_until() is None  # not in force: the agent's lease alone
    leases.set_enabled(True)
    assert leases.grants_until() == -math.inf  # neither granted
    seq, _ = leases.requested("a", 10.0)
    assert leases.granted("a", seq)
    assert leases.may_serve(10.5)  # b never asked: the member lease alone would serve
    assert leases.grants_until() == -math.inf  # but not past the manager's lease
    seq, _ = leases.requested("b", 10.2)
    assert leases.granted("b", seq)
    assert leases.grants_until() == 11.0  # a's grant ends first
    leases.forget("a")
    leases.set_members(frozenset({"b"}))
    assert leases.grants_until() == 11.2
    leases.set_members(frozenset())
    assert leases.grants_until() is None  # an empty set: fenced at the lease's end
