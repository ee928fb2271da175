"""Three clusters in one log directory, written line by line (the golden rows of
tests/analytics/test_transforms.py; test_cluster_mode.py runs the same directory on a
standalone cluster):

- ``a`` (agents, session timeout 2 s, a drill): first election of a1 (epoch 1), then two
  fail-overs: a1's broker dies and its agent resigns (epoch 2, a2), a2's broker dies and its
  agent withdraws (epoch 3, a3); the drill saw a confirm gap in the first and a reconnection
  in the second, and lost 2 confirmed messages;
- ``b`` (agents, session timeout 4 s): b1 is primary, its node freezes (last event at
  4000 ms), b3 is promoted from joining while b2 was ready, b1 is killed on resume; its
  brokers log their cluster's name (``--ha-cluster-name``), the others' log null;
- no agents (so cluster ``""``): c1 primary, c2 promoted while c1 still logs as primary;
- a ZooKeeper line (not JSON) and ``ignored.txt`` (not matching the glob).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from tests.analytics.log_lines import line, write_logs


def agent(ms: float, event: str, node: str, cluster: str, **f: Any) -> dict[str, Any]:
    return line(ms, event, node, "agent", cluster=cluster, **f)


def change(ms: float, node: str, old: str, new: str, epoch: int) -> dict[str, Any]:
    return line(ms, "ha_state_changed", node, "ha", epoch=epoch, old=old, new=new, reason="t")


def started(ms: float, node: str) -> dict[str, Any]:
    return line(ms, "ha_started", node, "ha", epoch=0, state="joining")


def catches_up(ms: float, node: str, epoch: int) -> list[dict[str, Any]]:
    """A joining backup's catch-up at ``ms`` and ready 100 ms later."""
    return [
        change(ms, node, "joining", "catch-up", epoch),
        change(ms + 100, node, "catch-up", "ready", epoch),
    ]


def cluster_a() -> dict[str, list[dict[str, Any]]]:
    a = "a"
    files: dict[str, list[dict[str, Any]]] = {
        "a1.agent.log": [
            agent(0, "agent_started", "a1", a, session_timeout=2.0),
            agent(1000, "election_won", "a1", a),
            agent(1250, "agent_promoted", "a1", a, new_epoch=1, epoch=1),
            agent(10000, "broker_process_exited", "a1", a, pid=1, code=-9),
            agent(10001, "broker_state", "a1", a, ha_state=None, reason="refused"),
            agent(10300, "agent_fenced", "a1", a, reason="the broker does not answer"),
        ],
        "a2.agent.log": [
            agent(0, "agent_started", "a2", a, session_timeout=2.0),
            agent(10450, "election_won", "a2", a),
            agent(10520, "agent_promoted", "a2", a, new_epoch=2, epoch=2),
            agent(20000, "broker_process_exited", "a2", a, pid=2, code=-9),
            agent(20500, "election_withdraw", "a2", a, reason="the broker does not answer"),
        ],
        "a3.agent.log": [
            agent(0, "agent_started", "a3", a, session_timeout=2.0),
            agent(20600, "election_won", "a3", a),
            agent(20750, "agent_promoted", "a3", a, new_epoch=3, epoch=3),
        ],
        "a1.broker.log": [
            started(100, "a1"),
            line(150, "connection_opened", "a1", "amqp", peer="127.0.0.1:1"),
            change(1200, "a1", "joining", "recovering", 1),
            change(1210, "a1", "recovering", "active", 1),
            started(11500, "a1"),
            *catches_up(11600, "a1", 2),
        ],
        "a2.broker.log": [
            started(100, "a2"),
            *catches_up(1300, "a2", 1),
            change(10500, "a2", "ready", "recovering", 2),
            change(10600, "a2", "recovering", "active", 2),
        ],
        "a3.broker.log": [
            started(100, "a3"),
            *catches_up(1300, "a3", 1),
            change(10650, "a3", "ready", "catch-up", 2),
            change(10700, "a3", "catch-up", "ready", 2),
            change(20700, "a3", "ready", "recovering", 3),
            change(20900, "a3", "recovering", "active", 3),
        ],
        "drill.log": [
            line(1500, "drill_started", "d", "drill", cluster=a, scenario="kill", rate=100),
            line(10800, "confirm_gap", "d", "drill", cluster=a, gap_ms=800.0,
                 last_confirm_ts=line(9990, "x", "d", "drill")["ts"],
                 first_confirm_ts=line(10790, "x", "d", "drill")["ts"]),
            line(21000, "client_reconnected", "d", "drill", cluster=a, epoch=3,
                 role="publisher", outage_ms=1234.0),
            line(30000, "drill_finished", "d", "drill", cluster=a, sent=510, confirmed=500,
                 received=498, lost=2, duplicated=0),
        ],
    }  # fmt: skip
    return files


