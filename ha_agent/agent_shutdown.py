"""How the agent shuts down, and how a cluster shutdown ends it: :class:`AgentShutdown`.

:Status: Beta

The :class:`~ha_agent.agent.Agent` owns one and calls it; it reads the agent only through
:class:`ShutdownHost` (its ZooKeeper client and the parts made with it, the epoch it
promoted at; ``stop`` and ``resign``), and is built with the parts the agent made first:
the fencer, the local broker, the broker check and the loop's queue.

- The agent stops (:meth:`AgentShutdown.stop_agent`, the end of
  :meth:`~ha_agent.agent.Agent.run`): a broker that is the primary stops serving first (the
  virtual IP dropped, the broker stopped or killed, the primary record deleted); only then
  may another agent win.
- The broker announces a cluster shutdown (``qpid-ha shutdown --all``):
  :meth:`AgentShutdown.announced` reads it from its last ``/api/ha`` or a lease answer, and
  :meth:`AgentShutdown.broker_shutting_down` resigns, no fence (a SIGKILL would leave its
  store dirty).
  :meth:`AgentShutdown.broker_stopping` (after each check) clears an announcement a
  backup's new run does not repeat.
- The supervised broker exits (:meth:`AgentShutdown.broker_exited`): with ``SHUT_DOWN``
  (``qpid-ha shutdown --all``) it is left stopped and the agent stops too
  (``agent_cluster_shut_down``, exit 0); any other exit is a failure the loop hears of.

THREAD SAFETY: :meth:`~AgentShutdown.broker_exited` runs in the supervisor's thread and
only puts an event on the loop's queue (or stops the agent); the rest runs in the loop's.
"""

from __future__ import annotations

import contextlib
import queue
import time
from typing import Any, Protocol

import structlog
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from common.exit_status import ExitStatus
from ha_agent import loop_events as loop
from ha_agent.broker_check import BrokerCheck
from ha_agent.cluster_reader import ClusterReader
from ha_agent.fencer import Fencer
from ha_agent.fencing import SessionWatcher
from ha_agent.local_broker import LocalBroker
from ha_agent.primary_claim import PrimaryClaim
from ha_agent.primary_record import delete_primary
from ha_agent.promoter import Promoter
from ha_agent.promotion import BrokerView

__all__ = ["AgentShutdown", "ShutdownHost"]

_log = structlog.get_logger("ha_agent.agent_shutdown", component="agent")


class ShutdownHost(Protocol):
    """The agent, as its shutdown sees it; see the module docstring."""

    @property
    def client(self) -> Any:
        """Its kazoo client (None before :meth:`~ha_agent.agent.Agent.run` made it)."""
        ...

    @property
    def election(self) -> PrimaryClaim | None:
        """Its claim on the primary record (None before the run made it)."""
        ...

    @property
    def watcher(self) -> SessionWatcher | None:
        """Its session watcher (None before the run made it)."""
        ...

    @property
    def reader(self) -> ClusterReader | None:
        """Its member record and the cluster's records (None before the run made it)."""
        ...

    @property
    def promoter(self) -> Promoter | None:
        """The promotion steps and the lease (None before the run made it)."""
        ...

    @property
    def promoted_epoch(self) -> int | None:
        """The epoch its broker was promoted at (None: it promoted none)."""
        ...

    def stop(self) -> None:
        """Stop the agent's loop (any thread)."""
        ...

    def resign(self) -> None:
        """Delete the primary record it may have written and end its claim (the loop's)."""
        ...


