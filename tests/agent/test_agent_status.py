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


def test_the_agents_claim_is_in_its_record() -> None:
    """The console says "electing" from it (issue 30) and the candidates of a fail-over
    order themselves by it (issue 32): the claim's state as the agent set it after its
    check's actions. A record of an agent before the field reads as ""."""
    report = AgentReport("n3", broker_timeout=2.0)
    report.decided("a ready backup (no in-sync set recorded)")
    report.claim = "contending"
    status = report.status(0.0)
    assert status.claim == "contending"
    assert AgentStatus.from_json(status.to_json()) == status
    body = json.loads(status.to_json())
    del body["claim"]
    assert AgentStatus.from_json(json.dumps(body).encode()).claim == ""
