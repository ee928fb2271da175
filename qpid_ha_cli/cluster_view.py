"""``qpid-ha --zk HOSTS --cluster NAME status --all``: the cluster as ZooKeeper sees it.

Reads the agents' member records, the primary record and the epoch counter (the layout of
:mod:`ha_agent.zk_layout`) and renders them as a table or JSON. Read only.

Error Handling
==============

:class:`ClusterViewError` with one line when ZooKeeper cannot be reached in ``timeout``
seconds or the cluster has no znodes at all (a wrong ``--cluster``).
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ha_agent.epoch_counter import read_epoch
from ha_agent.membership import read_members
from ha_agent.primary_record import read_primary_full
from ha_agent.zk_layout import ClusterLayout

__all__ = ["ClusterViewError", "format_cluster", "read_cluster"]

# kazoo logs every refused connection: the command says it once, in one line.
_quiet = logging.getLogger("qpid_ha_cli.kazoo")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class ClusterViewError(Exception):
    """ZooKeeper unreachable, or no such cluster."""


def read_cluster(hosts: str, cluster: str, timeout: float) -> dict[str, Any]:
    """Members, primary, virtual IP owner and last epoch of ``cluster``, as plain data."""
    layout = ClusterLayout(cluster)  # ValueError for a bad name
    client = KazooClient(hosts=hosts, timeout=max(1.0, timeout), read_only=True, logger=_quiet)
    try:
        try:
            client.start(timeout=timeout)
        except KazooTimeoutError:
            raise ClusterViewError(f"cannot reach ZooKeeper at {hosts}") from None
        try:
            if client.exists(layout.root) is None:
                raise ClusterViewError(f"no cluster {cluster!r} in ZooKeeper at {hosts}")
            members = read_members(client, cluster)
            primary = read_primary_full(client, cluster)
            epoch = read_epoch(client, cluster)
        except (KazooException, NoNodeError) as exc:
            raise ClusterViewError(f"ZooKeeper at {hosts}: {exc!r}") from None
    finally:
        client.stop()
        client.close()
    record, vip = primary if primary is not None else (None, None)
    return {
        "cluster": cluster,
        "epoch": epoch,
        "primary": None if record is None else record.node,
        "primary_epoch": None if record is None else record.epoch,
        "vip": vip,
        "vip_owner": None if record is None or vip is None else record.node,
        "members": [
            {
                "node": m.node,
                "state": m.ha_state,
                "epoch": m.epoch,
                "position": m.replication_position,
                "store": m.store_status,
                "url": m.broker_url,
                "primary": record is not None and record.node == m.node,
            }
            for m in members.values()
        ],
    }


def format_cluster(view: dict[str, Any]) -> list[str]:
    """The table for people."""
    lines = [f"{'NODE':<16} {'STATE':<12} {'EPOCH':>6} {'POSITION':>10}  URL"]
    for m in view["members"]:
        mark = "  (primary)" if m["primary"] else ""
        lines.append(
            f"{m['node']:<16} {m['state']:<12} {m['epoch']:>6} {m['position']:>10}  "
            f"{m['url']}{mark}"
        )
    primary = view["primary"] or "none"
    lines.append(
        f"cluster {view['cluster']}: primary {primary}"
        + (f" (epoch {view['primary_epoch']})" if view["primary"] else "")
        + f", last epoch {view['epoch']}"
        + (f", virtual IP {view['vip']} on {view['vip_owner']}" if view["vip"] else "")
    )
    return lines
