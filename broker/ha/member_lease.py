"""The member lease (issue 26), sans-I/O: every member of the committed in-sync set grants
the primary a lease over its replication link, and a promoted broker waits out its own.

**On the primary** (:class:`MemberLeases`): every :attr:`LeaseTimes.interval` it sends each
linked backup a *lease request* (a sequence number, its epoch, the lease's duration, and
whether it needs this backup's grant: the lease in force and the backup a member) and notes
the time it sent it on its monotonic clock. The backup's answer to a needed request (a
*grant*) extends that backup's lease to ``sent + duration``: counted from when the primary
sent the request, never from when the answer came. A request that needs no grant asks no
promise and its answer extends nothing (so a backup promoted by hand, outside any set, waits
for nothing); it only shows the backup answers (it may join the set).
:meth:`MemberLeases.may_serve` is whether every member of the committed in-sync set that
this primary has *asked* for a grant holds an unexpired grant (none asked, or an empty
set: the agent's ZooKeeper lease alone governs, as before; the broker composes the two).
A member is asked from the first needed request sent to it (before any answer) until it
answers a request that asked no promise sent after every needed one (it then holds no
counted grant: it left the set), or leaves for good (:meth:`MemberLeases.forget`).

**Why a member never asked need not grant** (a recovering primary whose set names a
backup that is dead, or not linked yet): the lease is there so that a member may take the
primary's place by the lapse of its grant (:class:`ha_agent.takeover.LapsedGrant`), and a
member may do so only with a grant to this primary's epoch that this primary counted
(its ledger's ``needed``). Such a grant answers a needed request; from the moment the
first one is sent, the primary counts that member. Until then the member holds no such
grant, so it can take over only once the primary's ZooKeeper record is gone, which the
agent's lease covers, as with an empty set. So the primary admits clients and confirms
(confirms still wait for every member of the set by protocol) while an unreachable member
is being removed, instead of refusing everyone.

**Why the first needed request counts from its sending** (a backup joining the set, or
linking to a recovering primary): when the primary asks a member that it knows holds no
counted grant (never asked, or its newest answer was to a request that asked no promise,
sent after every needed one), it counts that request's grant at once, to ``sent +
duration``, as its answer would. If the member gets the request, its promise outlasts that
count (below); if it never does, it still holds no counted grant (a link delivers its
requests in order, and a new link only after the old one closed), so it cannot take over
by a lapse. The answer adds only that the member got it; waiting for it stopped a healthy
primary serving for a round trip each time its set grew (clients refused with 530). A
member that may hold a counted grant is counted only on its answers, as before; and past
the cluster manager's lease (:meth:`MemberLeases.grants_until`) only answers count.

:meth:`MemberLeases.may_serve` is one comparison: the earliest expiry over the asked
members is cached and recomputed only when a grant or the set changes (a confirm asks it).

**On a backup** (:class:`GrantLedger`): answering a request is a promise, "I will not serve
as primary (nor help promote another) for the epoch after yours until my grant lapsed". The
backup counts it from when it received the request, for the duration stretched by the
clock-drift bound (:meth:`LeaseTimes.held`), and keeps the latest lapse per epoch granted.
Whatever promotes it, the broker refuses to serve as primary until every grant it gave an
older epoch has lapsed (:meth:`GrantLedger.lapse_at`), except a grant to an epoch whose
primary's broker process is known to have exited (its agent saw it reaped and recorded it:
``ha_agent.ended``; the promotion names it): nothing can use that grant any more. The
ledger is read by the liveness thread (``GET /grant``) as well as the loop: it is one
immutable tuple swapped whole.

**Why the primary never counts longer than the backup holds** (tests/ha/test_member_lease.py
checks it with hypothesis): the request is received after it was sent, so in real time the
backup's promise starts no earlier than the primary's count. Clocks tick at rates within
``1 ± drift`` of real time; the primary's ``duration`` on its clock lasts at most
``duration / (1 - drift)`` real seconds, the backup's ``held`` on its clock at least
``held / (1 + drift)``, and :meth:`LeaseTimes.held` is ``duration * (1 + drift) / (1 -
drift)``: the backup's promise outlasts the primary's count. Losses, delays and reordering
only shorten what the primary counts (an answer that never comes extends nothing; an old
answer extends to its own old send time).

THREAD UNSAFE: :class:`MemberLeases` belongs to the primary's event loop. :class:`GrantLedger`
is written by the loop and read by any thread (one attribute, replaced whole).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["GrantLedger", "Lateness", "LeaseTimes", "MemberLeases", "wire_seconds"]

#: How many epochs a ledger keeps (a backup grants the newest primary's; older ones matter
#: only until they lapse, a few seconds).
LEDGER_EPOCHS = 4


@dataclass(frozen=True)
class LeaseTimes:
    """The member lease's settings (``--ha-member-lease``, ``--ha-clock-drift``)."""

    #: Seconds a grant lasts on the primary, counted from its request's send time.
    duration: float
    #: The bound on clock rate drift, a fraction: every clock ticks at ``1 ± drift`` times
    #: real time (0.01: 1 %, far beyond a working quartz clock's 0.01 %).
    drift: float
    #: Requests per lease (the primary asks every ``duration / requests``).
    requests: int = 4
    #: Seconds a primary stays not serving before it closes its clients (at least one
    #: :attr:`interval`): the time a backup lost without a FIN takes to be found dead (twice
    #: the link heartbeat and two maintenance intervals), so that losing a backup, or a brief
    #: lapse on a loaded machine, never closes the clients; a primary cut off still closes
    #: them long before its agent's fence would.
    close_grace: float = 0.0
    #: The longest grant a request may ask (:meth:`asked`; ``--ha-member-lease-max``);
    #: None: :attr:`duration`, never longer.
    longest: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.duration) and self.duration > 0):
            raise ValueError(f"member lease must be seconds above 0, not {self.duration!r}")
        if not (math.isfinite(self.drift) and 0 <= self.drift < 0.5):
            raise ValueError(f"clock drift must be a fraction in [0, 0.5), not {self.drift!r}")
        if self.longest is not None and not math.isfinite(self.longest):
            raise ValueError(f"the longest member lease must be seconds, not {self.longest!r}")

    @property
    def interval(self) -> float:
        """How often the primary asks every backup for a grant."""
        return self.duration / self.requests

    @classmethod
    def for_links(
        cls,
        duration: float,
        drift: float,
        link_heartbeat: float,
        link_maintenance: float,
        longest: float | None = None,
    ) -> LeaseTimes:
        """The lease's times beside the replication links' (``--link-heartbeat-interval``,
        ``--link-maintenance-interval``): the close grace outlasts the time a backup lost
        without a FIN takes to be found dead."""
        return cls(
            duration, drift, close_grace=2 * link_heartbeat + 2 * link_maintenance, longest=longest
        )

    def asked(self, late: float) -> float:
        """The grant a request asks when the primary's loop, or its members' answers, were
        late by up to ``late`` seconds lately (:class:`Lateness`): :attr:`duration` plus
        twice that, at most :attr:`longest`, in whole milliseconds as the wire carries it
        (``lease_stream.encode_request``), so the primary never counts more than the backup
        reads. Safety does not depend on it (the primary counts exactly what it asked, the
        backup holds what it read); it only keeps a busy primary's grants from lapsing
        between two late turns of its loop (issue 25: 128 lapses in 30 minutes at load
        10-23, 57 s not serving). The price: a member promoted after this primary's loss
        waits out a longer grant, only while the loops are late."""
        longest = self.duration if self.longest is None else max(self.duration, self.longest)
        wanted = min(longest, self.duration + 2.0 * max(0.0, late))
        return wire_seconds(wanted)

    @property
    def close_after(self) -> float:
        """How long a primary may stay not serving before it closes its clients."""
        return max(self.interval, self.close_grace)

    def close_after_late(self, late: float) -> float:
        """:attr:`close_after` when the primary's loop, or its members' answers, were late
        by up to ``late`` seconds lately (:class:`Lateness`): plus twice that, as
        :meth:`asked` adds to a grant, by at most what :meth:`asked` may add
        (:attr:`longest` less :attr:`duration`). A lapse on a loop that runs late is the
        loop's, not its members' absence: the answers to the requests it sent at the lapse
        come as late as its turns. Closing then sent 2,000 clients to backups that refuse
        them and back to the same starved loop (issue 25's soak). Availability only."""
        longest = self.duration if self.longest is None else max(self.duration, self.longest)
        return self.close_after + min(longest - self.duration, 2.0 * max(0.0, late))

    def held(self, duration: float) -> float:
        """How long a backup keeps a grant of ``duration`` (the primary's count), on its
        own clock: long enough that, at the drift bound, it outlasts the primary's count."""
        return duration * (1.0 + self.drift) / (1.0 - self.drift)


