"""Synthetic JSON logs of many HA clusters failing over, with known distributions.

:Status: Beta

Inputs: the number of clusters (three nodes each), fail-overs per cluster, noise lines,
a seed and the configurations (:class:`Config`: each phase's duration is lognormal with a
set median and shape ``sigma``). Output, in a directory: per node ``<node>.agent.log`` and
``<node>.broker.log``, per cluster ``drill-<cluster>.log`` (schema 1 events as the real
processes log them, ``docs/log-schema.md``), ``noise/part-*.log`` (connection and protocol
events spread over every node: most lines of real logs) and ``params.json`` (what was
asked, so a test can check that the job recovers it).

Each fail-over: the primary's broker dies (``broker_process_exited``, ``broker_state``
null), its agent resigns ``detection`` later (``agent_fenced``), a ready backup's agent wins
``election`` later, its broker is recovering ``promotion`` later and active ``recovering``
later; the drill saw no confirm from just before the failure until ``client_extra`` after
active. Clusters cycle through the configurations; ``lost_runs`` clusters end their drill
with lost messages (an anomaly the job must flag).

The structured lines are few and written by Python; the noise (millions of lines) by Spark
itself, ``spark.range`` to ``to_json`` to text, so 10M lines take seconds, not minutes.

Usage: ``python -m analytics.generate OUT [--clusters N] [--failovers N] [--noise N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


@dataclass(frozen=True)
class Config:
    """A configuration's label, session timeout and each phase's median (ms); the brokers'
    link heartbeat and ``ha-backup-timeout`` (s, logged in their ``ha_started``)."""

    label: str
    session_timeout: float
    detection_ms: float
    election_ms: float
    promotion_ms: float
    recovering_ms: float
    client_extra_ms: float
    sigma: float = 0.35
    link_heartbeat: float = 1.0
    backup_timeout: float = 10.0


DEFAULT_CONFIGS = (
    Config("session-timeout 2s", 2.0, 300.0, 120.0, 60.0, 100.0, 150.0),
    Config("session-timeout 4s", 4.0, 700.0, 150.0, 60.0, 100.0, 200.0),
)
SCENARIO = "kill-primary"
#: Start of the first cluster's logs (microseconds since the epoch).
START_US = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1_000_000)
NOISE_EVENTS = ("connection_opened", "connection_closed", "protocol_error", "channel_error")


@dataclass
class Params:
    clusters: int
    failovers_per_cluster: int
    noise: int
    seed: int
    lost_runs: int
    configs: list[dict[str, Any]]
    events: int = 0
    failovers: int = 0
    files: int = 0
    by_config: dict[str, int] = field(default_factory=dict)


def _ts(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Logs:
    """Lines by file name, with the common fields filled in."""

    def __init__(self) -> None:
        self.files: dict[str, list[tuple[int, str]]] = defaultdict(list)
        self.count = 0

    def add(self, file: str, us: int, event: str, node: str, component: str, **fields: Any) -> None:
        cluster = fields.pop("cluster", None)
        epoch = fields.pop("epoch", None)
        line = {
            "ts": _ts(us), "level": "info", "event": event, "node": node,
            "cluster": cluster, "epoch": epoch, "component": component, "schema": "1",
            **fields,
        }  # fmt: skip
        self.files[file].append((us, json.dumps(line)))
        self.count += 1

    def write(self, out: Path) -> None:
        for name, lines in self.files.items():
            lines.sort(key=lambda pair: pair[0])
            (out / name).write_text("".join(text + "\n" for _, text in lines))


def _lognormal(rng: np.random.Generator, median_ms: float, sigma: float) -> int:
    """A duration in microseconds, lognormal with the given median (ms)."""
    return int(rng.lognormal(math.log(median_ms), sigma) * 1000)


def _cluster(
    logs: _Logs, rng: np.random.Generator, index: int, cfg: Config, failovers: int, lost: bool
) -> list[str]:
    name = f"c{index:04d}"
    nodes = [f"{name}-n{i}" for i in (1, 2, 3)]
    t = START_US + index * 7_000_000  # clusters overlap in time, as in a shared log store

    def agent(node: str, us: int, event: str, epoch: int | None, **f: Any) -> None:
        logs.add(f"{node}.agent.log", us, event, node, "agent", cluster=name, epoch=epoch, **f)

    def broker(node: str, us: int, event: str, epoch: int, component: str = "ha", **f: Any) -> None:
        logs.add(f"{node}.broker.log", us, event, node, component, epoch=epoch, **f)

    def drill(us: int, event: str, **f: Any) -> None:
        logs.add(f"drill-{name}.log", us, event, f"drill-{name}", "drill", cluster=name, **f)

    def change(node: str, us: int, old: str, new: str, epoch: int) -> None:
        broker(node, us, "ha_state_changed", epoch, old=old, new=new, reason="synthetic")

    settings: dict[str, Any] = {
        "link_heartbeat_interval": cfg.link_heartbeat,
        "ha_backup_timeout": cfg.backup_timeout,
    }
    for node in nodes:
        agent(node, t, "agent_started", None, session_timeout=cfg.session_timeout,
              cluster_size=3, supervise=True)  # fmt: skip
        broker(node, t + 500_000, "ha_started", 0, state="joining", **settings)
        broker(node, t + 500_100, "broker_started", 0, component="broker", ha_state="joining")
    primary, epoch = nodes[0], 1
    won = t + 1_000_000
    agent(primary, won, "election_won", None)
    recovering = won + _lognormal(rng, cfg.promotion_ms, cfg.sigma)
    change(primary, recovering, "joining", "recovering", 1)
    active = recovering + 1_000
    change(primary, active, "recovering", "active", 1)
    agent(primary, active + 2_000, "agent_promoted", 1, new_epoch=1, ha_state="active")
    for node in nodes[1:]:
        change(node, active + 50_000, "joining", "catch-up", 1)
        change(node, active + 90_000, "catch-up", "ready", 1)
    drill(active + 500_000, "drill_started", scenario=SCENARIO, rate=1000)
    sent = 0
    t = active + 2_000_000
    for _ in range(failovers):
        failure = t + int(rng.uniform(5, 15) * 1_000_000)
        backups = [n for n in nodes if n != primary]
        new = backups[int(rng.integers(0, 2))]
        other = next(n for n in backups if n != new)
        agent(primary, failure, "broker_process_exited", epoch, pid=1000, code=-9)
        agent(primary, failure + 300, "broker_state", epoch, ha_state=None, reason="refused")
        resigned = failure + _lognormal(rng, cfg.detection_ms, cfg.sigma)
        agent(primary, resigned, "agent_fenced", epoch, reason="the broker does not answer")
        won = resigned + _lognormal(rng, cfg.election_ms, cfg.sigma)
        agent(new, won, "election_won", epoch)
        recovering = won + _lognormal(rng, cfg.promotion_ms, cfg.sigma)
        epoch += 1
        change(new, recovering, "ready", "recovering", epoch)
        agent(
            new, recovering + 3_000, "agent_promoted", epoch, new_epoch=epoch, ha_state="recovering"
        )
        active = recovering + _lognormal(rng, cfg.recovering_ms, cfg.sigma)
        change(new, active, "recovering", "active", epoch)
        change(other, active + 20_000, "ready", "catch-up", epoch)
        change(other, active + 40_000, "catch-up", "ready", epoch)
        restart = max(active, failure + 1_000_000)
        broker(primary, restart, "ha_started", epoch - 1, state="joining", **settings)
        change(primary, restart + 60_000, "joining", "catch-up", epoch)
        change(primary, restart + 120_000, "catch-up", "ready", epoch)
        last_confirm = failure - int(rng.uniform(0, 10_000))
        first_confirm = active + _lognormal(rng, cfg.client_extra_ms, cfg.sigma)
        gap_ms = (first_confirm - last_confirm) / 1000
        drill(first_confirm, "client_reconnected", role="publisher", outage_ms=gap_ms,
              epoch=epoch)  # fmt: skip
        drill(first_confirm + 1, "confirm_gap", gap_ms=gap_ms,
              last_confirm_ts=_ts(last_confirm), first_confirm_ts=_ts(first_confirm))  # fmt: skip
        sent += 10_000
        primary = new
        t = restart + 200_000
    drill(t + 1_000_000, "drill_finished", sent=sent, confirmed=sent, received=sent,
          lost=3 if lost else 0, duplicated=0)  # fmt: skip
    return nodes


def _noise(spark: SparkSession, out: Path, count: int, nodes: list[str], end_us: int) -> int:
    """``count`` connection/protocol lines over ``nodes`` between START_US and end_us."""
    if count <= 0:
        return 0
    node_list = F.array(*[F.lit(n) for n in nodes])
    kinds = F.array(*[F.lit(e) for e in NOISE_EVENTS])
    idx = F.col("id")
    us = F.lit(START_US) + (F.rand(7) * F.lit(end_us - START_US)).cast("long")
    kind = F.element_at(kinds, (F.when(F.rand(11) < 0.45, 1).when(F.rand(13) < 0.8, 2)
                                .when(F.rand(17) < 0.7, 3).otherwise(4)))  # fmt: skip
    node = F.element_at(node_list, (idx % len(nodes) + 1).cast("int"))
    line = F.to_json(
        F.struct(
            F.date_format(F.timestamp_micros(us), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("ts"),
            F.lit("info").alias("level"),
            kind.alias("event"),
            node.alias("node"),
            F.lit(None).cast("string").alias("cluster"),
            F.lit(1).alias("epoch"),
            F.lit("amqp").alias("component"),
            F.lit("1").alias("schema"),
            F.concat(F.lit("127.0.0.1:"), (idx % 50000 + 10000).cast("string")).alias("peer"),
            F.concat(F.lit("#"), idx.cast("string")).alias("connection"),
        ),
        {"ignoreNullFields": "false"},
    )
    parts = max(2, count // 1_000_000)
    target = out / "noise"
    spark.range(count, numPartitions=parts).select(line.alias("value")).write.mode(
        "overwrite"
    ).text(str(target))
    for part in target.glob("part-*.txt"):
        part.rename(part.with_suffix(".log"))
    return count


def generate(
    out: Path,
    *,
    clusters: int = 20,
    failovers: int = 10,
    noise: int = 0,
    seed: int = 1,
    lost_runs: int = 0,
    configs: tuple[Config, ...] = DEFAULT_CONFIGS,
    spark: SparkSession | None = None,
) -> Params:
    """Write the logs under ``out`` (created); returns (and writes) the parameters."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    logs = _Logs()
    nodes: list[str] = []
    by_config: dict[str, int] = defaultdict(int)
    for index in range(clusters):
        cfg = configs[index % len(configs)]
        nodes += _cluster(logs, rng, index, cfg, failovers, lost=index < lost_runs)
        by_config[cfg.label] += failovers
    logs.write(out)
    end_us = max(us for lines in logs.files.values() for us, _ in lines)
    if noise > 0:
        if spark is None:
            raise ValueError("noise lines need a Spark session")
        _noise(spark, out, noise, nodes, end_us)
    params = Params(
        clusters=clusters, failovers_per_cluster=failovers, noise=noise, seed=seed,
        lost_runs=lost_runs, configs=[asdict(c) for c in configs],
        events=logs.count + noise, failovers=clusters * failovers,
        files=len(logs.files), by_config=dict(by_config),
    )  # fmt: skip
    (out / "params.json").write_text(json.dumps(asdict(params), indent=2) + "\n")
    return params


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m analytics.generate", description="synthetic HA logs")
    p.add_argument("out", type=Path)
    p.add_argument("--clusters", type=int, default=20)
    p.add_argument("--failovers", type=int, default=10, help="per cluster")
    p.add_argument("--noise", type=int, default=0, help="connection/protocol lines")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lost-runs", type=int, default=0)
    args = p.parse_args(argv)
    if args.clusters < 1 or args.failovers < 0 or args.noise < 0:
        p.error("--clusters must be at least 1, --failovers and --noise not negative")
    spark = None
    if args.noise:
        from analytics.job import spark_session

        spark = spark_session()
    try:
        params = generate(
            args.out, clusters=args.clusters, failovers=args.failovers, noise=args.noise,
            seed=args.seed, lost_runs=args.lost_runs, spark=spark,
        )  # fmt: skip
    finally:
        if spark is not None:
            spark.stop()
    print(f"{params.events} lines, {params.failovers} fail-overs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
