"""Issue 10, item 4: when does the real ZooKeeper expire the first session of a run, and does
it grant the session timeout the agent asks for?

The agent's guard fences ``T - M`` after its last contact, counting the ``T`` it asked for;
safety needs ZooKeeper to expire the session no sooner than that, and fail-over needs it
no later than ``T`` plus a tick. A server whose ``maxSessionTimeout`` is below ``T``
expires early (unsafe); one whose ``minSessionTimeout`` or tick is above it expires late.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from tests.agent.conftest import ClientFactory
from tests.zookeeper import TICK_TIME_MS, ZooKeeperProcess, session_timeout_ms

pytestmark = pytest.mark.timeout(60)

#: a client that opens a session, creates an ephemeral znode, says so and waits to be killed
HOLDER = """
import sys, threading
from kazoo.client import KazooClient
client = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[2]))
client.start(timeout=10)
client.create(sys.argv[3], ephemeral=True)
print("ready", flush=True)
threading.Event().wait()
"""


@pytest.mark.parametrize("timeout", [2.0])
def test_the_first_session_of_a_fresh_server_expires_within_its_timeout_and_a_tick(
    own_zookeeper: Any, make_client: ClientFactory, timeout: float
) -> None:
    if not isinstance(own_zookeeper, ZooKeeperProcess):
        pytest.skip("measured on the Debian package's server")
    observer = make_client(hosts=own_zookeeper.hosts)
    path = "/first-session"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, own_zookeeper.hosts, str(timeout), path],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        gone = threading.Event()
        assert observer.exists(path, watch=lambda _event: gone.set()) is not None
        # The client dies: ZooKeeper hears nothing more from the session (its connection
        # closes, the session lives on until it expires).
        os.kill(holder.pid, signal.SIGKILL)
        killed = time.monotonic()
        margin = TICK_TIME_MS / 1000 + 0.5  # expiry is checked once a tick; load
        assert gone.wait(timeout + margin), f"not expired within {timeout} s + {margin} s"
        expired_after = time.monotonic() - killed
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=10)
    # no sooner than T after the last request heard (a ping at most T/3 before the kill)
    assert expired_after >= timeout * 2 / 3 - 0.1
    print(f"\nfirst session (T={timeout} s) expired {expired_after:.2f} s after its client died")


@pytest.mark.parametrize("timeout", [1.0, 4.0, 15.0, 60.0])
def test_the_session_timeout_is_granted_as_asked(
    zookeeper: Any, make_client: ClientFactory, timeout: float
) -> None:
    if not isinstance(zookeeper, ZooKeeperProcess):
        pytest.skip("read with cons from the Debian package's server")
    client = make_client(timeout=timeout)
    granted = session_timeout_ms("127.0.0.1", zookeeper.client_port, client.client_id[0])
    assert granted == int(timeout * 1000)