def wire_seconds(seconds: float) -> float:
    """``seconds`` as a lease request carries them: whole milliseconds, at least one."""
    return max(1, round(seconds * 1000.0)) / 1000.0


class Lateness:
    """The worst lateness seen over the last :attr:`window` seconds (a sliding maximum):
    how late the primary's lease turns ran and how long its members took to answer. What
    :meth:`LeaseTimes.asked` adapts a request's grant to."""

    def __init__(self, window: float = 30.0) -> None:
        self.window = window
        #: (at, seconds), the seconds decreasing from the oldest: the maximum is first
        self._samples: deque[tuple[float, float]] = deque()

    def note(self, now: float, seconds: float) -> None:
        samples = self._samples
        while samples and samples[-1][1] <= seconds:
            samples.pop()
        samples.append((now, seconds))

    def worst(self, now: float) -> float:
        samples = self._samples
        while samples and samples[0][0] <= now - self.window:
            samples.popleft()
        return samples[0][1] if samples else 0.0


class MemberLeases:
    """The primary's side: the grants of its backups, and whether it may serve."""

    def __init__(self, times: LeaseTimes) -> None:
        self.times = times
        #: The members whose grants the primary needs (the committed in-sync set, itself
        #: excluded); empty: none needed (the agent's lease alone).
        self.members: frozenset[str] = frozenset()
        #: Whether the member lease is used at all: only once every member and every link
        #: speaks replication format 3 (the shell says so); else the agent's lease alone.
        self.enabled = False
        #: The grant expiry of each backup that granted (the primary's clock).
        self.expiry: dict[str, float] = {}
        #: Requests sent and not answered: backup -> sequence -> (sent at, needed).
        self._sent: dict[str, dict[int, tuple[float, bool, float]]] = {}
        #: Backups that answered a request of this primary (needed or not): a backup joins
        #: the in-sync set only once it did.
        self.answered: set[str] = set()
        #: Members sent a needed request (they may hold a counted grant): only they count.
        self.asked: set[str] = set()
        #: The newest needed request sent to each backup that may hold a counted grant
        #: (absent: it holds none, as far as this primary knows).
        self._needed_seq: dict[str, int] = {}
        #: The count of a first needed request, from its sending (``sent + duration``),
        #: for a backup asked while it held no counted grant; its answer confirms it.
        self.first: dict[str, float] = {}
        self._seq = 0
        #: Not before this time (a promoted broker's own older grant, plus drift).
        self.not_before = -math.inf
        self._earliest = math.inf
        #: The earliest grant expiry over *every* member, asked or not (-inf: one never
        #: granted); None: the lease not in force or the set empty. A primary whose
        #: cluster manager's lease ran out serves on grants only until then (issue 26,
        #: item 2: :meth:`grants_until`).
        self._all_until: float | None = None

    # -- events ------------------------------------------------------------------------
    def set_members(self, members: frozenset[str]) -> None:
        """The committed in-sync set changed (this broker excluded)."""
        if members != self.members:
            self.members = members
            self._recompute()

    def set_enabled(self, enabled: bool) -> None:
        if enabled != self.enabled:
            self.enabled = enabled
            self._recompute()

    def serve_after(self, at: float) -> None:
        """Serve no earlier than ``at`` (a promoted broker's grant to an older epoch)."""
        self.not_before = at

    def needs(self, backup: str) -> bool:
        """Does this primary need ``backup``'s grant now (the lease in force, a member)?
        A request says so: only a needed grant is a promise, and only it is counted."""
        return self.enabled and backup in self.members

    def requested(self, backup: str, now: float, duration: float | None = None) -> tuple[int, bool]:
        """A request goes to ``backup`` at ``now`` asking a grant of ``duration`` seconds
        (None: :attr:`LeaseTimes.duration`; the request must carry exactly it): its
        sequence number (the answer names it) and whether it asks for a promise
        (:meth:`needs`). At most :attr:`LeaseTimes.requests` + 4 are kept unanswered per
        backup: an older unanswered one could only extend less than a newer answer (or, of
        a longer grant, be answered after it; losing it only shortens the count)."""
        duration = self.times.duration if duration is None else duration
        self._seq += 1
        needed = self.needs(backup)
        if needed:
            changed = backup not in self.asked
            if backup not in self._needed_seq:  # it holds no counted grant: this one's
                self.first[backup] = now + duration  # counts from its sending
            elif now + duration < self.first.get(backup, -math.inf):
                # a shorter grant asked since: the backup may have read only this one (the
                # first lost with its link), so the first count ends no later than this
                self.first[backup] = now + duration
                changed = True
                changed = True
            self._needed_seq[backup] = self._seq
            self.asked.add(backup)  # counted from now on: it may grant
            if changed:
                self._recompute()
        pending = self._sent.setdefault(backup, {})
        pending[self._seq] = (now, needed, duration)
        if len(pending) > self.times.requests + 4:
            del pending[min(pending)]
        return self._seq, needed

    def sent_at(self, backup: str, seq: int) -> float | None:
        """When request ``seq`` to ``backup`` was sent (None: not pending)."""
        request = self._sent.get(backup, {}).get(seq)
        return None if request is None else request[0]

    def granted(self, backup: str, seq: int) -> bool:
        """``backup`` answered request ``seq``: a needed one's grant lasts from when that
        request was sent (an answer to a request that asked no promise counts only as an
        answer). False for an answer to no request of ours (unknown, or forgotten) or
        one that promised nothing."""
        pending = self._sent.get(backup)
        request = None if pending is None else pending.pop(seq, None)
        if request is None or pending is None:
            return False
        self.answered.add(backup)
        for older in [s for s in pending if s < seq]:  # answered in order: lost, or late
            del pending[older]
        sent, needed, duration = request
        if not needed:
            if seq > self._needed_seq.get(backup, seq):  # newer than every needed one:
                self._cleared(backup)  # it read them all first (or lost them)
            return False
        until = sent + duration  # what that request asked, counted from its sending
        if until > self.expiry.get(backup, -math.inf):
            self.expiry[backup] = until
            if backup in self.members:
                self._recompute()
        return True

    def link_gone(self, backup: str) -> None:
        """``backup``'s link closed: its unanswered requests will never be answered (its
        grant stays until it expires: the backup keeps its promise whatever the link)."""
        self._sent.pop(backup, None)

    def forget(self, backup: str) -> None:
        """``backup`` left for good (dropped by the primary). Whether it may still hold
        a counted grant is kept: its next needed request is counted on its answer."""
        self._sent.pop(backup, None)
        self.answered.discard(backup)
        self.asked.discard(backup)
        self.expiry.pop(backup, None)
        self.first.pop(backup, None)
        if backup in self.members:
            self._recompute()

    def _cleared(self, backup: str) -> None:
        """``backup`` answered a request that asked no promise, sent after every needed
        one: its ledger no longer counts this primary's epoch (``GrantLedger.asked``), so
        it holds no counted grant and needs none (its next needed request counts from its
        sending)."""
        self._needed_seq.pop(backup, None)
        self.first.pop(backup, None)
        if backup in self.asked:
            self.asked.discard(backup)
            if backup in self.members:
                self._recompute()

    # -- queries -----------------------------------------------------------------------
    def may_serve(self, now: float) -> bool:
        """Every asked member's grant unexpired (and a promoted broker's wait over): O(1)."""
        return self.not_before <= now < self._earliest

    def grants_until(self) -> float | None:
        """Until when every member of the committed set holds an unexpired grant, asked
        or not (-inf: one has never granted); None: the lease not in force, or the set
        empty (the agent's lease alone governs). A primary whose cluster manager's lease
        ran out serves on grants only before this instant (issue 26, item 2): a member
        never asked holds no grant to this epoch, so it could be promoted once this
        primary's ZooKeeper record is gone without waiting for anything; past the
        manager's lease every member must grant."""
        return self._all_until

    def serving_window(self) -> tuple[float, float] | None:
        """From when until when this primary serves on its members' grants: from
        :attr:`not_before` until the earliest asked member's grant lapses, and no later
        than :meth:`grants_until` (what it serves on once the cluster manager's lease ran
        out); None: the lease not in force or the set empty (the manager's lease alone
        governs). Published to the liveness thread, which the agent's session fence asks
        (issue 25: a busy loop must not make a primary look unserving)."""
        all_until = self._all_until  # None exactly when not in force or the set is empty
        if all_until is None:
            return None
        return (self.not_before, min(self._earliest, all_until))

    def granted_by(self, backup: str, now: float) -> bool:
        """Does ``backup`` hold an unexpired grant it answered? (A backup joins the set
        only so.)"""
        return self.expiry.get(backup, -math.inf) > now

    def counted_until(self, backup: str) -> float:
        """Until when this primary counts ``backup``'s grant (its answered grants, or its
        first needed request's from its sending; -inf: none)."""
        return max(self.expiry.get(backup, -math.inf), self.first.get(backup, -math.inf))

    def lapsed(self, now: float) -> list[tuple[str, float | None]]:
        """The asked members whose grant is lapsed or missing, with how long ago it lapsed
        (None: never granted), when the lease is enabled."""
        if not self.enabled:
            return []
        out: list[tuple[str, float | None]] = []
        for member in sorted(self.members & self.asked):
            until = self.counted_until(member)
            if until == -math.inf:
                out.append((member, None))
            elif until <= now:
                out.append((member, now - until))
        return out

    def close_clients_due(
        self,
        now: float,
        not_serving_since: float | None,
        leaving: Collection[str] = (),
        cut_off: bool = False,
        late: float = 0.0,
    ) -> bool:
        """Should the primary close its clients' connections now (issue 26, item 4)? When it
        has not served for :attr:`~LeaseTimes.close_after` (more on a loop that ran
        ``late`` lately: :meth:`~LeaseTimes.close_after_late`) since it stopped
        (``not_serving_since``; None: it serves) and a member whose grant lapsed is not
        known to be ``leaving`` (pending removal or awaited: its link closed or went silent,
        and the commit of its removal is what makes the primary serve again; the confirms
        held for it meanwhile are the in-sync set's promise, kept for its clients). A
        primary that was only slow (a stalled loop, a paused machine) asks every backup at
        once when it finds its lease lapsed and serves again within a round trip, keeping
        its clients. Or at once when every lapsed member is leaving and the primary is
        ``cut_off``: its cluster manager, which would commit their removal, has not vouched
        for it anew for a while (it lost ZooKeeper too: a partition of the primary's node;
        :meth:`~broker.ha.manager_lease.ManagerLease.silent`), so no commit will resume its
        serving (only its members' links coming back would, before it fences), and its
        clients had better go on to the new primary.
        Never during a promoted broker's wait for its own older grant (its clients are
        refused at admission anyway). Availability only: nothing is confirmed, delivered or
        got while it does not serve, closed or not."""
        if not_serving_since is None or now < self.not_before or self.may_serve(now):
            return False
        lapsed = [member for member, _ in self.lapsed(now)]
        if not lapsed:
            return False
        if all(member in leaving for member in lapsed):
            return cut_off
        return now - not_serving_since >= self.times.close_after_late(late)

    def remaining(self, now: float) -> float | None:
        """Seconds until the earliest member grant lapses (None: none needed)."""
        if not self.enabled or not self.members & self.asked:
            return None
        return max(0.0, self._earliest - now)

    def _recompute(self) -> None:
        if not self.enabled:
            self._earliest = math.inf
            self._all_until = None
            return
        self._all_until = (
            min(self.expiry.get(m, -math.inf) for m in self.members) if self.members else None
        )
        self._earliest = min(
            (self.counted_until(m) for m in self.members & self.asked), default=math.inf
        )


