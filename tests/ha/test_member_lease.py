"""The member lease's rule (broker/ha/member_lease.py), without sockets.

The state machine drives one primary and three backups, each with its own clock (a rate
within the drift bound of real time, any offset), over a network that delays and loses
requests and answers and reorders answers, while the committed set changes (a backup reads
its requests in the order they were sent, as its link delivers them: a new link's only
after the old one closed). After every step: whatever the primary counts as granted, the
backup still holds as promised (so while the primary may serve, no member of its set may
serve a newer epoch), and no member whose grant this primary counted (``needed``) could
take its place by a lapse while it serves.
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

from broker.ha.member_lease import GrantLedger, Lateness, LeaseTimes, MemberLeases

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
        self.times = LeaseTimes(duration=1.0, drift=DRIFT, longest=3.0)
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

    @rule(backup=st.sampled_from(BACKUPS), late=st.sampled_from([0.0, 0.3]) | st.floats(0, 5))
    def request(self, backup: str, late: float) -> None:
        """A request asking the grant the primary's lateness adapts it to (each its own,
        carried on the wire as whole milliseconds: LeaseTimes.asked)."""
        duration = self.times.asked(late)
        seq, needed = self.leases.requested(backup, self.primary_clock.at(self.real), duration)
        self.requests.append((backup, seq, duration, needed))

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), lose=st.booleans())
    def deliver_request(self, data: st.DataObject, lose: bool) -> None:
        """The oldest request to a backup is read (or lost: a later one may still come,
        on this link or the next)."""
        backup = data.draw(st.sampled_from(sorted({r[0] for r in self.requests})))
        i = next(i for i, r in enumerate(self.requests) if r[0] == backup)
        _, seq, duration, needed = self.requests.pop(i)
        if lose:
            return
        if needed:  # as the backup does: a promise only when asked for one
            self.ledgers[backup].grant(EPOCH, duration, self.clocks[backup].at(self.real))
        else:  # that primary does not count this backup now
            self.ledgers[backup].asked(EPOCH)
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

    def counted(self, backup: str) -> bool:
        """Does the backup's ledger say this primary counted its grant (``GET /grant``'s
        ``needed``: what a takeover by a lapse needs, ha_agent/takeover.py)?"""
        ledger = self.ledgers[backup]
        return any(e == EPOCH for e, _ in ledger.grants) and EPOCH not in ledger.unneeded

    @invariant()
    def every_grant_ends_on_the_primary_first_in_real_time(self) -> None:
        """Whenever checked: the real instant the primary's count of a grant ends is no
        later than the real instant the backup's promise ends (for an answered grant; for
        a first request's count, whenever the backup holds a counted grant)."""
        primary = self.primary_clock
        for backup in BACKUPS:
            until = self.leases.expiry.get(backup, -math.inf)
            if self.counted(backup):
                until = max(until, self.leases.first.get(backup, -math.inf))
            if until == -math.inf:
                continue
            clock = self.clocks[backup]
            ends_on_primary = (until - primary.offset) / primary.rate
            ends_on_backup = (self.ledgers[backup].lapse_at(EPOCH + 1) - clock.offset) / clock.rate
            assert ends_on_primary <= ends_on_backup + 1e-6

    @invariant()
    def serving_needs_every_member_that_may_hold_a_grant(self) -> None:
        """Serving: no member whose grant this primary counted has let it lapse (it could
        take over by the lapse), and a member not asked holds no counted grant."""
        now = self.primary_clock.at(self.real)
        if self.leases.may_serve(now):
            for member in self.leases.members:
                if self.counted(member):
                    assert member in self.leases.asked
                    clock = self.clocks[member]
                    assert not self.ledgers[member].grant_lapsed(EPOCH + 1, clock.at(self.real))

    @invariant()
    def a_backup_not_asked_holds_no_counted_grant(self) -> None:
        for backup in BACKUPS:
            if self.counted(backup) and backup in self.leases.members:
                assert backup in self.leases.asked

    @invariant()
    def cached_answer_is_the_full_check(self) -> None:
        now = self.primary_clock.at(self.real)
        asked = self.leases.members & self.leases.asked
        full = all(self.leases.counted_until(m) > now for m in asked)
        assert self.leases.may_serve(now) == full

    @invariant()
    def the_published_window_is_the_serving_answer(self) -> None:
        """What the liveness thread answers from (``serving_window``) says serving only
        when the primary may serve and every member of its set grants it (what it serves
        on past its cluster manager's lease)."""
        now = self.primary_clock.at(self.real)
        window = self.leases.serving_window()
        if window is None:
            assert not self.leases.members or not self.leases.enabled
            return
        until = self.leases.grants_until()
        assert until is not None
        inside = window[0] <= now < window[1]
        assert inside == (self.leases.may_serve(now) and now < until)


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
    assert needed and leases.may_serve(10.0)  # its first request counts from its sending
    assert leases.lapsed(10.0) == [] and not leases.may_serve(11.0)  # ... as its answer would
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
    # epoch 3's primary process exited (ha_agent.ended): its grant is not waited out
    assert ledger.lapse_at(4, ended={3}) == -math.inf and ledger.lapse_at(4, ended={2}) == 101.5
    ledger.grant(2, 1.0, 100.0)
    assert ledger.lapse_at(4, ended={3}) == 101.0  # the other epoch's grant still is
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
    assert leases.may_serve(0.9) and not leases.may_serve(1.0)  # the first request's count
    assert leases.lapsed(1.5) == [("a", 0.5)]
    seq, _ = leases.requested("a", 1.5)  # a member that may hold a grant: only answers count
    assert not leases.may_serve(1.5)
    leases.link_gone("a")
    assert not leases.granted("a", seq) and not leases.may_serve(1.6)


