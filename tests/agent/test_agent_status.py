"""The agent's status record (issue 25: the fence brake visible to operators), sans I/O."""

from __future__ import annotations

import json

import pytest

from ha_agent.agent_report import AgentReport
from ha_agent.agent_status import AgentStatus, BrakeStatus, brake_text


def test_the_brake_engages_with_a_cascade_and_its_record_says_so_then_releases() -> None:
    report = AgentReport("n1", broker_timeout=2.0)
    report.note_primary(4, 0.0)
    report.note_primary(5, 1.0)
    assert report.status(1.0).brake == BrakeStatus(
        engaged=False, promotions=2, window_s=60.0, patience_s=2.0, broker_timeout_s=2.0
    )
    report.note_primary(6, 2.0)  # a third promotion within the minute: a cascade
    engaged = report.status(2.0)
    assert engaged.brake.engaged and engaged.brake.since == report.engaged_since != ""
    assert (engaged.brake.promotions, engaged.brake.patience_s) == (3, 4.0)
    assert brake_text(engaged).startswith("fence brake engaged on n1's agent since ")
    released = report.status(70.0)  # the promotions left the window
    assert not released.brake.engaged and released.brake.since == ""
    assert brake_text(released) == ""


def test_the_record_reads_back_and_ignores_fields_it_does_not_know() -> None:
    status = AgentStatus("n2", "waiting", BrakeStatus(True, "2026-11-29T08:00:00.000000Z", 3))
    assert AgentStatus.from_json(status.to_json()) == status
    body = json.loads(status.to_json())
    body["later"] = {"field": 1}
    body["brake"]["later"] = 2
    assert AgentStatus.from_json(json.dumps(body).encode()) == status
    for bad in (b"{", b"[]", b'{"version": 1, "node": "a b"}', b'{"version": 9, "node": "n"}'):
        with pytest.raises(ValueError):
            AgentStatus.from_json(bad)


def test_where_the_agent_stands_in_the_election_is_in_its_record() -> None:
    """The console says "electing" from it (issue 30): contending once the agent contends,
    until it withdraws; leading once it won; idle otherwise. A record of an agent before the
    field reads as ""."""
    from ha_agent.promotion import Action, Decision, Step

    contend = Decision((Action(Step.CONTEND, "a ready backup"),), "a ready backup")
    withdraw = Decision((Action(Step.WITHDRAW, "the broker is joining"),), "joining")
    nothing = Decision((), "the broker is joining")
    assert contend.election_after("idle") == "contending"
    assert nothing.election_after("contending") == "contending"  # still in the election
    assert withdraw.election_after("contending") == "idle"
    assert nothing.election_after("leading") == "leading"
    assert nothing.election_after("idle") == "idle"
    report = AgentReport("n3", broker_timeout=2.0)
    report.decided("a ready backup (no in-sync set recorded)", "contending")
    status = report.status(0.0)
    assert status.election == "contending"
    assert AgentStatus.from_json(status.to_json()) == status
    body = json.loads(status.to_json())
    del body["election"]
    assert AgentStatus.from_json(json.dumps(body).encode()).election == ""
