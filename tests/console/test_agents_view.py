"""The console's reading of the agents' records (pure parts, and a ZooKeeper that is not
there); the browser tests read a real one."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from broker.management.console.agents_view import AgentsView, cluster_paths, parse_view
from common.polling import free_port, poll_until
from ha_agent.agent_report import AgentReport
from ha_agent.zk_layout import ClusterLayout
from tests.zookeeper import start_zookeeper


def test_the_paths_are_the_agents() -> None:
    layout = ClusterLayout("prod")
    assert cluster_paths("prod") == {
        "root": layout.root,
        "members": layout.members,
        "primary": layout.primary,
        "epoch": layout.epoch,
        "agents": layout.agents,
    }
    with pytest.raises(ValueError, match="bad cluster name"):
        cluster_paths("../x")


def member(node: str, state: str) -> bytes:
    record = {
        "version": 1,
        "node": node,
        "broker_url": f"{node}:5672",
        "ha_state": state,
        "epoch": 3,
        "store_status": "clean",
        "replication_position": 0,
        "broker_id": f"id-{node}",
    }
    return json.dumps(record).encode()


def test_a_view_from_the_records() -> None:
    primary = json.dumps(
        {"version": 1, "node": "n1", "epoch": 3, "broker_url": "n1:5672", "vip": "10.0.0.9/24"}
    ).encode()
    view = parse_view(
        "prod",
        {"n2": member("n2", "ready"), "n1": member("n1", "active"), "n3": b"{broken"},
        primary,
        b"3\n",
    )
    assert view["primary"] == "n1" and view["vip"] == "10.0.0.9/24" and view["epoch"] == 3
    assert [(m["node"], m["state"]) for m in view["members"]] == [("n1", "active"), ("n2", "ready")]
    assert view["error"] == "member n3: not a record"
    empty = parse_view("prod", {}, None, b"not a number")
    assert empty["primary"] is None and empty["epoch"] is None and empty["error"] is None


def test_zookeeper_not_there_is_one_line() -> None:
    view = AgentsView(f"127.0.0.1:{free_port()}", "prod", timeout=0.5)
    asyncio.run(view.refresh())
    assert view.view is not None
    assert view.view["error"].startswith("cannot reach ZooKeeper at 127.0.0.1:")
    assert view._client is None  # stopped, not retrying in the background


def test_a_frozen_zookeeper_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """Reads while kazoo reconnects to a stalled server: each is bounded by the view's
    timeout, so the page says ZooKeeper cannot be reached instead of showing a view read
    before the stall (a plain client.get() waited without limit: 100 s and more)."""
    server = start_zookeeper(tmp_path)
    view = AgentsView(server.hosts, "prod", timeout=1.0)
    try:
        layout = ClusterLayout("prod")
        writer = KazooClient(hosts=server.hosts)
        writer.start(10)
        writer.ensure_path(layout.members)
        writer.create(layout.epoch, b"1")
        writer.stop()
        writer.close()
        # (a loaded machine may need more than one start of 1 s to connect)
        poll_until(lambda: view._read()["error"] is None, 20)
        server.pause()
        for _ in range(3):  # the first finds the connection lost, the next ones reconnect
            read: list[dict[str, Any]] = []
            reader = threading.Thread(target=lambda into=read: into.append(view._read()))
            reader.daemon = True
            reader.start()
            reader.join(30)
            assert read and read[0]["error"], "a read of a frozen ZooKeeper did not return"
        server.resume()
        poll_until(lambda: view._read()["error"] is None, 20)
    finally:
        server.resume()
        view.close()
        server.stop()


def test_the_agents_words_an_engaged_brake_and_without_a_primary_why_each_waits() -> None:
    """Issue 25: the agents' status records (written by ha_agent.agent_report) become the
    page's alert lines: the fence brake while engaged; without a primary, each reason."""
    braked = AgentReport("n2", broker_timeout=2.0)
    for epoch in (1, 2, 3):
        braked.note_primary(epoch, 0.0)
    braked.decided("no safe choice: n1 (the primary's store) is needed: ...")
    quiet = AgentReport("n3", broker_timeout=2.0)
    quiet.decided("a ready backup out of the in-sync set (epoch 3): n2 in it")
    agents: dict[str, bytes | None] = {
        "n2": braked.status(0.0).to_json(),
        "n3": quiet.status(0.0).to_json(),
        "n4": b"{broken",
    }
    view = parse_view("prod", {}, None, b"3", agents)
    since = braked.engaged_since
    assert since.startswith("20") and since.endswith("Z")
    assert view["alerts"] == [
        f"fence brake engaged on n2's agent since {since}: 3 promotions within 60.0 s; a"
        " silent (not gone) primary is given 4.0 s (--broker-timeout 2.0 s) before it is"
        " fenced",
        "no primary: n2's agent: no safe choice: n1 (the primary's store) is needed: ...",
        "no primary: n3's agent: a ready backup out of the in-sync set (epoch 3): n2 in it",
    ]
    primary = json.dumps({"version": 1, "node": "n1", "epoch": 3}).encode()
    assert parse_view("prod", {}, primary, b"3", agents)["alerts"] == view["alerts"][:1]
    assert view["electing"] == []  # neither contends


def test_an_election_under_way_is_read_from_the_agents_records() -> None:
    """Issue 30: without a primary record, an agent whose record says it contends (or won)
    makes the page say "electing", with its reason; once a primary is recorded, not."""
    contending = AgentReport("n2", broker_timeout=2.0)
    contending.decided("a ready backup in the in-sync set (epoch 3)")
    contending.claim = "contending"
    waiting = AgentReport("n3", broker_timeout=2.0)
    waiting.decided("the broker is still catching up")
    waiting.claim = "idle"
    agents: dict[str, bytes | None] = {
        "n2": contending.status(0.0).to_json(),
        "n3": waiting.status(0.0).to_json(),
    }
    view = parse_view("prod", {}, None, b"3", agents)
    assert view["electing"] == [
        {
            "node": "n2",
            "election": "contending",
            "reason": "a ready backup in the in-sync set (epoch 3)",
        }
    ]
    primary = json.dumps({"version": 1, "node": "n2", "epoch": 4}).encode()
    assert parse_view("prod", {}, primary, b"4", agents)["electing"] == []


def test_every_cluster_on_the_zookeeper_with_its_primarys_node() -> None:
    """Several clusters on one ZooKeeper (issue 32): each one's primary record, and how
    many primaries each node runs; a cluster without a primary is listed without one."""

    def record(node: str, epoch: int) -> str:
        return json.dumps({"version": 1, "node": node, "epoch": epoch, "broker_url": f"{node}:1"})

    view = parse_view(
        "c0",
        {"a": member("a", "active")},
        record("a", 2).encode(),
        b"2",
        others={"c1": record("b", 5).encode(), "c2": None, "c3": record("a", 1).encode()},
    )
    assert [(c["cluster"], c["primary"], c["primary_epoch"]) for c in view["clusters"]] == [
        ("c0", "a", 2),
        ("c1", "b", 5),
        ("c2", None, None),
        ("c3", "a", 1),
    ]
    assert view["per_node"] == {"a": 2, "b": 1}