def test_an_answer_to_a_request_that_needed_no_grant_counts_as_an_answer_only() -> None:
    leases = MemberLeases(LeaseTimes(1.0, 0.0))
    leases.set_enabled(True)
    seq, needed = leases.requested("a", 0.0)  # not a member yet: no promise asked
    assert not needed
    leases.set_members(frozenset({"a"}))
    assert not leases.granted("a", seq)  # answered, but it promised nothing
    assert leases.answered == {"a"} and leases.may_serve(0.1)  # a member not asked yet
    seq, needed = leases.requested("a", 0.2)
    assert needed and leases.may_serve(0.2)  # asked: it held no counted grant
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


def test_a_late_loops_lapse_waits_longer_before_it_closes_the_clients() -> None:
    """A loop that ran late lately: the grace grows by twice its lateness, as a request's
    grant does, and by no more than a grant may (issue 25: a starved primary's lapse
    closed 2,000 clients that came back to the same loop); a cut-off primary still
    closes at once."""
    times = LeaseTimes(0.8, 0.0, close_grace=2.2, longest=3.2)
    assert times.close_after_late(0.0) == times.close_after == 2.2
    assert times.close_after_late(0.5) == pytest.approx(3.2)
    assert times.close_after_late(5.0) == pytest.approx(2.2 + 2.4)  # at most 3.2 - 0.8
    assert LeaseTimes(0.8, 0.0, close_grace=2.2).close_after_late(5.0) == 2.2  # none longer
    leases = MemberLeases(times)
    leases.set_enabled(True)
    leases.set_members(frozenset({"a"}))
    seq, _ = leases.requested("a", 0.0)
    assert leases.granted("a", seq)
    lapsed = 0.8
    assert not leases.may_serve(lapsed)
    assert leases.close_clients_due(lapsed + 2.2, lapsed)
    assert not leases.close_clients_due(lapsed + 2.2, lapsed, late=0.5)
    assert leases.close_clients_due(lapsed + 3.2, lapsed, late=0.5)
    assert leases.close_clients_due(lapsed, lapsed, leaving={"a"}, cut_off=True, late=5.0)


