"""A broker a qpid-ha-agent manages refuses a promotion that is not its agent's.

The rule (:mod:`broker.management.promote_guard`) alone, then ``GET /api/ha`` and
``POST /api/ha/promote`` through the management app with a stand-in HA role (the real
broker's refusal, end to end: tests/cli/test_manage.py and
tests/agent/test_agent_hand_promote.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient

from broker.management.promote_guard import (
    PromoteGuard,
    check_agent_name,
    commit_refusal,
    promote_refusal,
)
from common.slices import Steps
from tests.management.support import GUEST, FakeBroker, FakeOptions, serve


# -- the rule ---------------------------------------------------------------------------
def test_a_broker_no_agent_manages_is_promoted_by_anyone() -> None:
    assert promote_refusal(None, None, False) is None  # Pacemaker's OCF agent, a test rig
    assert promote_refusal(None, "n1", False) is None
    assert promote_refusal(None, None, True) is None


def test_a_managed_broker_refuses_a_promotion_without_the_agents_mark() -> None:
    reason = promote_refusal("n2", None, False)
    assert reason is not None
    assert "qpid-ha-agent of node n2" in reason  # names the agent ...
    assert "--force" in reason and "stop the agents' primary" in reason  # ... and the way out
    assert "\n" not in reason  # one line


def test_the_agents_mark_or_force_promotes_a_managed_broker() -> None:
    assert promote_refusal("n2", "n2", False) is None
    assert promote_refusal("n2", None, True) is None


def test_the_guard_is_sticky_and_an_agents_promotion_marks_it() -> None:
    guard = PromoteGuard()
    assert guard.refusal(None, False) is None
    guard.agent_seen("n2")
    assert guard.refusal(None, False) is not None
    assert guard.refusal(None, False) is not None  # still: only a restart forgets
    assert guard.refusal("n2", False) is None
    fresh = PromoteGuard()
    assert fresh.refusal("n3", False) is None  # the agent's own promotion ...
    assert fresh.managed_by == "n3"  # ... marks the broker too
    assert fresh.refusal(None, False) is not None
    guard.agent_seen("n4")  # an agent of another name took over: the name follows
    assert guard.managed_by == "n4"


@pytest.mark.parametrize("name", ["", " ", "a b", "n\n1", "x" * 256, 7, None, ["n1"]])
def test_an_agent_name_is_printable_without_white_space(name: Any) -> None:
    assert check_agent_name(name) is None


def test_agent_names_as_the_agent_checks_them_pass() -> None:
    assert check_agent_name("node-2.dc1_a") == "node-2.dc1_a"
    assert check_agent_name("x" * 255) == "x" * 255


# -- the management API ---------------------------------------------------------------
class State(Enum):
    READY = "ready"
    ACTIVE = "active"


@dataclass
class FakeHa:
    """The HA role as the handlers call it: promote, grant_lease, status."""

    state: State = State.READY
    epoch: int = 3
    broker_id: str = "b-1"
    promotions: list[tuple[int | None, list[str] | None]] = field(default_factory=list)
    ended: list[frozenset[int]] = field(default_factory=list)
    commits: list[tuple[int, list[str]]] = field(default_factory=list)

    def status(self) -> dict[str, Any]:
        return {"state": self.state.value, "epoch": self.epoch}

    def status_steps(self, rows: bool = True) -> Steps[dict[str, Any]]:
        yield  # one slice, as HaBroker's status in slices
        return self.status()

    async def promote(
        self,
        epoch: int | None,
        in_sync: list[str] | None,
        store_named: bool = False,
        ended: frozenset[int] = frozenset(),
    ) -> State:
        self.promotions.append((epoch, in_sync))
        self.ended.append(ended)
        self.state = State.ACTIVE
        if epoch is not None:
            self.epoch = epoch
        return self.state

    def grant_lease(self, seconds: float) -> None:
        pass

    def commit_in_sync(self, epoch: int, members: list[str]) -> list[str]:
        self.commits.append((epoch, members))
        return []

    def in_sync_status(self) -> dict[str, Any]:
        return {"pending_removal": []}


@dataclass
class HaBroker(FakeBroker):
    ha: FakeHa = field(default_factory=FakeHa)


Client = TestClient[web.Request, web.Application]


async def get_ha(client: Client, query: str = "") -> dict[str, Any]:
    response = await client.get(f"/api/ha{query}", headers=GUEST)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


async def promote(client: Client, **body: Any) -> tuple[int, Any]:
    response = await client.post(
        "/api/ha/promote", json={"cluster_manager": True, **body}, headers=GUEST
    )
    return response.status, await response.json()


def test_a_broker_no_agent_read_is_promoted_without_a_mark() -> None:
    """The Pacemaker OCF agent's ``qpid-ha --cluster-manager promote``; a designated agent's
    peer checks (manager=1 without agent) do not mark the broker."""
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        assert (await get_ha(client))["managed_by"] is None
        assert (await get_ha(client, "?manager=1"))["managed_by"] is None
        answer = {"state": "active", "epoch": 4, "pid": os.getpid(), "broker_id": "b-1"}
        assert await promote(client, epoch=4) == (200, answer)  # the instance promoted

    serve(broker, scenario)
    assert broker.ha.promotions == [(4, None)]


def test_a_broker_its_agent_read_refuses_a_promotion_by_hand() -> None:
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        assert (await get_ha(client, "?manager=1&agent=n2"))["managed_by"] == "n2"
        assert (await get_ha(client))["managed_by"] == "n2"  # sticky, any reader sees it
        with structlog.testing.capture_logs() as logs:
            status, answer = await promote(client, epoch=4)
        assert status == 409
        assert "qpid-ha-agent of node n2" in answer["reason"]
        refused = [e for e in logs if e["event"] == "ha_promote_refused"]
        assert [(e["log_level"], e["managed_by"]) for e in refused] == [("warning", "n2")]

    serve(broker, scenario)
    assert broker.ha.promotions == []  # nothing was asked of the role


def test_the_agents_promotion_and_a_forced_one_go_through() -> None:
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        await get_ha(client, "?manager=1&agent=n2")
        assert (await promote(client, epoch=4, agent="n2"))[0] == 200
        with structlog.testing.capture_logs() as logs:
            assert (await promote(client, epoch=5, force=True))[0] == 200
        forced = [e for e in logs if e["event"] == "ha_promote_forced"]
        assert [(e["log_level"], e["managed_by"]) for e in forced] == [("warning", "n2")]

    serve(broker, scenario)
    assert broker.ha.promotions == [(4, None), (5, None)]


def test_an_agents_promotion_marks_a_broker_not_read_yet() -> None:
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        assert (await promote(client, epoch=4, agent="n1"))[0] == 200
        assert (await get_ha(client))["managed_by"] == "n1"
        assert (await promote(client, epoch=5))[0] == 409

    serve(broker, scenario)


@pytest.mark.parametrize(
    ("body", "word"),
    [({"agent": ""}, "agent"), ({"agent": "a b"}, "agent"), ({"agent": 1}, "agent"),
     ({"force": "yes"}, "force"), ({"force": 1}, "force")],
)  # fmt: skip
def test_a_bad_mark_or_force_is_400(body: dict[str, Any], word: str) -> None:
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        status, answer = await promote(client, **body)
        assert status == 400 and word in answer["reason"]

    serve(broker, scenario)
    assert broker.ha.promotions == []


@pytest.mark.parametrize(
    "ended", [3, "3", [3, "4"], [True], [-1], [2**63], list(range(17)), {"3": 3}, [3.0]]
)
def test_bad_ended_epochs_are_400(ended: Any) -> None:
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        status, answer = await promote(client, epoch=4, ended_epochs=ended)
        assert status == 400 and "ended_epochs" in answer["reason"]

    serve(broker, scenario)
    assert broker.ha.promotions == []


def test_ended_epochs_reach_the_role() -> None:
    """Issue 26: the older epochs whose primary's process its agent saw reaped."""
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        assert (await promote(client, epoch=4, ended_epochs=[3, 2, 3]))[0] == 200
        assert (await promote(client, epoch=5, ended_epochs=[]))[0] == 200

    serve(broker, scenario)
    assert broker.ha.ended == [frozenset({2, 3}), frozenset()]


