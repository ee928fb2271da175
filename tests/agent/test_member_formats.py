"""The primary's agent tells its broker the members' replication formats
(ha_agent.member_formats): once per change, again for a new broker, again after a failure."""

from __future__ import annotations

from typing import Any

from broker.management.client import ManagementError
from ha_agent.member_formats import MemberFormats
from ha_agent.membership import Member


class Broker:
    """Records what it was told; fails while ``down``."""

    def __init__(self) -> None:
        self.told: list[dict[str, str]] = []
        self.down = False

    def tell_member_formats(self, formats: dict[str, str]) -> dict[str, Any]:
        if self.down:
            raise ManagementError("connection refused", unreachable=True)
        self.told.append(formats)
        return {"format": 1, "why": "member n3 speaks no higher"}


def members(**formats: str) -> dict[str, Member]:
    return {
        node: Member(node, f"{node}:5672", replication_formats=text)
        for node, text in formats.items()
    }


def test_told_once_per_change_and_again_for_a_new_broker_or_after_a_failure() -> None:
    broker, teller = Broker(), MemberFormats()
    cluster = members(n1="1-2", n3="1-1")
    assert teller.tell(broker, "b1", cluster)
    assert not teller.tell(broker, "b1", cluster)  # nothing new
    assert broker.told == [{"n1": "1-2", "n3": "1-1"}]
    assert teller.tell(broker, "b1-restarted", cluster)  # a new broker knows nothing
    broker.down = True
    upgraded = members(n1="1-2", n3="1-2")
    assert not teller.tell(broker, "b1-restarted", upgraded)
    broker.down = False
    assert teller.tell(broker, "b1-restarted", upgraded)  # tried again at the next check
    assert broker.told[-1] == {"n1": "1-2", "n3": "1-2"}
    assert not teller.tell(broker, "b1-restarted", {})  # no records read: nothing to say
