"""LeaseKeeper: the member lease's shell in an HA broker (issue 26; the core is
:mod:`broker.ha.member_lease`, the wire :mod:`broker.ha.lease_stream`).

As a backup it keeps the promises its link made (:meth:`LeaseKeeper.member_grant`, into the
:class:`~broker.ha.member_lease.GrantLedger` the liveness thread reads for ``GET /grant``).
As the primary it asks every linked backup for a grant every
:attr:`~broker.ha.member_lease.LeaseTimes.interval` (and a new link or a backup new to the
set at once), hears the answers, keeps the set and whether the lease is in force (every
link and member speaks replication format 3: the contract floor), and answers
:meth:`LeaseKeeper.may_serve`, which the broker asks with the agent's lease before every
confirm, admission and write to a client. A change of that answer is logged
(``member_lease_lapsed`` per lapsed member, ``member_lease_serving``) and serving again
wakes every connection (``on_serving_resumed``). A lapse asks every backup again at once;
still not serving after the close grace (:attr:`LeaseTimes.close_after`, longer by twice
the loop's recent lateness: :meth:`LeaseTimes.close_after_late`), for a member
not known to be leaving, or at once when every lapsed member is leaving and the cluster
manager fell silent (the primary is cut off: :meth:`MemberLeases.close_clients_due`), it
has the broker close its clients' connections (``on_close_clients``: 320
CONNECTION_FORCED, ``member_lease_clients_closed``), so they go on to the next address of
their URL list (issue 26, item 4). Promoted, it serves only once
its own grants to older epochs have lapsed (``member_lease_promotion_wait``), but for the
epochs its promotion was told ended (``member_lease_grant_ended``).

THREAD UNSAFE: the broker's event loop owns it (the ledger alone is read off the loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol

from broker.ha.link_format import MEMBER_LEASE_FORMAT
from broker.ha.member_lease import GrantLedger, Lateness, LeaseTimes, MemberLeases

if TYPE_CHECKING:
    from broker.ha.replication_contract import ContractFloor
    from broker.ha.role import HaRole
    from broker.ha.streams import PrimaryStreams

__all__ = ["LeaseHost", "LeaseKeeper"]


class LeaseHost(Protocol):
    """What the keeper reads of its HA broker (:class:`~broker.ha.ha_broker.HaBroker`)."""

    @property
    def role(self) -> HaRole: ...

    @property
    def streams(self) -> PrimaryStreams | None: ...

    @property
    def contract_floor(self) -> ContractFloor: ...

    @property
    def epoch(self) -> int: ...

    @property
    def fenced(self) -> bool: ...

    @property
    def log_(self) -> Any: ...

    def now(self) -> float: ...

    def tell(self, event: str, fields: dict[str, Any]) -> None: ...

    def manager_silent(self) -> bool:
        """Has the cluster manager not vouched anew for this primary for half its lease
        (:meth:`~broker.ha.manager_lease.ManagerLease.silent`)?"""
        ...


class LeaseKeeper:
    """See the module docstring."""

    def __init__(self, host: LeaseHost, times: LeaseTimes) -> None:
        self.host = host
        self.times = times
        #: The grants this broker holds as the primary.
        self.leases = MemberLeases(times)
        #: The grants this broker gave as a backup (read off the loop too: GET /grant).
        self.grants = GrantLedger(times)
        #: The wait at its last promotion for its own older grant to lapse (seconds).
        self.promotion_wait = 0.0
        #: The epochs its last promotion was told ended (their primaries' processes
        #: exited): its grants to them were not waited out.
        self.ended: frozenset[int] = frozenset()
        #: Called when the primary serves again (the server wakes every connection).
        self.on_serving_resumed: Callable[[], None] | None = None
        #: Called (with the reason) when the primary has not served long enough that its
        #: clients should go elsewhere; the server closes them and returns how many.
        self.on_close_clients: Callable[[str], int] | None = None
        self._serving = True
        self._lapsed_at: float | None = None
        self._clients_closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._close_timer: asyncio.TimerHandle | None = None
        self._primary = False
        #: How late the turns ran and the answers came lately (what a request's grant
        #: adapts to: :meth:`LeaseTimes.asked`), and when the next turn is due.
        self.lateness = Lateness()
        self._due: float | None = None
        #: The grant the last request asked (seconds), and the last one logged.
        self.asking = times.duration
        self._asking_logged = times.duration

    # -- as a backup -------------------------------------------------------------------
    def member_grant(self, epoch: int, duration: float) -> None:
        """Grant the primary of ``epoch`` a member lease (its request just read)."""
        self.grants.grant(epoch, duration, self.host.now())

    # -- promotion ---------------------------------------------------------------------
    def promoted(self, epoch: int, now: float, ended: frozenset[int] = frozenset()) -> None:
        """Whatever promoted it: serve no earlier than this broker's last grant to an older
        epoch lapsed (its link is dropped: it grants no more), logged and counted; a grant
        to an epoch in ``ended`` (its primary's broker process exited, as its agent
        recorded: :meth:`~broker.ha.member_lease.GrantLedger.lapse_at`) is not waited out
        (``member_lease_grant_ended``)."""
        self.ended = frozenset(ended)
        lapse = self.grants.lapse_at(epoch, self.ended)
        kept = self.grants.lapse_at(epoch)
        if kept > max(lapse, now):
            last = self.grants.last()
            self.host.log_.info(
                "member_lease_grant_ended",
                epoch=epoch,
                ended=sorted(self.ended),
                granted_epoch=None if last is None else last[0],
                saved_ms=round((kept - max(lapse, now)) * 1000.0, 1),
            )
        self.leases.serve_after(lapse)
        self.promotion_wait = max(0.0, lapse - now)
        if self.promotion_wait > 0:
            last = self.grants.last()
            self.host.log_.info(
                "member_lease_promotion_wait",
                epoch=epoch,
                granted_epoch=None if last is None else last[0],
                wait_ms=round(self.promotion_wait * 1000.0, 1),
            )
            self._serving = False
            self._lapsed_at = now

    def start(self) -> None:
        """The primary runs: the set now, and a request to every backup each interval."""
        self._primary = True
        self.set_changed()
        self._next_turn()

    def _next_turn(self) -> None:
        self._due = self.host.now() + self.times.interval
        self._timer = asyncio.get_running_loop().call_later(self.times.interval, self._turn)

    def stop(self) -> None:
        for timer in (self._timer, self._close_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._close_timer = None

    # -- as the primary (LeaseEvents of the streams) --------------------------------------
    def lease_granted(self, backup_id: str, seq: int) -> None:
        """``backup_id`` answered lease request ``seq``."""
        now = self.host.now()
        sent = self.leases.sent_at(backup_id, seq)
        if sent is not None:  # the round trip, this loop's delays included
            self.lateness.note(now, now - sent)
        if self.leases.granted(backup_id, seq):
            self._check(now)

    def lease_stream_opened(self, backup_id: str) -> None:
        """A backup's lease stream opened: ask it at once (a new link grants within ms)."""
        self._request(backup_id, self.host.now())

    def _request(self, backup_id: str, now: float) -> None:
        streams = self.host.streams
        stream = None if streams is None else streams.lease_streams.get(backup_id)
        if stream is not None:
            duration = self._asked(now)
            seq, needed = self.leases.requested(backup_id, now, duration)
            stream.request(seq, self.host.epoch, duration, needed)

    def _asked(self, now: float) -> float:
        """The grant to ask now (:meth:`LeaseTimes.asked`), a change logged once it moved
        by a request interval (``member_lease_adapted``)."""
        duration = self.times.asked(self.lateness.worst(now))
        self.asking = duration
        if abs(duration - self._asking_logged) >= self.times.interval:
            self._asking_logged = duration
            self.host.log_.info(
                "member_lease_adapted",
                asked_ms=round(duration * 1000.0, 1),
                late_ms=round(self.lateness.worst(now) * 1000.0, 1),
                epoch=self.host.epoch,
            )
        return duration

    def _turn(self) -> None:
        self._timer = None
        if self.host.fenced:
            return
        now = self.host.now()
        if self._due is not None:  # a turn late by a loop stalled or waiting for a CPU
            self.lateness.note(now, max(0.0, now - self._due))
        self.set_changed()
        streams = self.host.streams
        for backup_id in [] if streams is None else list(streams.lease_streams):
            self._request(backup_id, now)
        self._check(now)
        self._close_clients()
        self._next_turn()

    def set_changed(self) -> None:
        """Read the set and whether the lease is in force again; a member new to the set
        is asked at once (its earlier answers promised nothing); serving is checked."""
        leases, host = self.leases, self.host
        before = leases.members if leases.enabled else frozenset()
        leases.set_enabled(host.contract_floor().format >= MEMBER_LEASE_FORMAT)
        leases.set_members(host.role.lease_set())
        now = host.now()
        for backup_id in (leases.members if leases.enabled else frozenset()) - before:
            self._request(backup_id, now)
        self._check(now)

    # -- the check ---------------------------------------------------------------------
    def may_serve(self) -> bool:
        """Every committed member's grant unexpired, a promotion's wait over: one
        comparison while nothing changes."""
        now = self.host.now()
        serving = self.leases.may_serve(now)
        if serving != self._serving:
            self._check(now)
        return serving

    def _check(self, now: float) -> bool:
        """Log and act on a change of :meth:`may_serve`: a lapse stops serving (confirms,
        deliveries and get-oks held, clients refused), a grant or a new set resumes it."""
        leases, host = self.leases, self.host
        serving = leases.may_serve(now)
        if serving == self._serving:
            return serving
        self._serving = serving
        if not serving:
            self._lapsed_at = now
            if now < leases.not_before:
                return False  # a promotion's wait, logged when it began
            for member, age in leases.lapsed(now):
                if age is None:
                    continue  # never granted this primary yet (just promoted): status shows it
                record = host.role.backups.get(member)
                host.log_.warning(
                    "member_lease_lapsed",
                    member=member,
                    url=None if record is None else record.url,
                    age_ms=round(age * 1000.0, 1),
                    epoch=host.epoch,
                )
                host.tell("member_lease_lapsed", {"member": member})
            self._ask_again(now)
            return False
        self._clients_closed = False
        held = 0.0 if self._lapsed_at is None else now - self._lapsed_at
        host.log_.info("member_lease_serving", held_ms=round(held * 1000.0, 1), epoch=host.epoch)
        if self.on_serving_resumed is not None:
            self.on_serving_resumed()
        return True

    def _ask_again(self, now: float) -> None:
        """The lease lapsed: ask every linked backup at once (a primary that was only slow
        serves again within a round trip), and see after the close grace
        (:attr:`LeaseTimes.close_after`) whether it still does not serve (then its clients go
        elsewhere). Only once :meth:`start` ran (a primary on its loop)."""
        if not self._primary:
            return
        streams = self.host.streams
        for backup_id in [] if streams is None else list(streams.lease_streams):
            self._request(backup_id, now)
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # asked off a running loop: the next turn checks
            return
        after = self.times.close_after_late(self.lateness.worst(now))
        self._close_timer = loop.call_later(after, self._close_timer_fired)

    def _close_timer_fired(self) -> None:
        self._close_timer = None
        self._close_clients()

    def _close_clients(self) -> None:
        """Carry out :meth:`MemberLeases.close_clients_due`: once per time it stops serving
        (at the timer a lapse set, and at every turn)."""
        host, now = self.host, self.host.now()
        if self._clients_closed or host.fenced or not self._primary:
            return
        serving = self.may_serve()  # notes a change first
        since = None if serving else self._lapsed_at
        role = host.role
        leaving = {*role.pending_removal(), *role.awaited()}
        cut_off = since is not None and host.manager_silent()
        late = self.lateness.worst(now)
        due = self.leases.close_clients_due(now, since, leaving, cut_off, late)
        if not due or self.on_close_clients is None:
            return
        self._clients_closed = True
        reason = self.not_serving_reason()
        closed = self.on_close_clients(reason)
        host.log_.warning(
            "member_lease_clients_closed",
            connections=closed,
            not_serving_ms=round((now - (since or now)) * 1000.0, 1),
            reason=reason,
            cut_off=cut_off,
            epoch=host.epoch,
        )

    # -- what others read --------------------------------------------------------------
    def joined(self) -> Collection[str] | None:
        """While the lease is in force, the backups that may be in the in-sync set: those
        that answered this primary, and the committed members (None: any)."""
        leases = self.leases
        return (leases.answered | self.host.role.lease_set()) if leases.enabled else None

    def serving_window(self) -> tuple[float, float] | None:
        """:meth:`MemberLeases.serving_window`, None once fenced (it serves no more)."""
        return None if self.host.fenced else self.leases.serving_window()

    def not_serving_reason(self, named: bool = True) -> str:
        """Why :meth:`may_serve` is False, in a client's refusal; ``named`` False: without
        the members' names (a client refused before its login learns none)."""
        now, leases = self.host.now(), self.leases
        if now < leases.not_before:
            wait = leases.not_before - now
            return f"HA primary not serving yet: its grant to an older epoch lapses in {wait:.3f} s"
        lapsed = (named and ", ".join(m for m, _ in leases.lapsed(now))) or "a member"
        return f"HA primary not serving: the member lease of {lapsed} lapsed"

    def status(self) -> dict[str, Any]:
        """``GET /api/ha`` ``member_lease``: in force or not, the members' grants (seconds
        left), whether it serves on them alone (``on_grants``: the manager's lease ran out)
        and until when every member grants, a promotion's wait, and this broker's last
        grant as a backup."""
        now, leases = self.host.now(), self.leases
        last = self.grants.last()
        return {
            "enabled": leases.enabled,
            "serving": leases.may_serve(now),
            "members": {
                m: round(leases.expiry[m] - now, 3) if m in leases.expiry else None
                for m in sorted(leases.members)
            },
            "remaining": leases.remaining(now),
            # the grant each request asks now (adapted to the loops' lateness)
            "asked": round(self.asking, 3),
            # issue 26, item 2: serving on every member's grant, the manager's lease run out
            "on_grants": self.host.role.on_grants,
            "fenced": self.host.fenced,  # it serves no more, whatever the grants
            "grants_remaining": _left(leases.grants_until(), now),
            "promotion_wait": round(self.promotion_wait, 3),
            # the epochs the last promotion was told ended (a cluster manager that sees
            # this key may send ``ended_epochs`` with a promotion)
            "ended": sorted(self.ended),
            "granted": (
                None
                if last is None
                else {"epoch": last[0], "remaining": round(max(0.0, last[1] - now), 3)}
            ),
        }


def _left(until: float | None, now: float) -> float | None:
    """Seconds left until ``until`` (None: none; 0: already past, or never granted)."""
    return None if until is None else round(max(0.0, until - now), 3)
