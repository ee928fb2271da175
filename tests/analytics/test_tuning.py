"""Golden rows of the tuning questions and of incomplete evidence, on hand-made logs (one
job run):

- ``n``, a nemesis drill's logs (session timeout 2 s, link heartbeat 1 s): a ``zk-loss``
  cycle in which n1's agent fences its healthy broker (spurious) and n2 is promoted, its
  recovering ended by ``ha-backup-timeout``; then a ``kill`` cycle: n2's broker exits, n3 is
  promoted;
- ``t``: t1's broker exits and t2 is promoted, but the agents' log ends in a truncated line
  (t1's ``agent_fenced``) and the first election is in the rotated ``t.agents.log.1``; its
  brokers log their link heartbeat (1.5 s) and ``ha-backup-timeout`` (5 s), no drill does;
- ``u``: a line whose ``ts`` is a number (malformed in schema 1); ``notes.txt`` (unread).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analytics import job
from tests.analytics.log_lines import line, us, write_logs

pytestmark = pytest.mark.timeout(300)


def agent(ms: float, event: str, node: str, cluster: str, **f: Any) -> dict[str, Any]:
    return line(ms, event, node, "agent", cluster=cluster, **f)


def change(ms: float, node: str, old: str, new: str, epoch: int, **f: Any) -> dict[str, Any]:
    return line(ms, "ha_state_changed", node, "ha", epoch=epoch, old=old, new=new, reason="t", **f)


def nemesis(ms: float, event: str, cluster: str, **f: Any) -> dict[str, Any]:
    return line(ms, event, "nemesis", "nemesis", cluster=cluster, **f)


def cluster_n() -> dict[str, list[dict[str, Any]]]:
    n = "n"
    return {
        "nemesis-drill.log": [
            nemesis(0, "nemesis_cluster_started", n, session_timeout=2.0,
                    link_heartbeat_interval=1.0, took_s=3.0),
            nemesis(5000, "nemesis_cycle_started", n, cycle=1, nemesis="zk-loss", target="n1"),
            nemesis(20000, "nemesis_cycle_started", n, cycle=1, nemesis="kill", target="n2"),
        ],
        "n.agents.log": [
            *[agent(0, "agent_started", x, n, session_timeout=2.0) for x in ("n1", "n2", "n3")],
            agent(1000, "election_won", "n1", n),
            agent(1100, "agent_promoted", "n1", n, new_epoch=1, epoch=1),
            agent(8000, "zookeeper_session_fence", "n1", n, reason="suspended_too_long",
                  leading=True, broker_primary=True),
            agent(8001, "broker_killed", "n1", n, pid=1,
                  reason="fenced: ZooKeeper suspended_too_long"),
            agent(9000, "election_won", "n2", n),
            agent(9100, "agent_promoted", "n2", n, new_epoch=2, epoch=2),
            agent(21000, "broker_process_exited", "n2", n, pid=2, code=-9),
            agent(21200, "election_withdraw", "n2", n, reason="the broker does not answer"),
            agent(21300, "election_won", "n3", n),
            agent(21350, "agent_promoted", "n3", n, new_epoch=3, epoch=3),
        ],
        "n.brokers.log": [
            *[line(100, "ha_started", x, "ha", epoch=0) for x in ("n1", "n2", "n3")],
            change(1050, "n1", "joining", "recovering", 1, expected=[]),
            change(1060, "n1", "recovering", "active", 1, dropped=[]),
            change(1200, "n2", "joining", "ready", 1),
            change(1200, "n3", "joining", "ready", 1),
            change(9050, "n2", "ready", "recovering", 2, expected=["n3:5672"]),
            line(9500, "ha_backup_removal_pending", "n2", "ha", epoch=2, backup="b3",
                 url="n3:5672", reason="not back within ha-backup-timeout"),
            change(9600, "n2", "recovering", "active", 2, dropped=["b3"]),
            change(21320, "n3", "ready", "recovering", 3, expected=[]),
            change(21400, "n3", "recovering", "active", 3, dropped=[]),
        ],
    }  # fmt: skip


def cluster_t() -> dict[str, list[dict[str, Any]]]:
    t = "t"
    return {
        "t.agents.log.1": [
            agent(0, "agent_started", "t1", t, session_timeout=2.0),
            agent(0, "agent_started", "t2", t, session_timeout=2.0),
            agent(1000, "election_won", "t1", t),
            agent(1100, "agent_promoted", "t1", t, new_epoch=1, epoch=1),
        ],
        "t.agents.log": [
            agent(10000, "broker_process_exited", "t1", t, pid=1, code=-9),
            agent(10400, "election_won", "t2", t),
            agent(10420, "agent_promoted", "t2", t, new_epoch=2, epoch=2),
        ],
        "t.brokers.log": [
            *[line(100, "ha_started", x, "ha", epoch=0, state="joining",
                   link_heartbeat_interval=1.5, ha_backup_timeout=5.0) for x in ("t1", "t2")],
            change(1050, "t1", "joining", "recovering", 1),
            change(1060, "t1", "recovering", "active", 1),
            change(1200, "t2", "joining", "ready", 1),
            change(10410, "t2", "ready", "recovering", 2),
            change(10500, "t2", "recovering", "active", 2),
        ],
    }  # fmt: skip


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_logs(tmp_path_factory.mktemp("tuning"), {**cluster_n(), **cluster_t()})
    # the agents' log cut short in its last line: t1's resignation at 10300 ms
    cut = json.dumps(agent(10300, "agent_fenced", "t1", "t", reason="the broker does not answer"))
    with (root / "t.agents.log").open("a") as f:
        f.write(cut[:70])
    bad_ts = {**agent(0, "agent_started", "u1", "u", session_timeout=2.0), "ts": 1763769600.5}
    (root / "u.agent.log").write_text(json.dumps(bad_ts) + "\n")
    (root / "notes.txt").write_text("what I did\n")
    return root


@pytest.fixture(scope="module")
def result(spark: SparkSession, logs: Path, tmp_path_factory: pytest.TempPathFactory) -> job.Result:
    return job.run(spark, [str(logs)], tmp_path_factory.mktemp("tuning-report"))


def rows(result: job.Result) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["cluster"], r["epoch"]): r for r in result.tables["failovers"]}


def test_spurious_zk_loss_with_backup_timeout(result: job.Result) -> None:
    fo = rows(result)[("n", 2)]
    assert (fo["failure_by"], fo["failure_reason"], fo["failure_us"]) == (
        "zookeeper_session_fence", "suspended_too_long", us(8000))  # fmt: skip
    assert (fo["failure_kind"], fo["spurious"], fo["evidence"]) == ("zk-loss", True, "complete")
    assert (fo["detection_ms"], fo["election_ms"], fo["promotion_ms"], fo["recovering_ms"]) == (
        1000.0, 0.0, 50.0, 550.0)  # fmt: skip
    assert (fo["session_timeout_s"], fo["link_heartbeat_s"], fo["detection_per_timeout"]) == (
        2.0, 1.0, 0.5)  # fmt: skip
    # the heartbeat from the nemesis drill's log: these brokers log none
    assert (fo["detection_per_heartbeat"], fo["ha_backup_timeout_s"]) == (1.0, None)
    assert (fo["backups_dropped"], fo["backup_timeout_fired"]) == (1, True)


def test_kill_is_not_spurious(result: job.Result) -> None:
    fo = rows(result)[("n", 3)]
    assert (fo["failure_by"], fo["failure_kind"], fo["spurious"], fo["evidence"]) == (
        "broker_process_exited", "kill", False, "complete")  # fmt: skip
    assert (fo["detection_ms"], fo["election_ms"], fo["failover_ms"]) == (200.0, 100.0, 400.0)
    assert (fo["backups_dropped"], fo["backup_timeout_fired"]) == (0, False)


def test_truncated_line_marks_the_failover_incomplete_without_phases(result: job.Result) -> None:
    fo = rows(result)[("t", 2)]
    # without the check, the lost resignation made detection end at the election (400 ms)
    assert fo["evidence"] == "bad_lines"
    assert fo["failure_by"] == "broker_process_exited" and fo["failure_kind"] == "process_exit"
    assert [fo[f"{p}_ms"] for p in ("detection", "election", "promotion", "failover")] == [
        None, None, None, None]  # fmt: skip
    assert not [r for r in result.tables["phases"] if r["cluster"] == "t"]
    # the settings from the brokers' ha_started, without a drill
    assert (fo["link_heartbeat_s"], fo["ha_backup_timeout_s"]) == (1.5, 5.0)
    assert fo["detection_per_heartbeat"] is None


def test_rotated_log_is_read(result: job.Result) -> None:
    first = rows(result)[("t", 1)]
    assert (first["kind"], first["won_us"], first["promoted_us"]) == (
        "initial", us(1000), us(1100))  # fmt: skip


def test_problems_and_unread_files_reported(result: job.Result, logs: Path) -> None:
    described = [p.describe() for p in result.problems]
    assert described == [
        f"{logs / 't.agents.log'}: 1 truncated line(s)",
        f"{logs / 'u.agent.log'}: 1 malformed line(s)",
    ]
    assert result.unread == [str(logs / "notes.txt")]
    assert len(result.warnings) == 3
    assert result.warnings[2] == (
        "1 fail-over(s) withheld from the percentiles (missing or contradictory evidence): "
        "t e2 (bad_lines)"
    )
    assert result.warnings[0].startswith("1 truncated and 1 malformed line(s) in 2 file(s)")
    assert result.warnings[0].endswith("fail-overs of t1, t2, u1 marked incomplete")
    assert "notes.txt" in result.warnings[1]
    files = (result.out / "tables" / "files.csv").read_text()
    assert f"{logs / 't.agents.log'},4,3,1,0,1,t1 t2" in files


def test_tuning_table_per_configuration(result: job.Result) -> None:
    (row,) = [r for r in result.tables["tuning"] if r["failovers"] == 3]
    assert row["config"] == "session-timeout 2s"
    assert (row["spurious"], row["incomplete"], row["backup_timeout_fired"]) == (1, 1, 1)
    # the largest of the configuration's clusters: n's drill says 1 s, t's brokers 1.5 s
    assert (row["session_timeout_s"], row["link_heartbeat_s"], row["ha_backup_timeout_s"]) == (
        2.0, 1.5, 5.0)  # fmt: skip
    assert row["p50_detection_ms"] == 600.0  # 1000 and 200; t's is unknown
    assert row["detection_p50_per_heartbeat"] == pytest.approx(0.4)
    by_kind = {(r["failure_kind"], r["phase"]): r for r in result.tables["percentiles_by_kind"]}
    # one sample each: no percentiles, the sample
    assert by_kind[("zk-loss", "detection")]["samples_ms"] == "1000"
    assert by_kind[("kill", "detection")]["samples_ms"] == "200"
    assert by_kind[("kill", "detection")]["p50_ms"] is None
    assert ("process_exit", "detection") not in by_kind


def test_report_shows_the_tuning_answers(result: job.Result) -> None:
    page = result.html.read_text()
    for heading in ("What to change", "Per configuration", "kind of failure",
                    "Fail-overs over time", "lines the job could not use"):  # fmt: skip
        assert heading in page, heading
    assert "1 spurious, 1 with incomplete evidence" in page
    assert (result.out / "plots" / "timeline.png").stat().st_size > 5000
