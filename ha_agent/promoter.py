"""The promotion steps of one agent that won the election, and its broker's lease.

:Status: Beta

:meth:`Promoter.promote` carries out :attr:`~ha_agent.promotion.Step.PROMOTE`, in this
order:

1. the promotion's multi-op (:meth:`~ha_agent.in_sync_keeper.InSyncKeeper.take`):
   eligibility re-checked against a fresh read, the takeover rule asked
   (:mod:`ha_agent.takeover`), then one ZooKeeper transaction commits the next epoch, the
   in-sync set at that epoch and the ephemeral primary record
   (:mod:`ha_agent.promotion_txn`): this, not the election lock, decides the promotion;
2. ``POST /api/ha/promote`` with that epoch, the lease and the members to expect, within
   the lease (at most :data:`PROMOTE_TIMEOUT`). The primary record is already there: the
   agent deletes it when it resigns or fences (a broker that refused stays a backup).

It returns a :class:`Promotion` saying what came of it; the agent carries that out (record
the epoch, resign, or fence), the way :func:`~ha_agent.promotion.decide` returns actions.

The lease (docs/agent.md has the timing argument) is what is left of the agent's lease on
its ZooKeeper session (:class:`~ha_agent.fencing.SessionGuard`): the time its broker may
serve without another word from it. A promotion grants it; :meth:`Promoter.renew_lease`
renews it at every check while the broker is the primary the agent promoted.

THREAD UNSAFE: only the agent's loop thread calls it. Calls go from the agent to the
promoter and on to the in-sync keeper, never back.

Error Handling
==============

- A promotion the broker refuses (409: catching up, older epoch), or one with no lease left,
  is logged (``promotion_refused``): resign.
- A promotion call that timed out (a busy broker: slow is not dead) is logged
  (``promotion_slow``) and its outcome awaited, still leading, on the broker's liveness
  (:mod:`ha_agent.promotion_await`): primary at the epoch, it is promoted (issue 25).
- A promotion call with no answer otherwise, or awaited in vain, is logged
  (``promotion_failed``): the broker may yet become primary after this agent resigned,
  beside the next one: fence it.
- ZooKeeper errors and a multi-op that lost (``promotion_conflict``) are logged: resign;
  nothing was promoted.
- A lease renewal that fails is logged (``lease_renewal_failed``) and tried at the next
  check; a lease that has run out is the session guard's to fence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from broker.management.client import ManagementError
from common.log import set_log_context
from ha_agent.broker_check import BrokerCheck, LivenessView, PromoteRefused, timed_out
from ha_agent.ended import read_ended
from ha_agent.fencing import SessionGuard
from ha_agent.in_sync_keeper import InSyncKeeper, PromotionRequest
from ha_agent.loop_liveness import LoopJudge, LoopVerdict
from ha_agent.promotion import BrokerView, ClusterView
from ha_agent.promotion_await import AwaitStep, await_step
from ha_agent.settings import AgentSettings
from ha_agent.takeover import OldPrimaryGone, TakeoverRule

__all__ = ["PROMOTE_TIMEOUT", "Promoter", "Promotion"]

_log = structlog.get_logger("ha_agent.promoter", component="agent")

#: The longest a promotion call may take (seconds); also bounded by the lease.
PROMOTE_TIMEOUT = 5.0
#: How often a timed-out promotion's outcome is looked for on the broker's liveness (s).
AWAIT_POLL = 0.2

#: Judges a liveness probe sent at the first time, answered at the second (the agent's
#: :meth:`~ha_agent.local_broker.LocalBroker.heard`): the loop's verdict.
Heard = Callable[[float, float, LivenessView], LoopVerdict | None]


@dataclass(frozen=True)
class Promotion:
    """What a promotion came to. ``epoch``: promoted at it and recorded; else ``fence``:
    fence the broker for this reason; else resign."""

    epoch: int | None = None
    fence: str = ""
    #: the instance promoted, as its answer named it (None: not said): it said it is the
    #: primary of ``epoch`` (ha_agent.ended)
    pid: int | None = None
    broker_id: str = ""


class Promoter:
    """See the module docstring. ``client`` is the agent's KazooClient, ``guard`` its
    session watcher's guard."""

    def __init__(
        self,
        settings: AgentSettings,
        client: Any,
        broker_check: BrokerCheck,
        keeper: InSyncKeeper,
        guard: SessionGuard,
        takeover: TakeoverRule | None = None,
        heard: Heard | None = None,
    ) -> None:
        self.settings = settings
        #: judges the liveness answers a timed-out promotion is awaited on (the agent's
        #: record of its broker; else a judge of its own)
        self.heard: Heard = heard or _own_judge(settings.broker_timeout)
        #: when a candidate may take the primary record over (ha_agent.takeover)
        self.takeover: TakeoverRule = takeover or OldPrimaryGone()
        self.client = client
        self.broker_check = broker_check
        self.keeper = keeper
        self.guard = guard
        #: when the broker last took a lease renewal (monotonic; 0: never)
        self.renewed_at = 0.0
        #: set when the agent stops: a timed-out promotion is awaited no longer (its broker
        #: is fenced, as any whose promotion's outcome is unknown)
        self.stopping = threading.Event()
        #: the shutdown-id of a clean all-stop the broker announced in a lease answer
        #: (written by the loop or the lease thread; read by the loop)
        self.cluster_shutdown: str | None = None

    def promote(
        self, view: BrokerView, reason: str, cluster_view: ClusterView, locked: bool
    ) -> Promotion:
        """Promote the broker seen in ``view`` (``cluster_view``: the one just decided on;
        ``locked``: the claim holds kazoo's election lock)."""
        s = self.settings
        started = time.monotonic()
        answer: dict[str, Any] | None = None
        try:
            request = PromotionRequest(self.takeover, locked, s.vip)
            taken = self.keeper.take(view, cluster_view, request)
            if taken is None:
                return Promotion()
            epoch = taken.epoch
            lease = self.lease()
            if lease is None:
                raise PromoteRefused("no lease left on the ZooKeeper session")
            # The promotion must be over well within the lease; past it, its outcome is
            # unknown (see below).
            timeout = min(PROMOTE_TIMEOUT, max(0.5, lease * 0.8))
            ended = self._ended(epoch)
            try:
                answer = self.broker_check.promote(
                    epoch,
                    lease,
                    timeout=timeout,
                    in_sync=taken.expect,
                    committed_store=taken.committed_store,
                    ended_epochs=ended,
                )
            except ManagementError as exc:
                # No answer: the broker may yet become primary after this agent resigned,
                # beside the next one. Timed out (busy, slow is not dead): await it, still
                # leading, on its liveness; else, or in vain, fence it (it restarts as a
                # backup), then resign.
                fence, state = self._await(exc, epoch, view.pid, timeout)
                if fence:
                    _log.warning("promotion_failed", reason=fence)
                    return Promotion(fence=f"promotion of unknown outcome: {fence}")
                answer = {"state": state}
        except PromoteRefused as exc:
            _log.warning("promotion_refused", reason=str(exc))
            return Promotion()
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("promotion_failed", reason=repr(exc))
            return Promotion()  # nothing promoted: the multi-op comes first
        set_log_context(epoch=epoch)
        _log.info(
            "agent_promoted",
            new_epoch=epoch,
            ha_state=answer.get("state"),
            reason=reason,
            took_ms=round((time.monotonic() - started) * 1000, 3),
        )
        pid, broker_id = answer.get("pid"), answer.get("broker_id")
        if isinstance(pid, bool) or not isinstance(pid, int):
            pid = None
        return Promotion(epoch, pid=pid, broker_id=broker_id if isinstance(broker_id, str) else "")

    def _ended(self, epoch: int) -> list[int]:
        """The older epochs the cluster's ended record names (ha_agent.ended), for a broker
        that takes them; read after the multi-op, so after the old primary record was
        seen gone, and so after the old primary's agent recorded its end. A read that
        fails names none (the broker then waits out its grants, as before)."""
        if not self.broker_check.takes_ended:
            return []
        try:
            ended = read_ended(self.client, self.settings.cluster)
        except (KazooException, KazooTimeoutError) as exc:
            _log.info("ended_read_failed", reason=repr(exc))
            return []
        return sorted(e for e in ended if e < epoch)

    def _await(
        self, exc: ManagementError, epoch: int, pid: int | None, timeout: float
    ) -> tuple[str, str]:
        """The promotion call to ``epoch`` failed with ``exc``: ("", its state) once the
        broker's liveness shows it primary at ``epoch`` (its lease then renewed at once),
        else (why to fence, ""). Only a call that timed out is awaited
        (:mod:`ha_agent.promotion_await`), polled every :data:`AWAIT_POLL` seconds."""
        if not timed_out(exc):
            return str(exc), ""
        _log.warning(
            "promotion_slow", new_epoch=epoch, timeout_s=round(timeout, 3),
            reason=f"{exc}: awaiting the outcome on the broker's liveness, still leading",
        )  # fmt: skip
        since = time.monotonic()
        progress_at = since - timeout  # it progressed when the call was sent (it answered)
        while True:
            asked = time.monotonic()
            live = self.broker_check.liveness()
            now = time.monotonic()
            if live is not None:
                # starved is not stopped: a loop judged running answered when asked
                judged = self.heard(asked, now, live)
                progress_at = now - live.last_progress
                if judged is not None and judged.running:
                    progress_at = max(progress_at, asked - judged.idle)
            verdict = await_step(
                live, refused=self.broker_check.liveness_refused, silent_for=now - progress_at,
                epoch=epoch, pid=pid, lease_left=self.lease(), waited=now - since,
                patience=self.settings.broker_timeout,
            )  # fmt: skip
            if verdict.step is AwaitStep.PROMOTED and live is not None:
                self.renew_lease()  # its lease was counted from when it took the promotion
                return "", live.ha_state
            if verdict.step is AwaitStep.FENCE:
                return f"{exc}; then {verdict.reason}", ""
            if self.stopping.wait(AWAIT_POLL):  # a poll period, bounded by AWAIT_LIMIT
                return f"{exc}; then the agent stops", ""

    # -- the lease --------------------------------------------------------------------
    def lease(self) -> float | None:
        """What is left of this agent's lease on its ZooKeeper session (seconds), the time
        its broker may serve without another word from it; None when nothing is left."""
        deadline = self.guard.deadline
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        return left if left > 0 else None

    def start_renewing(
        self, stop: threading.Event, interval: float, serving: Callable[[], bool]
    ) -> None:
        """Start the lease thread: :meth:`renew_between_checks` (a daemon thread)."""
        args = (stop, interval, serving)
        thread = threading.Thread(target=self.renew_between_checks, args=args, daemon=True)
        thread.name = "lease-renewer"
        thread.start()

    def renew_between_checks(
        self, stop: threading.Event, interval: float, serving: Callable[[], bool]
    ) -> None:
        """Renew a promoted primary's lease between checks (the agent's lease thread, every
        ``interval`` while ``serving`` until ``stop``). The loop renews at each check, but a
        check of a busy broker and ZooKeeper reads can take longer than a 1 s session's
        lease (0.9 s): under heavy load the new primary's lease ran out between two checks
        and it fenced itself (issue 10, item 7). The lease always comes from the session
        guard, so who sends it changes nothing for safety."""
        while not stop.wait(interval):
            if serving() and time.monotonic() - self.renewed_at >= interval:
                self.renew_lease()

    def renew_lease(self) -> None:
        """Give the broker what is left of the lease (the loop at each check of a promoted
        primary, and the agent's lease thread between checks: both may call it)."""
        lease = self.lease()
        if lease is None:
            return  # the session guard fences; the broker's lease runs out by itself
        try:
            answer = self.broker_check.renew_lease(lease)
            self.renewed_at = time.monotonic()
            if isinstance(answer.get("cluster_shutdown"), str):
                # qpid-ha shutdown --all: the broker stops soon, cleanly (the agent neither
                # fences nor restarts it); the broker waits for this answer to reach us.
                self.cluster_shutdown = answer["cluster_shutdown"]
        except (PromoteRefused, ManagementError) as exc:
            _log.warning("lease_renewal_failed", reason=str(exc))


def _own_judge(patience: float) -> Heard:
    judge = LoopJudge(patience)

    def heard(sent: float, now: float, live: LivenessView) -> LoopVerdict:
        return judge.judge(live.pid, live.times)

    return heard
