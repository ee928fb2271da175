"""The fencer: what fencing means on this node. Kill the broker, drop the virtual IP.

:Status: Beta

:mod:`ha_agent.fencing` decides *when* a leader must stop acting as one;
:func:`~ha_agent.promotion.decide` decides when the loop fences, withdraws or lets the
watchdog kill. :class:`Fencer` carries that out on the node:

- :meth:`Fencer.kill_broker` SIGKILLs the local broker (any reason: fence, watchdog,
  shutdown) through its :class:`~ha_agent.supervisor.BrokerSupervisor` (which restarts it,
  as a backup), else by the pid it last reported (``broker_pid``), then calls ``on_kill``:
  the broker that comes back is new (the agent's :class:`~ha_agent.watchdog.BrokerWatch`
  starts again).
- :meth:`Fencer.fence` kills the broker and drops the virtual IP; :meth:`Fencer.take_vip`
  and :meth:`Fencer.drop_vip` add and remove the virtual IP (:mod:`ha_agent.vip`).

THREAD SAFE: the agent's loop and the session watcher's thread both call :meth:`Fencer.fence`,
one fence at a time (its lock): a fence must not wait for the loop. The rest is the loop's,
and the agent's shutdown. Calls go from the agent to the fencer, and back only through
``broker_pid`` and ``on_kill``.

Error Handling
==============

- A virtual IP that cannot be added or removed is logged (``vip_failed``);
  :meth:`Fencer.take_vip` returns False and the agent fences: a primary clients cannot
  reach is no primary.
- A kill of a broker that is already gone returns False (:mod:`ha_agent.supervisor`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from ha_agent.supervisor import BrokerSupervisor, kill_pid
from ha_agent.vip import VipError, VirtualIp

__all__ = ["Fencer"]

_log = structlog.get_logger("ha_agent.fencer", component="agent")


class Fencer:
    """See the module docstring. ``broker_pid`` (asked only when there is no supervisor) and
    ``on_kill`` (after every kill) run in the killer's thread."""

    def __init__(
        self,
        vip: VirtualIp | None,
        broker_pid: Callable[[], int | None],
        on_kill: Callable[[], None],
    ) -> None:
        self.vip = vip
        #: the local broker's supervisor when the agent runs one (set once, by the agent)
        self.supervisor: BrokerSupervisor | None = None
        self._broker_pid = broker_pid
        self._on_kill = on_kill
        self._lock = threading.Lock()

    def kill_broker(self, reason: str) -> bool:
        """SIGKILL the broker (through its supervisor, else its pid), then ``on_kill``."""
        try:
            if self.supervisor is not None:
                return self.supervisor.kill(reason)
            pid = self._broker_pid()
            return pid is not None and kill_pid(pid, reason)
        finally:
            self._on_kill()  # after the signal: no answer sent later is the old broker's

    def fence(self, reason: str, *, announce: bool = True) -> None:
        """Stop the broker serving (kill it, ``fenced: <reason>``; it restarts as a backup)
        and drop the VIP. ``announce``: log ``agent_fenced`` first, under the lock."""
        with self._lock:
            if announce:
                _log.warning("agent_fenced", reason=reason)
            self.kill_broker(f"fenced: {reason}")
            self.drop_vip()

    def take_vip(self) -> bool:
        """Add the virtual IP unless held (or none); False (logged) when it cannot."""
        if self.vip is not None and not self.vip.held:
            try:
                self.vip.take()
            except (VipError, OSError) as exc:
                _log.error("vip_failed", reason=str(exc))
                return False
        return True

    def drop_vip(self) -> None:
        if self.vip is not None:
            try:
                self.vip.drop()
            except (VipError, OSError) as exc:
                _log.error("vip_failed", reason=str(exc))
