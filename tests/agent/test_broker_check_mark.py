"""The agent's mark on its own broker (ha_agent.broker_check): its health check names the
agent, its promotions carry the mark, a peer's check does neither, and a broker that does
not know the mark (no ``managed_by`` in ``/api/ha``) is promoted without it."""

from __future__ import annotations

from typing import Any

from ha_agent.broker_check import BrokerCheck


class FakeClient:
    """The ManagementClient calls BrokerCheck makes, recorded; ``ha`` is /api/ha's answer."""

    def __init__(self, ha: dict[str, Any]) -> None:
        self.ha = ha
        self.gets: list[str] = []
        self.posts: list[tuple[str, dict[str, Any]]] = []

    def get(self, path: str) -> Any:
        self.gets.append(path)
        if path == "/api/status":
            return {"ha_state": "ready", "pid": 7, "store_status": "clean"}
        return self.ha

    def post(self, path: str, body: dict[str, Any]) -> Any:
        self.posts.append((path, body))
        return {"state": "active", "epoch": body.get("epoch")}


def check_with(ha: dict[str, Any], agent: str | None) -> tuple[BrokerCheck, FakeClient]:
    check = BrokerCheck("127.0.0.1:1", agent=agent)
    client = FakeClient(ha)
    check.client = client  # type: ignore[assignment]
    return check, client


def test_the_agents_check_names_it_and_its_promotion_carries_the_mark() -> None:
    check, client = check_with({"epoch": 3, "managed_by": "n2"}, agent="n2")
    assert check.check() is not None
    assert client.gets == ["/api/status", "/api/ha?manager=1&queues=summary&agent=n2"]
    check.promote(4, lease=2.0)
    assert client.posts == [
        ("/api/ha/promote", {"cluster_manager": True, "epoch": 4, "agent": "n2", "lease": 2.0})
    ]


def test_a_peers_check_marks_nothing_and_promotes_without_a_mark() -> None:
    check, client = check_with({"epoch": 3, "managed_by": None}, agent=None)
    assert check.check() is not None
    assert client.gets == ["/api/status", "/api/ha?manager=1&queues=summary"]
    check.promote(4)
    assert client.posts == [("/api/ha/promote", {"cluster_manager": True, "epoch": 4})]


def test_a_broker_that_does_not_know_the_mark_is_promoted_without_it() -> None:
    """An older broker answers no ``managed_by`` and refuses unknown fields."""
    check, client = check_with({"epoch": 3}, agent="n2")
    assert check.check() is not None
    check.promote(4)
    assert client.posts == [("/api/ha/promote", {"cluster_manager": True, "epoch": 4})]


def test_the_agent_name_is_quoted_in_the_query() -> None:
    check, client = check_with({"managed_by": "a&b"}, agent="a&b")
    check.check()
    assert client.gets[-1] == "/api/ha?manager=1&queues=summary&agent=a%26b"