def test_a_cut_off_primary_closes_its_clients_at_once() -> None:
    """Issue 26, item 4: every lapsed member leaving (their links closed: the commit of
    their removal would resume serving) closes nothing while the cluster manager vouches
    for the primary; cut off (the manager silent too: nothing will commit), it closes at
    once, without the grace. A lapsed member still linked waits for the grace either way,
    and a primary that serves never closes."""
    leases = MemberLeases(LeaseTimes(2.0, 0.0, close_grace=3.0))
    leases.set_enabled(True)
    leases.set_members(frozenset({"a", "b"}))
    for member in ("a", "b"):
        seq, _ = leases.requested(member, 0.0)
        assert leases.granted(member, seq)
    both = {"a", "b"}
    assert not leases.close_clients_due(1.9, None, leaving=both, cut_off=True)  # serving
    lapsed = 2.0
    assert not leases.close_clients_due(lapsed + 60.0, lapsed, leaving=both)
    assert leases.close_clients_due(lapsed, lapsed, leaving=both, cut_off=True)
    assert not leases.close_clients_due(lapsed + 2.9, lapsed, leaving={"a"}, cut_off=True)
    assert leases.close_clients_due(lapsed + 3.0, lapsed, leaving={"a"}, cut_off=True)
    waiting = MemberLeases(LeaseTimes(2.0, 0.0))
    waiting.serve_after(10.0)  # a promoted broker waits for its own older grant
    assert not waiting.close_clients_due(9.9, 0.0, cut_off=True)


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


def test_a_backup_joining_the_set_never_stops_the_primary_serving() -> None:
    """The set grows by a backup that answered requests asking no promise: the needed
    request the primary sends it at once counts from its sending, so the primary serves
    on through the round trip (it refused clients with 530 until the answer came); with
    no answer its count lapses one lease after it was sent, as an answered one would."""
    leases = MemberLeases(LeaseTimes(1.0, 0.01))
    leases.set_enabled(True)
    leases.set_members(frozenset({"a"}))
    seq, _ = leases.requested("a", 0.0)
    assert leases.granted("a", seq)
    seq, needed = leases.requested("b", 0.1)  # b linked, catching up: no promise asked
    assert not needed and not leases.granted("b", seq) and leases.answered == {"a", "b"}
    leases.set_members(frozenset({"a", "b"}))  # the set committed with b
    assert leases.may_serve(0.2)  # b not asked yet: it holds no counted grant
    seq, needed = leases.requested("b", 0.2)  # asked the moment the set holds it
    assert needed and leases.may_serve(0.2) and leases.lapsed(0.2) == []
    assert leases.remaining(0.2) == pytest.approx(0.8)  # a's grant ends first
    seq_a, _ = leases.requested("a", 0.5)
    assert leases.granted("a", seq_a)
    assert leases.may_serve(1.19) and not leases.may_serve(1.2)  # b never answered
    [(member, age)] = leases.lapsed(1.3)
    assert member == "b" and age == pytest.approx(0.1)
    assert leases.granted("b", seq)  # a late answer extends to its own request's send time
    assert not leases.may_serve(1.3)
    seq, _ = leases.requested("b", 1.3)  # it may hold a counted grant: its answer counts
    assert not leases.may_serve(1.3)
    assert leases.granted("b", seq) and leases.may_serve(1.3)
    assert leases.grants_until() == pytest.approx(1.5)  # a's grant, sent at 0.5


def test_a_member_back_in_the_set_counts_from_its_request_only_once_it_left_for_sure() -> None:
    """A member that left the set and answered a request asking no promise (sent after
    every needed one) holds no counted grant: back in the set, its first request counts
    from its sending. One that may still hold a counted grant (its newest answer was to a
    needed request) is counted on its answers only: its grant may lapse and let it take
    over by the lapse while the primary would serve on an unanswered request."""
    leases = MemberLeases(LeaseTimes(1.0, 0.0))
    leases.set_enabled(True)
    leases.set_members(frozenset({"a"}))
    seq, _ = leases.requested("a", 0.0)
    assert leases.granted("a", seq)
    leases.set_members(frozenset())  # a left the set
    unneeded, needed = leases.requested("a", 0.5)
    assert not needed
    leases.set_members(frozenset({"a"}))  # back before it answered: it may hold a grant
    assert leases.may_serve(0.9) and not leases.may_serve(1.0)  # its old grant counts
    seq, _ = leases.requested("a", 1.2)
    assert not leases.may_serve(1.2)  # sent after the request asking none: not cleared
    assert not leases.granted("a", unneeded) and not leases.may_serve(1.2)
    assert leases.granted("a", seq) and leases.may_serve(1.2)
    leases.set_members(frozenset())  # it leaves again, and this time answers first
    unneeded, _ = leases.requested("a", 3.0)
    assert not leases.granted("a", unneeded) and "a" not in leases.asked
    leases.set_members(frozenset({"a"}))
    assert leases.may_serve(3.1)  # not asked: it holds no counted grant
    seq, needed = leases.requested("a", 3.1)
    assert needed and leases.may_serve(3.1) and not leases.may_serve(4.1)


