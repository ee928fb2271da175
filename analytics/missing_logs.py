"""Logs missing from the input: a node whose broker's log is read but not its agent's,
in a cluster whose other agents' logs are read.

:Status: Beta

A fail-over is timed across the logs of several processes; one of them left out (a file
not copied, a node's directory forgotten) does not stop the job, and the instants it
would have given are simply absent. Without the old primary's agent's log its
resignation is unknown, so the earlier of resignation and election (``detected``) is a
guess that puts the election into the detection (a kill: detection 70 ms, election 0,
instead of 26 and 44); without the new primary's, its election is unknown. The job then
withholds what it cannot know (``analytics.tuning``: evidence ``agent_log_missing``) and
says so, a line per node (:func:`warnings`), never a phase computed from half the logs.

- :func:`node_logs` (Spark): which sources (``broker``, ``agent``) each node of each
  cluster logged (collected: a row per node).
- :func:`agentless` (pure): the nodes whose agent's log is missing.
- :func:`warnings` (pure): one line per such node, naming the fail-overs it takes part in
  and what of them is withheld.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["NodeLogs", "agentless", "node_logs", "warnings"]

Node = tuple[str, str]  # (cluster, node)
#: Fail-overs named in a warning line, at most.
NAMED = 10


@dataclass(frozen=True)
class NodeLogs:
    """The sources one node of one cluster logged (``broker``, ``agent``, ``drill``)."""

    cluster: str
    node: str
    sources: frozenset[str]


def node_logs(events: DataFrame) -> list[NodeLogs]:
    """The sources of every (cluster, node) of the normalised events."""
    rows = (
        events.where(F.col("node").isNotNull())
        .groupBy("cluster", "node")
        .agg(F.collect_set("source").alias("sources"))
        .collect()
    )
    return [
        NodeLogs(str(r["cluster"] or ""), str(r["node"]), frozenset(r["sources"] or ()))
        for r in rows
    ]


def agentless(nodes: Iterable[NodeLogs]) -> list[Node]:
    """The (cluster, node) whose broker logged and whose agent did not, in a cluster where
    another node's agent did (a cluster without any agent log is read from its brokers'
    alone, as before: its fail-overs say ``no_agent_logs``)."""
    by_cluster: dict[str, list[NodeLogs]] = defaultdict(list)
    for n in nodes:
        by_cluster[n.cluster].append(n)
    out = []
    for cluster, members in sorted(by_cluster.items()):
        if not any("agent" in m.sources for m in members):
            continue
        out += [
            (cluster, m.node) for m in members if "broker" in m.sources and "agent" not in m.sources
        ]
    return sorted(out)


def warnings(missing: Sequence[Node], failovers: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per node of ``missing``: the fail-overs from it (detection and election
    withheld, spurious unknown) and to it (its election unknown: election and promotion
    withheld)."""
    out = []
    for cluster, node in missing:
        rows = [r for r in failovers if r.get("kind") == "failover" and r["cluster"] == cluster]
        old = [f"e{r['epoch']}" for r in rows if r.get("old_node") == node]
        new = [f"e{r['epoch']}" for r in rows if r.get("node") == node]
        parts = []
        if old:
            parts.append(
                f"from it {_named(old)}: detection and election withheld, spurious unknown"
            )
        if new:
            parts.append(f"to it {_named(new)}: election and promotion withheld")
        out.append(
            f"no agent log of {node} (cluster {cluster or '-'}), though its broker's is read "
            f"(evidence agent_log_missing): fail-overs " + ("; ".join(parts) if parts else "none")
        )
    return out


def _named(epochs: Sequence[str]) -> str:
    return ", ".join(epochs[:NAMED]) + (" ..." if len(epochs) > NAMED else "")