class AgentShutdown:
    """See the module docstring."""

    def __init__(
        self,
        host: ShutdownHost,
        cluster: str,
        fencer: Fencer,
        broker: LocalBroker,
        broker_check: BrokerCheck,
        events: queue.SimpleQueue[loop.LoopEvent],
    ) -> None:
        self.host = host
        self.cluster = cluster
        self.fencer = fencer
        self.broker = broker
        self.broker_check = broker_check
        self.events = events

    def broker_exited(self, code: int) -> None:
        """The supervisor's call (its thread), before it restarts the broker. A broker that
        stopped for a cluster shutdown is not restarted, and the agent stops too (exit 0):
        after ``qpid-ha shutdown --all`` nothing starts again until the operator starts
        the agent."""
        self.broker.reset(time.monotonic())
        if self.fencer.vip is not None and self.fencer.vip.held:
            self.fencer.drop_vip()  # a broker that exited serves nobody: its address goes
        if code == ExitStatus.SHUT_DOWN:
            _log.warning(
                "agent_cluster_shut_down",
                reason="the broker stopped for a cluster shutdown (qpid-ha shutdown --all):"
                " the agent stops; start it again to restart the broker",
            )
            self.host.stop()
            return
        if self.host.promoter is not None:  # it did not stop for the shutdown: a failure
            self.host.promoter.cluster_shutdown = None
        self.broker_check.cluster_shutdown = None
        self.events.put(loop.BrokerExited(code))

    def stop_agent(self) -> None:
        """The end of the agent's run: a primary stops serving first, then the agent lets go
        of ZooKeeper."""
        host = self.host
        _log.info("agent_stopping")
        if host.watcher is not None:
            host.watcher.stop()  # before the client: stopping a client reports LOST
        leading = host.election is not None and host.election.leading
        supervisor = self.fencer.supervisor
        if leading or self.broker.serves():
            # The broker stops serving first; only then may another agent win.
            self.fencer.drop_vip()
            if supervisor is not None:
                supervisor.stop()
            else:  # nobody would stop an unmanaged primary: never leave one serving
                self.fencer.kill_broker(
                    "agent stopping while its broker is the primary", self.broker.fence_target()
                )
            with contextlib.suppress(KazooException, KazooTimeoutError):
                delete_primary(host.client, self.cluster)
        if host.election is not None:
            host.election.cancel(timeout=2.0)
        if host.reader is not None:
            with contextlib.suppress(KazooException, KazooTimeoutError):
                host.reader.withdraw()
        if supervisor is not None:
            supervisor.stop()
        with contextlib.suppress(Exception):
            host.client.stop()
            host.client.close()
        _log.info("agent_stopped")

    def announced(self) -> str | None:
        """The shutdown-id of a cluster shutdown the broker announced (``qpid-ha shutdown
        --all``): in its last ``/api/ha`` or a lease answer; None: none."""
        promoter = self.host.promoter
        told = None if promoter is None else promoter.cluster_shutdown
        return told or self.broker_check.cluster_shutdown

    def broker_stopping(self, view: BrokerView | None) -> bool:
        """After a check read ``view``: True when the broker stops for a cluster shutdown
        (the agent then resigned or withdrew; the check decides nothing more)."""
        promoter = self.host.promoter
        assert promoter is not None
        if view is not None and not view.is_primary and self.broker_check.cluster_shutdown is None:
            promoter.cluster_shutdown = None  # a broker run without the announcement
        shutdown = self.announced()
        if shutdown is not None and (view is None or not view.is_primary):
            self.broker_shutting_down(shutdown)
            return True
        return False

    def broker_shutting_down(self, shutdown_id: str) -> None:
        """The broker stops for a cluster shutdown (a backup, or a primary that stopped
        answering; the broker told this agent before it stops): it is stopping cleanly, not
        failing. No fence (a SIGKILL would leave its store dirty), no contending (winning
        would fence it): resign or withdraw, so that the primary record goes and no agent
        leads. A supervised broker's exit (SHUT_DOWN) then stops the agent; an unsupervised
        one is left to its service manager. A broker answering again without the
        announcement is a new run: the agent decides as ever."""
        election = self.host.election
        leadership = "idle" if election is None else election.state.value
        if self.host.promoted_epoch is not None or leadership in ("contending", "leading"):
            _log.warning(
                "agent_cluster_shutting_down",
                shutdown_id=shutdown_id,
                reason="the broker stops for a cluster shutdown: resigning, no fence",
            )
            self.host.resign()
