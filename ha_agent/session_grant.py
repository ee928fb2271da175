"""The session timeout ZooKeeper granted, and whether the agent may run with it.

:Status: Beta

A client asks for a session timeout; the server grants one between its
``minSessionTimeout`` and ``maxSessionTimeout`` (defaults 2 and 20 ticks) and says which in
its answer to the connect request. The agent's timing (the session guard's lease, the lease
it gives its broker, the heartbeat) must count the *granted* timeout: a grant below the
request makes ZooKeeper expire the session before a guard counting the request fences
(two primaries); a grant above it delays every fail-over past what the operator set.

kazoo 2.11 reads the granted timeout and keeps it to itself (python-zk/kazoo issue 769,
open). :class:`GrantProbe` wraps the connection handler's ``_invoke`` (the call that sends
the connect request and reads its answer, in kazoo's connection thread, before kazoo
reports CONNECTED) and hands each connect answer's ``time_out`` over. Nothing else of kazoo
changes. A kazoo without that method is refused when the probe is installed (``TypeError``
naming it), never silently run on the request.

:func:`judge_grant` is the rule, pure: a grant within :data:`GRANT_TOLERANCE` of the
request (either way) is used, logged as a warning when it differs; one further away is
refused with one line naming both values and the ZooKeeper settings to change.

Error Handling
==============

- :class:`GrantProbe` raises TypeError when the client has no connection handler with an
  ``_invoke`` method (a kazoo this was not written for).
- An exception from ``on_grant`` is logged (``session_grant_failed``) and the connect goes
  on: the agent then runs on the last grant it knew.
- :func:`judge_grant` raises ValueError for a non-positive timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from kazoo.protocol.serialization import Connect

__all__ = ["GRANT_TOLERANCE", "GrantJudgement", "GrantProbe", "judge_grant"]

_log = structlog.get_logger("ha_agent.session_grant", component="agent")

#: The largest ratio between granted and requested timeouts (either way) the agent runs with.
GRANT_TOLERANCE = 1.5


@dataclass(frozen=True)
class GrantJudgement:
    """What to do with a grant: run with ``timeout`` (seconds) or refuse (``refusal``)."""

    requested: float
    granted: float
    refusal: str = ""  # one line; "" when the agent runs with the grant

    @property
    def timeout(self) -> float:
        """The timeout the agent's timing counts: the granted one."""
        return self.granted

    @property
    def differs(self) -> bool:
        return abs(self.granted - self.requested) > 1e-3


def judge_grant(requested: float, granted: float) -> GrantJudgement:
    """May the agent run with ``granted`` seconds when ``requested`` were asked for?"""
    if requested <= 0 or granted <= 0:
        raise ValueError(f"session timeouts must be positive: {requested!r}, {granted!r}")
    ratio = granted / requested
    if 1 / GRANT_TOLERANCE <= ratio <= GRANT_TOLERANCE:
        return GrantJudgement(requested, granted)
    if ratio > 1:
        why = (
            f"ZooKeeper granted a {granted:g} s session for --session-timeout {requested:g}: "
            f"fail-over would take {ratio:.1f} times longer than set; lower the servers' "
            f"maxSessionTimeout/minSessionTimeout (or tickTime) or raise --session-timeout"
        )
    else:
        why = (
            f"ZooKeeper granted a {granted:g} s session for --session-timeout {requested:g}: "
            f"a pause of {granted:g} s would fail over; raise the servers' maxSessionTimeout "
            f"or lower --session-timeout"
        )
    return GrantJudgement(requested, granted, refusal=why)


def log_grant(requested: float, granted: float) -> str:
    """Judge and log a grant (``zookeeper_session_granted``, a warning when it differs from
    the request; ``zookeeper_session_refused``); the refusal ("" when it may be used)."""
    judgement = judge_grant(requested, granted)
    if judgement.refusal:
        _log.error(
            "zookeeper_session_refused",
            requested=judgement.requested,
            granted=judgement.granted,
            reason=judgement.refusal,
        )
        return judgement.refusal
    level = _log.warning if judgement.differs else _log.info
    level("zookeeper_session_granted", requested=judgement.requested, granted=granted)
    return ""


class GrantProbe:
    """Reports the session timeout (seconds) of each connect answer of ``client`` to
    ``on_grant`` (kazoo's connection thread, before kazoo reports CONNECTED)."""

    def __init__(self, client: Any, on_grant: Callable[[float], None] | None = None) -> None:
        connection: Any = getattr(client, "_connection", None)
        invoke = getattr(connection, "_invoke", None)
        if connection is None or invoke is None or not callable(invoke):
            raise TypeError(
                "this kazoo's client has no _connection._invoke: the agent cannot read the "
                "session timeout ZooKeeper grants (written for kazoo 2.10 and 2.11)"
            )
        self.on_grant = on_grant
        self._lock = threading.Lock()
        self._granted: float | None = None
        self._grant_seen = threading.Event()
        original = invoke

        def probed(timeout: float, request: Any, xid: int | None = None) -> Any:
            result = original(timeout, request, xid=xid)
            if isinstance(request, Connect) and isinstance(result, tuple) and result:
                time_out = getattr(result[0], "time_out", None)
                if isinstance(time_out, int) and time_out > 0:
                    self._granted_now(time_out / 1000.0)
            return result

        connection._invoke = probed

    @property
    def granted(self) -> float | None:
        """The latest grant (seconds), None before the first connect answer."""
        with self._lock:
            return self._granted

    def wait(self, timeout: float) -> float | None:
        """The latest grant, waiting up to ``timeout`` s for the first one."""
        self._grant_seen.wait(timeout)
        return self.granted

    def _granted_now(self, seconds: float) -> None:
        with self._lock:
            self._granted = seconds
        self._grant_seen.set()
        if self.on_grant is not None:
            try:
                self.on_grant(seconds)
            except Exception as exc:
                _log.error("session_grant_failed", reason=repr(exc))