def test_past_the_managers_lease_a_first_request_counts_only_once_answered() -> None:
    """Issue 26, item 2: a member that never got its first request holds no grant, so
    past the manager's lease (its record may go) only an answer counts."""
    leases = MemberLeases(LeaseTimes(1.0, 0.0))
    leases.set_enabled(True)
    leases.set_members(frozenset({"a"}))
    seq, _ = leases.requested("a", 0.0)
    assert leases.may_serve(0.5) and leases.grants_until() == -math.inf
    assert leases.granted("a", seq) and leases.grants_until() == 1.0


def test_the_serving_window_spans_the_wait_to_the_first_lapse() -> None:
    """``serving_window``: None unless in force over a non-empty set; from the promoted
    broker's wait to the earliest grant of every member, asked or not."""
    leases = MemberLeases(LeaseTimes(1.0, 0.01))
    leases.set_members(frozenset({"a", "b"}))
    assert leases.serving_window() is None  # not in force
    leases.set_enabled(True)
    leases.serve_after(10.1)
    seq, _ = leases.requested("a", 10.0)
    assert leases.granted("a", seq)
    assert leases.serving_window() == (10.1, -math.inf)  # b never granted
    seq, _ = leases.requested("b", 10.4)
    assert leases.granted("b", seq)
    assert leases.serving_window() == (10.1, 11.0)  # a's grant ends first
    leases.set_members(frozenset())
    assert leases.serving_window() is None  # an empty set: the manager's lease alone


def test_a_request_asks_longer_while_the_loops_run_late_up_to_the_longest() -> None:
    """LeaseTimes.asked: the lease plus twice the recent lateness, at most the longest, in
    whole milliseconds (what the wire carries); without a longest, never more."""
    times = LeaseTimes(duration=0.8, drift=0.01, longest=3.2)
    assert times.asked(0.0) == 0.8
    assert times.asked(0.5) == 1.8
    assert times.asked(0.12345) == 1.047
    assert times.asked(10.0) == 3.2
    assert LeaseTimes(duration=0.8, drift=0.01).asked(10.0) == 0.8
    assert LeaseTimes(duration=0.8, drift=0.01, longest=0.5).asked(10.0) == 0.8


def test_a_grant_counts_what_its_request_asked() -> None:
    """An answer extends to its own request's send time plus that request's duration."""
    leases = MemberLeases(LeaseTimes(duration=0.8, drift=0.01, longest=3.2))
    leases.set_enabled(True)
    leases.set_members(frozenset({"a"}))
    long_seq, _ = leases.requested("a", 10.0, 3.2)
    short_seq, _ = leases.requested("a", 10.2, 0.8)
    assert leases.granted("a", short_seq)
    assert leases.counted_until("a") == 10.2 + 0.8
    assert not leases.granted("a", long_seq)  # older than an answered one: dropped
    seq, _ = leases.requested("a", 10.4, 3.2)
    assert leases.granted("a", seq)
    assert leases.expiry["a"] == 10.4 + 3.2
    assert leases.may_serve(13.59) and not leases.may_serve(13.61)


def test_lateness_is_the_worst_of_the_window() -> None:
    lateness = Lateness(window=30.0)
    assert lateness.worst(0.0) == 0.0
    lateness.note(1.0, 0.5)
    lateness.note(2.0, 2.0)
    lateness.note(3.0, 0.1)
    assert lateness.worst(3.0) == 2.0
    assert lateness.worst(31.9) == 2.0
    assert lateness.worst(32.0) == 0.1  # the 2 s stall left the window
    assert lateness.worst(40.0) == 0.0