class GrantLedger:
    """A backup's side: the grants it gave, per epoch, and when each lapses (its clock)."""

    def __init__(self, times: LeaseTimes) -> None:
        self.times = times
        #: ((epoch, lapses at), ...), newest epoch last; replaced whole (read off the loop).
        self.grants: tuple[tuple[int, float], ...] = ()
        #: The epochs granted whose primary's newest request asked no promise: it no longer
        #: counts this backup (it left that primary's set). A takeover by the lapse of this
        #: backup's grant needs the old primary to have counted it (ha_agent.takeover).
        self.unneeded: frozenset[int] = frozenset()
        #: The epoch of the primary this backup's link is up to (None: no link). A primary
        #: whose link is up is slow, not dead: no takeover by a lapse (ha_agent.takeover).
        self.linked: int | None = None

    def grant(self, epoch: int, duration: float, now: float) -> None:
        """Grant the primary of ``epoch`` a lease of ``duration`` (its count), the request
        received at ``now``: this broker's promise holds until ``now + held(duration)``."""
        until = now + self.times.held(duration)
        kept = dict(self.grants)
        if until > kept.get(epoch, -math.inf):
            kept[epoch] = until
            self.grants = tuple(sorted(kept.items())[-LEDGER_EPOCHS:])
        if epoch in self.unneeded:
            self.unneeded = self.unneeded - {epoch}

    def asked(self, epoch: int) -> None:
        """The primary of ``epoch`` sent a request that asks no promise: it does not count
        this backup now (the grant already given still holds until it lapses)."""
        if epoch not in self.unneeded and any(e == epoch for e, _ in self.grants):
            self.unneeded = self.unneeded | {epoch}

    def lapse_at(self, epoch: int, ended: Collection[int] = ()) -> float:
        """When every grant this broker gave an epoch older than ``epoch`` has lapsed
        (-inf: none given). ``ended``: epochs whose primary is known to serve no more (its
        broker process exited: its agent saw it reaped and recorded it, ha_agent.ended):
        a grant to one of them promises nothing anyone can still use, so it is not waited
        out."""
        return max(
            (until for e, until in self.grants if e < epoch and e not in ended),
            default=-math.inf,
        )

    def grant_lapsed(self, epoch: int, now: float) -> bool:
        """Has every grant to an epoch older than ``epoch`` lapsed by ``now``?"""
        return now >= self.lapse_at(epoch)

    def answer(self, epoch: int | None, now: float) -> dict[str, object]:
        """``GET /grant`` (the liveness thread): has every grant to an epoch older than
        ``epoch`` lapsed (None: older than the newest granted plus one, i.e. every grant)?
        With the newest epoch granted, and each grant's milliseconds left and whether that
        epoch's primary still counted this backup at its newest request (``needed``)."""
        grants = self.grants  # one read: the loop may replace it meanwhile
        unneeded = self.unneeded
        newest = grants[-1][0] if grants else None
        asked = (0 if newest is None else newest + 1) if epoch is None else epoch
        lapse = max((until for e, until in grants if e < asked), default=-math.inf)
        return {
            "epoch": newest,
            "asked_epoch": asked,
            "lapsed": now >= lapse,
            "remaining_ms": round(max(0.0, lapse - now) * 1000.0, 1),
            "linked_epoch": self.linked,
            "grants": [
                {
                    "epoch": e,
                    "remaining_ms": round(max(0.0, until - now) * 1000.0, 1),
                    "needed": e not in unneeded,
                }
                for e, until in grants
            ],
        }

    def last(self) -> tuple[int, float] | None:
        """The newest epoch granted and when its grant lapses."""
        grants = self.grants
        return grants[-1] if grants else None
