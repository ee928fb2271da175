"""Fixtures of the agent's tests: a real ZooKeeper for the session, clients, clusters."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.zookeeper import (
    ZooKeeper,
    ZooKeeperContainer,
    ZooKeeperEnsemble,
    ZooKeeperProcess,
    start_ensemble,
    start_zookeeper,
)

#: Session timeout of the tests' clients (s): the server grants 1 to 60 s as asked.
SESSION_TIMEOUT = 2.0

# Reconnect quickly after a server pause or kill (kazoo backs off to 60 s by default).
FAST_RECONNECT = {
    "max_tries": -1,
    "delay": 0.05,
    "backoff": 1.5,
    "max_delay": 0.5,
    "max_jitter": 0.05,
}

ClientFactory = Callable[..., Any]


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess | ZooKeeperContainer]:
    """A ZooKeeper of this test alone, for tests that pause or stop it."""
    server = start_zookeeper(tmp_path / "zookeeper")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    """Three ZooKeeper servers on loopback (Debian package), for tests where quorum matters."""
    servers = start_ensemble(tmp_path / "ensemble")
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def make_client(zookeeper: ZooKeeper) -> Iterator[ClientFactory]:
    """``make_client(hosts=None, timeout=SESSION_TIMEOUT)``: started KazooClients, stopped after."""
    clients: list[KazooClient] = []

    def make(hosts: str | None = None, timeout: float = SESSION_TIMEOUT, **kwargs: Any) -> Any:
        client = KazooClient(
            hosts=hosts or zookeeper.hosts,
            timeout=timeout,
            connection_retry=dict(FAST_RECONNECT),
            **kwargs,
        )
        clients.append(client)
        try:
            client.start(timeout=10)
        except Exception:
            client.stop()  # or it keeps retrying in the background
            raise
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def zk(make_client: ClientFactory) -> Any:
    """A started client on the session's ZooKeeper."""
    return make_client()