def test_a_bad_agent_name_in_the_health_check_is_400_and_marks_nothing() -> None:
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        response = await client.get("/api/ha?manager=1&agent=", headers=GUEST)
        assert response.status == 400
        assert (await get_ha(client))["managed_by"] is None

    serve(broker, scenario)


def test_without_cluster_manager_the_answer_is_403_before_the_guard() -> None:
    broker = HaBroker()

    async def scenario(client: Client) -> None:
        await get_ha(client, "?manager=1&agent=n2")
        response = await client.post("/api/ha/promote", json={"force": True}, headers=GUEST)
        assert response.status == 403

    serve(broker, scenario)


def test_a_broker_started_with_ha_agent_is_managed_from_its_start() -> None:
    broker = HaBroker(options=FakeOptions(ha_agent="n2"))

    async def scenario(client: Client) -> None:
        assert (await get_ha(client))["managed_by"] == "n2"
        assert (await promote(client, epoch=4))[0] == 409
        assert (await promote(client, epoch=4, agent="n2"))[0] == 200

    serve(broker, scenario)


def test_a_managed_primary_refuses_an_in_sync_commit_by_hand() -> None:
    """Issue 26 item 2: a set committed by hand that leaves out a member ZooKeeper holds
    releases confirms that member may be promoted without (the promotion model found it).
    The agent's commit carries its mark; --force overrides; an unmanaged broker (the OCF
    agent) commits as before."""
    assert commit_refusal(None, None, False) is None
    assert commit_refusal("n2", "n2", False) is None and commit_refusal("n2", None, True) is None
    reason = commit_refusal("n2", None, False)
    assert reason is not None and "qpid-ha-agent of node n2" in reason and "--force" in reason
    broker = HaBroker()

    async def commit(client: Client, **body: Any) -> tuple[int, Any]:
        body = {"cluster_manager": True, "epoch": 3, "members": ["b1"], **body}
        response = await client.post("/api/ha/in-sync", json=body, headers=GUEST)
        return response.status, await response.json()

    async def scenario(client: Client) -> None:
        assert (await commit(client))[0] == 200  # nobody manages it yet
        await get_ha(client, "?manager=1&agent=n2")
        with structlog.testing.capture_logs() as logs:
            status, answer = await commit(client)
        assert status == 409 and "keeps its in-sync set in ZooKeeper" in answer["reason"]
        refused = [e for e in logs if e["event"] == "ha_in_sync_refused"]
        assert [(e["log_level"], e["managed_by"]) for e in refused] == [("warning", "n2")]
        assert (await commit(client, agent="n2"))[0] == 200
        assert (await commit(client, force=True))[0] == 200
        assert (await commit(client, force="yes"))[0] == 400

    serve(broker, scenario)
    assert len(broker.ha.commits) == 3
