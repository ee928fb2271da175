"""The pure cores behind "never a silent wrong answer" (no Spark): the clock offsets that
cause and effect show (:func:`analytics.clocks.estimate`), the runs of one cluster name
(:func:`analytics.runs.split`) and the agents' logs missing from the input
(:mod:`analytics.missing_logs`). The job on real drill logs: ``test_drill_truth.py``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from analytics.clocks import TOLERANCE_US, Pair, estimate
from analytics.missing_logs import NodeLogs, agentless, warnings
from analytics.runs import Unit, split

S = 1_000_000


def link_ups(offsets: dict[str, int], delay: int = 30_000) -> list[Pair]:
    """Each node promoted in turn and the two others linking to it ``delay`` later, each
    time as its own clock (true time + offset) logs it."""
    nodes = sorted(offsets)
    out = []
    for i, primary in enumerate(nodes * 2):
        at = (i + 1) * 10 * S
        for backup in nodes:
            if backup != primary:
                out.append(Pair("ha_link_up", ("c", primary), at + offsets[primary],
                                ("c", backup), at + delay + offsets[backup]))  # fmt: skip
    return out


def test_agreeing_clocks_change_nothing() -> None:
    found = estimate(link_ups({"n1": 0, "n2": 0, "n3": 0}))
    assert (found.offsets, found.unresolved, found.warnings) == ({}, set(), [])


def test_a_node_2_s_ahead_is_corrected_by_about_2_s() -> None:
    found = estimate(link_ups({"n1": 0, "n2": 2 * S, "n3": 0}))
    assert set(found.offsets) == {("c", "n2")} and not found.unresolved
    assert abs(found.offsets[("c", "n2")] + 2 * S) <= 50_000
    (line,) = found.warnings
    assert line.startswith("clock: n2 (cluster c) is about 2.0") and "ahead of" in line


@given(st.integers(min_value=-5 * S, max_value=5 * S))
def test_one_clock_off_by_any_amount_is_placed_within_tolerance_and_delay(off: int) -> None:
    # what is left after the correction: at most the tolerance and the link's delay (an
    # offset under them shows no effect before its cause: it is noise, left alone)
    found = estimate(link_ups({"n1": 0, "n2": 0, "n3": off}))
    assert not found.unresolved and set(found.offsets) <= {("c", "n3")}
    assert abs(found.offsets.get(("c", "n3"), 0) + off) <= TOLERANCE_US + 30_000


def test_two_nodes_that_only_contradict_each_other_are_unresolved() -> None:
    pairs = [Pair("client_reconnected", ("c", "n1"), 10 * S, ("c", "d"), 7 * S)]
    found = estimate(pairs)
    assert found.unresolved == {("c", "n1"), ("c", "d")} and found.offsets == {}
    (line,) = found.warnings
    assert "nothing else tells which clock is off" in line and "withheld" in line


def unit(file: str, first: int, last: int, *ids: tuple[int, str], run: str = "") -> Unit:
    return Unit(file, "nemesis", run, first, last, tuple(ids))


def test_one_cluster_id_a_name_is_left_alone() -> None:
    units = [unit("/r1/n1/qpidd.log", 0, 9, (1, "aaaaaaaa-1")), unit("/r1/drill.log", 0, 9)]
    assert split(units).rows == []


def test_two_runs_of_one_name_each_line_placed() -> None:
    units = [
        unit("/r1/n1/qpidd.log", 0, 90, (5, "aaaaaaaa-1")),
        unit("/r1/n1/agent.log", 0, 90),  # beside a file that names its run
        unit("/r1/drill.log", 0, 90, run="x"),  # above its nodes' directories
        unit("/r2/n1/qpidd.log", 100, 190, (105, "bbbbbbbb-2")),
        unit("/r2/n1/agent.log", 100, 190),
        unit("/logs/drill.log", 100, 190, run="y"),  # elsewhere: by its time
    ]
    found = split(units)
    placed = {(file, run): name for file, _c, run, _f, name in found.rows}
    assert placed == {
        ("/r1/n1/qpidd.log", ""): "nemesis@aaaaaaaa", ("/r1/n1/agent.log", ""): "nemesis@aaaaaaaa",
        ("/r1/drill.log", "x"): "nemesis@aaaaaaaa", ("/r2/n1/qpidd.log", ""): "nemesis@bbbbbbbb",
        ("/r2/n1/agent.log", ""): "nemesis@bbbbbbbb", ("/logs/drill.log", "y"): "nemesis@bbbbbbbb",
    }  # fmt: skip
    (line,) = found.warnings
    assert "cluster name 'nemesis' holds 2 clusters" in line and "placed in none" not in line


def logs(cluster: str, node: str, *sources: str) -> NodeLogs:
    return NodeLogs(cluster, node, frozenset(sources))


def test_a_node_whose_agent_log_is_missing_is_named_with_its_failovers() -> None:
    nodes = [
        logs("c", "n1", "broker", "agent"), logs("c", "n2", "broker"),
        logs("c", "n3", "broker", "agent"), logs("c", "drill", "drill"),
        # brokers alone: no agent log was given, none is missing
        logs("b", "n1", "broker"), logs("b", "n2", "broker"),
        # an agent whose broker logged nothing (a node lost before it started): no broker
        logs("d", "n1", "broker", "agent"), logs("d", "n2", "agent"),
    ]  # fmt: skip
    missing = agentless(nodes)
    assert missing == [("c", "n2")]
    rows = [
        {"cluster": "c", "epoch": 2, "kind": "failover", "old_node": "n1", "node": "n2"},
        {"cluster": "c", "epoch": 3, "kind": "failover", "old_node": "n2", "node": "n3"},
        {"cluster": "c", "epoch": 4, "kind": "teardown", "old_node": "n3", "node": "n2"},
        {"cluster": "b", "epoch": 2, "kind": "failover", "old_node": "n1", "node": "n2"},
    ]
    (line,) = warnings(missing, rows)
    assert line.startswith("no agent log of n2 (cluster c)"), line
    assert "from it e3: detection and election withheld" in line, line
    assert "to it e2: election and promotion withheld" in line and "e4" not in line, line


def test_older_brokers_two_runs_of_one_name_told_apart_by_the_drills_run_ids() -> None:
    """No cluster id (brokers older than it): a promotion to epoch 2 after epoch 3 says two
    clusters; the nemesis drills' run ids tell them apart (each drill client's own run id,
    inside its nemesis run's lines, is that run's); the nodes' files go with the drill's
    log in the directory above them."""
    units = [
        Unit("/r1/drill.log", "old", "nem1", 0, 90),
        Unit("/r1/drill.log", "old", "client1", 10, 10),
        Unit("/r1/n1/qpidd.log", "old", "", 0, 90, promotions=((5, 1), (50, 3))),
        Unit("/r1/n1/agent.log", "old", "", 0, 90),
        Unit("/r2/drill.log", "old", "nem2", 100, 190),
        Unit("/r2/drill.log", "old", "client2", 110, 110),
        Unit("/r2/n1/qpidd.log", "old", "", 100, 190, promotions=((105, 1), (150, 2))),
    ]
    found = split(units)
    placed = {(file, run): name for file, _c, run, _f, name in found.rows}
    assert placed == {
        ("/r1/drill.log", "nem1"): "old@nem1", ("/r1/drill.log", "client1"): "old@nem1",
        ("/r1/n1/qpidd.log", ""): "old@nem1", ("/r1/n1/agent.log", ""): "old@nem1",
        ("/r2/drill.log", "nem2"): "old@nem2", ("/r2/drill.log", "client2"): "old@nem2",
        ("/r2/n1/qpidd.log", ""): "old@nem2",
    }  # fmt: skip
    (line,) = found.warnings
    assert "epoch 1 promoted after epoch 3" in line and "read as 2 runs" in line, line


def test_epochs_that_only_rise_are_one_cluster_whatever_the_run_ids() -> None:
    """Two drills against one cluster: two run ids, epochs rising: nothing split."""
    units = [
        Unit("/l/drill-a.log", "c", "a", 0, 50),
        Unit("/l/drill-b.log", "c", "b", 60, 90),
        Unit("/l/n1/qpidd.log", "c", "", 0, 90, promotions=((5, 1), (55, 2), (70, 3))),
    ]
    assert split(units).rows == [] and split(units).warnings == []


def test_epochs_that_start_again_without_run_ids_are_named_not_split() -> None:
    units = [
        Unit("/a/n1/qpidd.log", "c", "", 0, 50, promotions=((5, 1), (20, 2))),
        Unit("/b/n1/qpidd.log", "c", "", 60, 90, promotions=((65, 1),)),
    ]
    found = split(units)
    (line,) = found.warnings
    assert (
        found.rows == [] and "'c' holds several clusters (epoch 1 promoted after epoch 2)" in line
    )
    assert "fail-overs are mixed" in line
