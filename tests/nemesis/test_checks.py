"""The nemesis drill's pure parts, without processes: primary spans and their overlap from
log events, the pause cut, the per-cycle verdict, the table, the requirements, the nft
script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from common.exit_status import ExitStatus
from qpid_ha_cli.nemesis.checks import (
    CycleResult,
    Span,
    overlap_seconds,
    parse_ts,
    primary_spans,
    summary,
)
from qpid_ha_cli.nemesis.cluster import Cluster
from qpid_ha_cli.nemesis.command import missing_requirements, parse_nemeses
from qpid_ha_cli.nemesis.report import table, verdict
from qpid_ha_cli.nemesis.topology import block_rules

T0 = parse_ts("2026-11-24T10:00:00.000000Z")


def ts(seconds: float) -> str:
    whole, frac = divmod(seconds, 1)
    return f"2026-11-24T10:00:{int(whole):02d}.{round(frac * 1e6):06d}Z"


def state(at: float, new: str) -> dict[str, Any]:
    return {"ts": ts(at), "event": "ha_state_changed", "new": new}


def event(at: float, name: str, **fields: Any) -> dict[str, Any]:
    return {"ts": ts(at), "event": name, **fields}


def test_a_span_runs_from_promotion_to_leaving_the_primary_states() -> None:
    broker = [state(1, "recovering"), state(1.5, "active"), state(4, "ready")]
    assert primary_spans("n1", broker, [], [], until=T0 + 60) == [Span("n1", T0 + 1, T0 + 4)]


@pytest.mark.parametrize(
    ("broker_end", "agent_end", "drill_end", "end"),
    [
        (event(5, "ha_fenced"), None, None, 5),
        (event(5, "broker_stopped"), None, None, 5),
        (event(5, "broker_started"), None, None, 5),  # restarted: the old process died
        (None, event(3, "broker_killed", pid=7), None, 3),
        (None, event(3, "broker_process_exited", pid=7), None, 3),
        (None, None, event(2, "broker_sigkilled", target="n1"), 2),
        (None, None, event(2, "node_sigkilled", target="n1"), 2),
        (
            event(5, "ha_fenced"),
            event(6, "broker_killed"),
            event(2.5, "node_sigkilled", target="n1"),
            2.5,
        ),
    ],
)
def test_a_span_ends_at_the_first_sign_the_broker_stopped_serving(
    broker_end: dict[str, Any] | None,
    agent_end: dict[str, Any] | None,
    drill_end: dict[str, Any] | None,
    end: float,
) -> None:
    broker = [state(1, "active"), *([broker_end] if broker_end else [])]
    spans = primary_spans(
        "n1",
        broker,
        [agent_end] if agent_end else [],
        [drill_end] if drill_end else [],
        until=T0 + 60,
    )
    assert spans == [Span("n1", T0 + 1, T0 + end)]


def test_another_nodes_kill_does_not_end_the_span_and_an_open_span_ends_at_until() -> None:
    drill = [event(2, "broker_sigkilled", target="n2")]
    spans = primary_spans("n1", [state(1, "active")], [], drill, until=T0 + 9)
    assert spans == [Span("n1", T0 + 1, T0 + 9)]


def test_time_paused_is_cut_out_of_a_span() -> None:
    drill = [event(2, "broker_paused", target="n1"), event(6, "broker_resumed", target="n1")]
    broker = [state(1, "active"), event(6.01, "ha_fenced")]
    spans = primary_spans("n1", broker, [], drill, until=T0 + 60)
    assert spans == [Span("n1", T0 + 1, T0 + 2), Span("n1", T0 + 6, T0 + 6.01)]


def test_time_a_whole_node_was_paused_is_cut_out_too() -> None:
    drill = [event(2, "node_paused", target="n1"), event(6, "node_resumed", target="n1"),
             event(7, "node_paused", target="n2")]  # fmt: skip
    broker = [state(1, "active"), event(6.01, "ha_fenced")]
    spans = primary_spans("n1", broker, [], drill, until=T0 + 60)
    assert spans == [Span("n1", T0 + 1, T0 + 2), Span("n1", T0 + 6, T0 + 6.01)]


def test_time_the_member_lease_had_lapsed_is_cut_out() -> None:
    # a cut-off old primary stays active until fenced, but serves nothing from its first
    # lapse line to its next serving line (two members lapsing: one gap)
    broker = [state(1, "active"), event(2, "member_lease_lapsed", member="b"),
              event(2.1, "member_lease_lapsed", member="c"), event(3, "member_lease_serving"),
              event(5, "member_lease_lapsed", member="b"), event(9, "ha_fenced")]  # fmt: skip
    spans = primary_spans("n1", broker, [], [], until=T0 + 60)
    assert spans == [Span("n1", T0 + 1, T0 + 2), Span("n1", T0 + 3, T0 + 5)]
    assert overlap_seconds([*spans, Span("n2", T0 + 5.5, T0 + 20)], (T0, T0 + 60)) == 0


def test_a_lapse_counts_from_when_the_grant_ran_out_not_from_its_line() -> None:
    # a partitioned old primary that no client reached noticed its lapse at its next check,
    # 184 ms after its grant ran out (the nemesis drill's partition, 2026-11-30): the new
    # primary's promotion between the two is not two primaries
    lapse = "member_lease_lapsed"
    broker = [state(1, "active"), event(5.2, lapse, member="b", age_ms=184.0),
              event(5.3, lapse, member="c", age_ms=300.0), event(9, "ha_fenced")]  # fmt: skip
    spans = primary_spans("n1", broker, [], [], until=T0 + 60)
    assert len(spans) == 1 and spans[0].start == T0 + 1
    assert spans[0].end == pytest.approx(T0 + 5.0)
    assert overlap_seconds([*spans, Span("n2", T0 + 5.1, T0 + 20)], (T0, T0 + 60)) == 0


def test_overlap_counts_only_two_nodes_at_once_inside_the_window() -> None:
    spans = [Span("n1", 0, 10), Span("n2", 8, 20), Span("n3", 9, 12), Span("n1", 15, 16)]
    # n1+n2 8-10 (2 s, n3 joins 9-10: counted once), n2+n3 10-12, n1+n2 15-16
    assert overlap_seconds(spans, (0, 100)) == pytest.approx(5.0)
    assert overlap_seconds(spans, (9.5, 11)) == pytest.approx(1.5)
    assert overlap_seconds([Span("n1", 0, 5), Span("n1", 3, 8)], (0, 10)) == 0
    assert overlap_seconds([Span("n1", 0, 5), Span("n2", 5, 8)], (0, 10)) == 0


def test_a_cycle_fails_on_a_loss_two_primaries_or_an_error() -> None:
    assert CycleResult(1, "kill", confirmed=10).ok
    assert not CycleResult(1, "kill", lost=1).ok
    assert not CycleResult(1, "kill", two_primaries_s=0.001).ok
    assert not CycleResult(1, "kill", two_primaries_seen=1).ok
    assert not CycleResult(1, "kill", error="PollTimeout: ...").ok


def test_summary_table_and_verdict() -> None:
    results = [
        CycleResult(1, "kill", confirmed=200, outage_ms=120, old_primary="n1", new_primary="n2"),
        CycleResult(
            1,
            "partition",
            confirmed=150,
            duplicated=2,
            outage_ms=5000,
            old_primary="n2",
            new_primary="n3",
        ),
    ]
    s = summary(results)
    assert (s["cycles"], s["failed"], s["confirmed"], s["duplicated"]) == (2, 0, 350, 2)
    assert s["outage_ms_max"] == 5000
    lines = table(results).splitlines()
    assert lines[0].startswith("| cycle | nemesis")
    assert "n2->n3" in lines[3] and lines[3].rstrip(" |").endswith("ok")
    assert verdict(results).startswith("nemesis drill OK: 2 cycles, confirmed 350, lost 0")
    assert verdict([CycleResult(1, "kill", lost=3)]).startswith("nemesis drill FAILED")


def test_requirements_name_what_is_missing() -> None:
    assert missing_requirements(0, lambda tool: f"/usr/sbin/{tool}", lambda path: True) == []
    missing = missing_requirements(
        1000, lambda tool: None if tool == "nft" else tool, lambda path: "zookeeper" not in path
    )
    assert missing == ["root (network namespaces and nft)", "nft", "/usr/share/java/zookeeper.jar"]


def test_nemeses_parse_and_unknown_ones_are_named() -> None:
    assert parse_nemeses("kill, partition") == ("kill", "partition")
    with pytest.raises(ValueError, match="unknown nemesis 'bogus'"):
        parse_nemeses("kill,bogus")


def test_block_rules_drop_both_ways_and_only_the_port_when_given() -> None:
    whole = block_rules(["10.78.0.2", "10.78.0.251"])
    assert "ip saddr { 10.78.0.2, 10.78.0.251 } drop" in whole
    assert "ip daddr { 10.78.0.2, 10.78.0.251 } drop" in whole
    link = block_rules(["10.78.0.1"], port=5672)
    assert "ip saddr { 10.78.0.1 } tcp sport 5672 drop" in link
    assert "ip daddr { 10.78.0.1 } tcp dport 5672 drop" in link


def test_an_interrupted_drill_still_reports_the_cycles_that_finished(tmp_path: Path) -> None:
    """Ctrl-C (or SIGTERM) after some cycles: results.json and the table hold those cycles,
    and the verdict says what failed (issue 10: nothing was written on SIGINT)."""
    from types import SimpleNamespace

    from qpid_ha_cli.nemesis.command import _report
    from qpid_ha_cli.nemesis.run import NemesisSettings

    settings = NemesisSettings(("kill", "partition"), 2, 4.0, 1.0, 50.0, tmp_path)
    done = [CycleResult(1, "kill", sent=10, confirmed=10, received=10, old_primary="n1")]
    run = SimpleNamespace(cluster=SimpleNamespace(lan=SimpleNamespace(prefix="qnm-x")))
    lines: list[str] = []
    status = _report(lines.append, run, settings, done, tmp_path)  # type: ignore[arg-type]
    assert status == ExitStatus.ERROR  # 1 of 4 cycles: not a passed drill
    written = json.loads((tmp_path / "results.json").read_text())
    assert [c["nemesis"] for c in written["cycles"]] == ["kill"]
    assert "kill" in lines[0]


class Answering:
    """A node as the sampler sees it: its state, and its lease's answers in turn (None: it
    did not answer in time)."""

    def __init__(self, name: str, state: str, *serving: bool | None) -> None:
        self.name, self._state, self.answers = name, state, list(serving)

    def state(self) -> str:
        return self._state

    def serving(self, timeout: float = 0.5) -> bool | None:
        return self.answers.pop(0)


def test_the_sampler_counts_a_primary_whose_lease_does_not_answer_as_not_known() -> None:
    cluster = Cluster(Path("/nonexistent"), 4.0, 1.0)

    def sample(*nodes: Answering) -> tuple[list[str], list[str]]:
        cluster.nodes = list(nodes)  # type: ignore[arg-type]
        return cluster.watch_primaries()

    one = sample(Answering("n1", "active"), Answering("n2", "ready"))
    assert one == (["n1"], [])  # one primary: its lease is not asked
    two = sample(Answering("n1", "active", True), Answering("n2", "active", True))
    assert two == (["n1", "n2"], [])
    lapsed = sample(Answering("n1", "active", False), Answering("n2", "recovering", True))
    assert lapsed == (["n2"], [])
    # asked again with a longer deadline before it is not known
    late = sample(Answering("n1", "active", None, True), Answering("n2", "active", True))
    assert late == (["n1", "n2"], [])
    silent = sample(Answering("n1", "active", None, None), Answering("n2", "active", True))
    assert silent == (["n2"], ["n1"])
