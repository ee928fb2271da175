"""The agent's first connection to ZooKeeper, given up at once when the agent is stopped.

:Status: Beta

:func:`connect_until_stopped` waits for kazoo's ``start`` in :data:`STOP_POLL` slices that
look at the agent's stop event, so that a SIGTERM without a ZooKeeper ends the agent at
once (it waited up to a session timeout, then the grant's: about 7 s with the defaults).

Error Handling
==============

An ensemble unreachable for a session timeout is logged (``zookeeper_unreachable``) and the
client starts again; nothing is raised.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog
from kazoo.handlers.threading import KazooTimeoutError

from ha_agent.settings import AgentSettings
from ha_agent.zk_auth import ensure_shared_root

__all__ = ["STOP_POLL", "connect_until_stopped"]

_log = structlog.get_logger("ha_agent.zk_connect", component="agent")

#: How often a wait for ZooKeeper's first answer looks whether the agent was stopped.
STOP_POLL = 0.05


def connect_until_stopped(client: Any, settings: AgentSettings, stop: threading.Event) -> bool:
    """Connect ``client`` (a KazooClient, not started): True once connected (and the shared
    root made), False as soon as ``stop`` is set."""
    while not stop.is_set():
        connected = client.start_async()
        deadline = time.monotonic() + settings.session_timeout
        while not connected.is_set() and not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            connected.wait(min(STOP_POLL, left))
        if stop.is_set():
            return False
        if client.connected:
            try:
                ensure_shared_root(client, settings.zk_auth)  # not this cluster's
                return True
            except KazooTimeoutError:
                pass
        _log.warning("zookeeper_unreachable", zk=settings.zk_hosts)
        client.stop()
    return False