def cluster_b() -> dict[str, list[dict[str, Any]]]:
    b = "b"
    return {
        "b.agents.log": [
            *[agent(0, "agent_started", n, b, session_timeout=4.0) for n in ("b1", "b2", "b3")],
            agent(1000, "election_won", "b1", b),
            agent(1150, "agent_promoted", "b1", b, new_epoch=1, epoch=1),
            agent(4000, "broker_state", "b1", b, ha_state="active", epoch=1),
            agent(9000, "election_won", "b3", b),
            agent(9150, "agent_promoted", "b3", b, new_epoch=2, epoch=2),
            agent(12000, "zookeeper_session_fence", "b1", b, reason="session_lost"),
            agent(12001, "broker_killed", "b1", b, pid=3, reason="fence"),
        ],
        # these brokers name their cluster (--ha-cluster-name), a1's and c1's do not
        "b.brokers.log": [{**e, "cluster": b} for e in [
            started(100, "b1"), started(100, "b2"), started(100, "b3"),
            change(1100, "b1", "joining", "recovering", 1),
            change(1110, "b1", "recovering", "active", 1),
            *catches_up(1300, "b2", 1),
            change(9100, "b3", "joining", "recovering", 2),
            change(9200, "b3", "recovering", "active", 2),
        ]],
    }  # fmt: skip


def cluster_c() -> dict[str, list[dict[str, Any]]]:
    return {
        "c1.broker.log": [
            started(0, "c1"),
            change(100, "c1", "joining", "recovering", 1),
            change(110, "c1", "recovering", "active", 1),
            line(6000, "ha_primary_refused", "c1", "ha", epoch=1, address="x", reason="older"),
            line(8000, "broker_stopped", "c1", "broker", epoch=1, uptime=8.0),
        ],
        "c2.broker.log": [
            started(0, "c2"),
            change(200, "c2", "joining", "catch-up", 1),
            change(300, "c2", "catch-up", "ready", 1),
            change(5000, "c2", "ready", "recovering", 2),
            change(5100, "c2", "recovering", "active", 2),
        ],
        "not-json.log": [],
    }


def write(root: Path) -> Path:
    """The three clusters' logs and the two files that are not events under ``root``."""
    write_logs(root, {**cluster_a(), **cluster_b(), **cluster_c()})
    (root / "zookeeper.log").write_text("2026-11-22 00:00:00,000 [myid:] - INFO  not JSON\n")
    (root / "ignored.txt").write_text('{"event": "agent_started"}\n')
    return root


#: The report tables the job writes (``tables/NAME.csv``) that the recorded run holds.
TABLES = ("failovers", "percentiles", "percentiles_by_kind", "tuning", "tuning_by_kind",
          "anomalies", "primary_stints", "event_counts", "phases")  # fmt: skip
#: The local run of these logs as the job writes it: each table's CSV header and rows
#: (sorted: equal rows of ``event_counts`` come in any order) and the job's warning lines,
#: the logs' directory written ``{logs}``. test_transforms.py checks the session's local run
#: against it and test_cluster_mode.py the standalone cluster's run: the cluster's tables are
#: the local ones without a second local run. ``QPID_TEST_RECORD_TABLES=1`` makes
#: test_transforms.py write it anew from the local run (after a change of the job's output,
#: reviewed in the diff).
RECORDED = Path(__file__).parent / "data" / "three-clusters-run.json"


def table(out: Path, name: str, logs: Path) -> list[list[str]]:
    """A CSV table of the job's ``out`` directory: its header, then its rows sorted."""
    with (out / "tables" / f"{name}.csv").open() as f:
        header, *rows = [[cell.replace(str(logs), "{logs}") for cell in row]
                         for row in csv.reader(f)]  # fmt: skip
    return [header, *sorted(rows)]


def run_record(out: Path, warnings: list[str], logs: Path) -> dict[str, Any]:
    """What :data:`RECORDED` holds, of the run of the logs in ``logs`` written to ``out``."""
    return {
        "warnings": [w.replace(str(logs), "{logs}") for w in warnings],
        "tables": {name: table(out, name, logs) for name in TABLES},
    }


def recorded() -> dict[str, Any]:
    return dict(json.loads(RECORDED.read_text()))


def record(run: dict[str, Any]) -> None:
    """Write :data:`RECORDED`: JSON, a warning or a table's row a line (readable diffs)."""
    out = [
        '{"warnings": [',
        ",\n".join(json.dumps(w) for w in run["warnings"]),
        "],",
        '"tables": {',
    ]
    tables = [
        f"{json.dumps(name)}: [\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]"
        for name, rows in sorted(run["tables"].items())
    ]
    out += [",\n".join(tables), "}}"]
    RECORDED.write_text("\n".join(out) + "\n")
