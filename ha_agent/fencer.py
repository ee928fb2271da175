"""The fencer: what fencing means on this node. Kill the broker, drop the virtual IP.

:Status: Beta

:mod:`ha_agent.fencing` decides *when* a leader must stop acting as one;
:func:`~ha_agent.promotion.decide` decides when the loop fences, withdraws or lets the
watchdog kill. :class:`Fencer` carries that out on the node:

- :meth:`Fencer.kill_broker` SIGKILLs one broker *instance*, named by its pid (any reason:
  fence, watchdog, shutdown), through its :class:`~ha_agent.supervisor.BrokerSupervisor`
  (which restarts it, as a backup) or by the pid itself, then calls ``on_kill``: the broker
  that comes back is new (the agent's :class:`~ha_agent.watchdog.BrokerWatch` starts
  again). A kill decided about an instance that is gone hits nothing (``broker_kill_skipped``):
  the supervisor's next broker, started 2-68 ms after the old one died, was killed by a
  fence meant for the dead one (3 of 4 broker kills in the nemesis harness, issue 25).
- :meth:`Fencer.fence` kills the broker and drops the virtual IP; :meth:`Fencer.take_vip`
  and :meth:`Fencer.drop_vip` add and remove the virtual IP (:mod:`ha_agent.vip`).

THREAD SAFE: the agent's loop and the session watcher's thread both call :meth:`Fencer.fence`,
one fence at a time (its lock): a fence must not wait for the loop. The rest is the loop's,
and the agent's shutdown. Calls go from the agent to the fencer, and back only through
``on_kill``.

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
    """See the module docstring. ``on_kill`` (after every kill) runs in the killer's
    thread."""

    def __init__(self, vip: VirtualIp | None, on_kill: Callable[[], None]) -> None:
        self.vip = vip
        #: the local broker's supervisor when the agent runs one (set once, by the agent)
        self.supervisor: BrokerSupervisor | None = None
        self._on_kill = on_kill
        self._lock = threading.Lock()

    def kill_broker(self, reason: str, pid: int | None) -> bool:
        """SIGKILL the broker instance ``pid`` (through the supervisor, which kills only
        the process it runs now if that is ``pid``; else the pid itself), then
        ``on_kill``. None, or an instance no longer running: nothing is killed."""
        if self.supervisor is not None:
            killed = self.supervisor.kill(reason, pid)
        else:
            killed = pid is not None and kill_pid(pid, reason)
        if killed:
            self._on_kill()  # after the signal: no answer sent later is the old broker's
        else:
            _log.info("broker_kill_skipped", pid=pid, reason=reason)
        return killed

    def fence(self, reason: str, pid: int | None, *, announce: bool = True) -> None:
        """Stop the broker instance ``pid`` serving (kill it, ``fenced: <reason>``; it
        restarts as a backup) and drop the VIP. ``announce``: log ``agent_fenced`` first,
        under the lock."""
        with self._lock:
            if announce:
                _log.warning("agent_fenced", reason=reason, pid=pid)
            self.kill_broker(f"fenced: {reason}", pid)
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
