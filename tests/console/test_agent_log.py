"""This node's agent's instants from its log (pure), and the timeline's phases with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.management.console.agent_log import promotion_instants, read_tail
from broker.management.console.timeline import Timeline


def line(event: str, ts: str, **fields: object) -> str:
    return json.dumps({"ts": ts, "event": event, "component": "agent", **fields})


LINES = [
    line("election_won", "2026-11-25T10:00:00.100000Z"),
    line("agent_promoted", "2026-11-25T10:00:00.150000Z", new_epoch=1),
    "not json",
    line("election_won", "2026-11-25T10:00:05.000000Z"),
    line("election_won", "2026-11-25T10:00:05.200000Z"),
    line("agent_promoted", "2026-11-25T10:00:05.260000Z", new_epoch=2),
    line("election_won", "not a time"),
]
T0 = 1795600800.0  # 2026-11-25T10:00:00Z


def test_the_last_win_before_the_promotion_to_that_epoch() -> None:
    found = promotion_instants(LINES, 2)
    assert found == {"won": pytest.approx(T0 + 5.2), "promoted": pytest.approx(T0 + 5.26)}
    assert promotion_instants(LINES, 1)["won"] == pytest.approx(T0 + 0.1)
    assert promotion_instants(LINES, 3) == {"won": None, "promoted": None}


def test_the_tail_of_a_long_log(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("".join(f"{i:09d}\n" for i in range(1000)))
    tail = read_tail(str(log), 95)
    assert tail[-1] == "000000999" and len(tail) == 9  # the cut first line left out
    assert read_tail(str(tmp_path / "missing")) == []


def test_the_promotion_phase_with_the_agents_instants() -> None:
    timeline = Timeline()
    own, old = "127.0.0.1:5002", "127.0.0.1:5001"
    timeline.observe(T0, "ha_link_up", {"primary": old}, 1, own)
    timeline.observe(T0 + 4.9, "ha_link_down", {"primary": old}, 1, own)
    timeline.observe(T0 + 5.3, "ha_state_changed", {"new": "recovering"}, 2, own)
    done = timeline.observe(T0 + 5.5, "ha_state_changed", {"new": "active"}, 2, own)
    assert done is not None
    done.instants.update(promotion_instants(LINES, 2))
    view = done.view()
    assert view["phases_ms"]["promotion"] == pytest.approx(100.0)
    assert view["until_won_ms"] == pytest.approx(300.0)
    assert view["phases_ms"]["detection"] is None and view["phases_ms"]["election"] is None
    assert view["phases_ms"]["failover"] == pytest.approx(600.0)
