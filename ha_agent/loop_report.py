"""When the agent's judgement of its broker's loop is worth a ``broker_loop`` line.

:Status: Beta

Each liveness answer is judged (:mod:`ha_agent.loop_liveness`): running (starved or busy,
counted as answering), stopped, spinning or unjudged, and how late the loop's last
progress is. Logged at each change of "late or on time", a loaded machine made the event
flip about once a minute per agent (the 10-minute scale soak at load 11-31: 20 lines,
in pairs a second or three apart, every one saying ``counted`` true): a loop that ran
0.5 s late and was on time again at the next answer. Nothing the agent decides had
changed: a running loop counts as answering, late or not.

:class:`LoopReport` keeps a hysteresis over it:

- **late**: a loop whose last progress is at least ``enter`` seconds old (half the
  ``--broker-timeout``, at least :data:`LATE_PROGRESS`) is reported with its judgement,
  and so is any judgement that does not count as answering (stopped, spinning,
  unjudged) once its progress is :data:`LATE_PROGRESS` late;
- while late, a change of judgement is reported at once (running <-> stopped <->
  spinning: the agent's count of its broker changed);
- **on time again** (``progressing``) only once every answer for ``on_time_for`` seconds
  (:data:`ON_TIME_FOR`) was under :data:`LATE_PROGRESS` (counted, as any fresh
  progress), with the latest
  progress seen while late (``late_max_ms``) and how long the spell lasted
  (``late_for_s``); at once after a stopped or spinning judgement (it runs again: a
  change the agent acts on).

Pure: times come in as numbers (the agent's monotonic clock). THREAD UNSAFE: the agent's
loop thread owns it.

Error Handling
==============

Raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ha_agent.loop_liveness import LoopState, LoopVerdict

__all__ = ["LATE_PROGRESS", "ON_TIME_FOR", "LoopChange", "LoopReport"]

#: A loop whose last progress is older than this (seconds) is late.
LATE_PROGRESS = 0.5
#: How long (seconds) a late loop must answer on time before it is reported on time again.
ON_TIME_FOR = 30.0
#: The judgement a loop on time is reported with.
PROGRESSING = "progressing"


@dataclass(frozen=True)
class LoopChange:
    """A ``broker_loop`` line: the judgement now, and for ``progressing`` the spell's worst."""

    loop: str
    counted: bool
    late_max: float | None = None  # seconds: the latest progress seen while late
    late_for: float | None = None  # seconds the late spell lasted


class LoopReport:
    """See the module docstring. ``patience``: ``--broker-timeout``."""

    def __init__(
        self,
        patience: float,
        *,
        late: float = LATE_PROGRESS,
        on_time_for: float = ON_TIME_FOR,
    ) -> None:
        self.late = late
        self.enter = max(late, patience / 2)
        self.on_time_for = on_time_for
        #: The judgement last reported.
        self.reported = PROGRESSING
        self._late_since = 0.0
        self._late_max = 0.0
        self._on_time_since: float | None = None

    def judged(self, now: float, last_progress: float, verdict: LoopVerdict) -> LoopChange | None:
        """The change to report for an answer at ``now`` whose loop last progressed
        ``last_progress`` seconds before, judged ``verdict`` (None: nothing to report)."""
        state = verdict.state.value
        counted = verdict.running
        late = last_progress >= self.late
        if self.reported == PROGRESSING:
            if last_progress >= self.enter or (late and not counted):
                self.reported, self._late_since, self._late_max = state, now, last_progress
                self._on_time_since = None
                return LoopChange(state, counted)
            return None
        if late:
            self._on_time_since = None
            self._late_max = max(self._late_max, last_progress)
            if state != self.reported:
                self.reported = state
                return LoopChange(state, counted)
            return None
        # on time: a fresh progress counts as an answer, whatever the clocks say
        if self.reported in (LoopState.STOPPED.value, LoopState.SPINNING.value):
            return self._back(now)  # it runs again: the agent counts it from now
        if self._on_time_since is None:
            self._on_time_since = now
        if now - self._on_time_since >= self.on_time_for:
            return self._back(now)
        return None

    def _back(self, now: float) -> LoopChange:
        change = LoopChange(
            PROGRESSING, True, late_max=self._late_max, late_for=now - self._late_since
        )
        self.reported, self._on_time_since = PROGRESSING, None
        return change
