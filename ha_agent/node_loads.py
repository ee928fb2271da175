"""What the agents read of the other clusters on their ZooKeeper: where their primaries run.

:Status: Beta (issue 32, item 4)

The I/O half of :mod:`ha_agent.spread`: :func:`cluster_names` lists the clusters under
``/qpid-ha``, :func:`read_node_loads` counts the primaries each node runs in the clusters
other than the reader's own (their primary records name their node), and
:func:`spread_hold` tells a claim whose takeover the rule allows whether a safe candidate on
a less loaded node is trying now (then it lets that one go first).

Error Handling
==============

- A cluster whose records this client may not read (another cluster's ACL), whose primary
  record is of a format it cannot read, or that vanished meanwhile counts no primary:
  the preference only ever orders candidates the rules already allow, so missing
  information costs balance, never safety.
- Other kazoo errors (connection loss past the retry policy) propagate to the caller, as
  its other reads do.
- Blocking calls: run them in a thread, not on an event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kazoo.exceptions import NoAuthError, NoNodeError

from ha_agent.agent_status import read_statuses
from ha_agent.cluster_records import InSyncRecord
from ha_agent.membership import Member
from ha_agent.primary_record import decode_primary
from ha_agent.spread import CLAIMING, least_loaded, node_loads, safe_candidates, yield_to
from ha_agent.zk_format import ZkFormatError
from ha_agent.zk_layout import ROOT, ClusterLayout, check_name

__all__ = ["cluster_names", "read_node_loads", "spread_hold"]


def cluster_names(client: Any) -> list[str]:
    """The clusters on this ZooKeeper (the children of ``/qpid-ha`` that are names),
    sorted; empty when there is none."""
    try:
        children = client.retry(client.get_children, ROOT)
    except NoNodeError:
        return []
    names = []
    for child in children:
        try:
            names.append(check_name("cluster", child))
        except ValueError:
            continue  # not one of ours
    return sorted(names)


def read_node_loads(client: Any, own_cluster: str) -> dict[str, int]:
    """Primaries each node runs in the clusters other than ``own_cluster``. The primary
    records are read all at once (asynchronous reads, then their answers): about two round
    trips to ZooKeeper however many clusters there are."""
    names = [c for c in cluster_names(client) if c != own_cluster]
    pending = [(c, client.get_async(ClusterLayout(c).primary)) for c in names]
    primaries: dict[str, str | None] = {}
    for cluster, answer in pending:
        try:
            data, _ = answer.get()
            decoded = decode_primary(data)
        except NoNodeError:
            primaries[cluster] = None
            continue
        except (NoAuthError, ZkFormatError):
            continue
        primaries[cluster] = None if decoded is None else decoded[0].node
    return node_loads(primaries)


def spread_hold(
    client: Any,
    cluster: str,
    node: str,
    in_sync: InSyncRecord | None,
    members: Mapping[str, Member],
    watch: Callable[[Any], None] | None = None,
) -> str | None:
    """The safe candidate of ``cluster`` on a less loaded node that is trying now, which
    ``node`` lets go first (None: none; ``node`` tries). ``watch`` is set on that agent's
    status record, so its end of trying wakes the caller at once. Reads: the other
    clusters' primary records (:func:`read_node_loads`; one round trip when there is no
    other cluster), and only when ``node`` is not on a least loaded node, the cluster's
    agent status records. This is on the takeover's path, between the old primary's
    record going and the promotion: a cluster alone on its ZooKeeper reads one list."""
    candidates = safe_candidates(members, in_sync)
    if node not in candidates or len(candidates) < 2:
        return None
    loads = read_node_loads(client, cluster)
    if node in least_loaded(candidates, loads):
        return None  # nobody to let go first (no more reads)
    statuses = read_statuses(client, cluster)
    claiming = [n for n, status in statuses.items() if status.claim in CLAIMING and n in candidates]
    first = yield_to(node, candidates, loads, claiming)
    if first is not None and watch is not None:
        client.retry(client.exists, ClusterLayout(cluster).agent(first), watch=watch)
    return first
