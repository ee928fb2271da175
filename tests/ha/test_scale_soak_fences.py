"""How ``bench/scale_soak.py`` counts fenced brokers: one per broker instance that ended.

Its first run counted every fence three times (the agent's ``agent_fenced``, the kill and
the supervisor's ``broker_process_exited`` of the same pid) and a fault's own exit once more:
it said 5 healthy brokers fenced where the agents had fenced 2. Sans I/O: events in, the
instances that ended out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.ha.scale_soak_module import scale_soak

T0 = 1_800_000_000.0


def _event(at: float, event: str, **fields: Any) -> dict[str, Any]:
    ts = datetime.fromtimestamp(T0 + at, UTC).isoformat().replace("+00:00", "Z")
    return {"ts": ts, "event": event, **fields}


def test_one_fence_is_one_entry_with_its_reason() -> None:
    events = [
        _event(10.0, "agent_fenced", reason="the broker does not answer", pid=101),
        _event(10.01, "broker_killed", reason="fenced: the broker does not answer", pid=101),
        _event(10.05, "broker_process_exited", pid=101, code=-9, ran_s=300.0),
    ]
    [entry] = scale_soak().ended_instances("node2", events, [])
    assert (entry["node"], entry["pid"], entry["code"]) == ("node2", 101, -9)
    assert entry["reason"] == "the broker does not answer"
    assert entry["events"] == ["agent_fenced", "broker_killed", "broker_process_exited"]
    assert not entry["after_a_fault"]


def test_a_faults_exit_is_the_faults_and_a_later_fence_is_not() -> None:
    faults = [(T0 + 200.0, "SIGKILL primary", "node3")]
    events = [
        _event(200.1, "broker_process_exited", pid=201, code=-9, ran_s=500.0),
        _event(300.0, "agent_fenced", reason="promotion of unknown outcome: timed out", pid=202),
        _event(300.01, "broker_killed", reason="fenced: promotion of unknown outcome", pid=202),
        _event(300.1, "broker_process_exited", pid=202, code=-9, ran_s=99.0),
    ]
    ended = scale_soak().ended_instances("node3", events, faults)
    assert [(e["pid"], e["after_a_fault"]) for e in ended] == [(201, True), (202, False)]


def test_a_session_fence_counts_by_its_kill_and_not_when_nothing_was_killed() -> None:
    events = [
        _event(5.0, "zookeeper_session_fence", reason="lease ran out", leading=True),
        _event(5.01, "broker_killed", reason="fenced: ZooKeeper lease ran out", pid=301),
        _event(5.1, "broker_process_exited", pid=301, code=-9, ran_s=4.0),
        # the broker served on its members' grants: no kill, nothing ended
        _event(50.0, "zookeeper_session_fence", reason="lease ran out", broker_on_grants=True),
        # a broker that fenced itself on its lease: its exit alone
        _event(80.0, "broker_process_exited", pid=302, code=3, ran_s=70.0),
    ]
    ended = scale_soak().ended_instances("node1", events, [])
    assert [(e["pid"], e["code"]) for e in ended] == [(301, -9), (302, 3)]
    assert ended[0]["reason"] == "fenced: ZooKeeper lease ran out"


def test_a_restart_to_join_is_no_fence() -> None:
    soak = scale_soak()
    events = [
        _event(9.0, "broker_killed", reason="restart to join: the stores ...", pid=401),
        _event(9.1, "broker_process_exited", pid=401, code=-9, ran_s=20.0),
        _event(20.0, "agent_fenced", reason="the broker does not answer", pid=402),
    ]
    ended = soak.ended_instances("node1", events, [])
    assert [soak.healthy_fenced(e) for e in ended] == [False, True]


def test_faults_are_spread_evenly_and_a_partition_needs_namespaces() -> None:
    soak = scale_soak()
    assert soak.fault_plan(["kill", "kill-node", "partition"], 400.0) == [
        (100.0, "kill"),
        (200.0, "kill-node"),
        (300.0, "partition"),
    ]
    assert soak.parse_args([]).fault_names == ["kill", "restart-backup"]
    assert soak.parse_args(["--faults", ""]).fault_names == []
    for wrong in (["--faults", "kill,flood"], ["--faults", "partition"]):
        with pytest.raises(SystemExit):
            soak.parse_args(wrong)
    assert soak.parse_args(["--faults", "partition", "--netns"]).fault_names == ["partition"]


def test_time_without_a_primary_is_a_fail_overs_only_right_after_a_fault() -> None:
    soak = scale_soak()
    primary = ["node1"] * 10 + [None] * 4 + ["node2"] * 20 + [None] * 3 + ["node2"] * 3
    samples = [(T0 + i, p, 12.0) for i, p in enumerate(primary)]
    faults = [(T0 + 9.5, "kill", "node1")]
    stretches = soak.without_primary(samples, faults)
    assert [(s["at"] - T0, s["s"], s["failover"]) for s in stretches] == [
        (10.0, 4.0, True),
        (34.0, 3.0, False),
    ]
    assert soak.failovers(samples, faults) == [{"fault": "kill", "node": "node1", "s": 4.5}]


def test_an_instance_that_ended_after_the_run_is_the_teardowns() -> None:
    """soak43: the harness stopped the primary's agent after the last sample, and the agent
    stopped during the next promotion fenced it: not a healthy broker fenced by the run."""
    soak = scale_soak()
    events = [
        _event(100.0, "agent_fenced", reason="the broker does not answer", pid=501),
        _event(400.0, "agent_fenced", reason="promotion of unknown outcome: stopping", pid=502),
        _event(400.1, "broker_process_exited", pid=502, code=-9, ran_s=50.0),
    ]
    ended = soak.ended_instances("node1", events, [], run_end=T0 + 399.0)
    assert [(e["pid"], e["after_the_run"]) for e in ended] == [(501, False), (502, True)]
    assert [soak.healthy_fenced(e) for e in ended] == [True, False]
