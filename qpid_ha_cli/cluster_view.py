"""``qpid-ha --zk HOSTS --cluster NAME status --all``: the cluster as ZooKeeper sees it.

Without ``--cluster`` (:func:`read_clusters`, :func:`format_clusters`): every cluster on
that ZooKeeper, a line each, and how many primaries each node runs (several clusters on
one set of nodes, :mod:`ha_agent.spread`).

Reads the agents' member records, the primary record, the epoch counter and the in-sync
set (the layout of :mod:`ha_agent.zk_layout`) and renders them as a table or JSON. Read
only. IN-SYNC is ``yes`` for a member whose broker (by the broker id it publishes) is in the
committed in-sync set, ``no`` for one that is not, ``-`` for the primary (never a member)
and when no set is recorded; the summary line ends with the set's epoch and its members.
Each agent's status record (:mod:`ha_agent.agent_status`) adds a warning line for an
engaged fence brake; without a primary, the store the agents choose or which broker is
needed and why (:mod:`ha_agent.store_choice`), and each agent's reason.

With ``--zk-auth`` (the agents' digest, :mod:`ha_agent.zk_auth`) it reads a cluster whose
znodes only that user may read; with ``--zk-ssl*`` (:mod:`ha_agent.zk_tls`) it talks TLS to
ZooKeeper's secureClientPort.

Error Handling
==============

:class:`ClusterViewError` with one line when ZooKeeper cannot be reached in ``timeout``
seconds (at once, ``...: connection refused``, when every address refuses the connection:
:func:`common.zk_access.connect_refusal`), refuses the TLS handshake (the reason:
``certificate verify failed ...``), denies reading the cluster's znodes (NoAuth: no or
other credentials), or the cluster has no znodes at all (a wrong ``--cluster``). An in-sync
record that cannot be parsed is shown as such (``in_sync_error``), not raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from common.exit_status import CommandError, ExitStatus
from common.zk_access import connect_refusal
from ha_agent.agent_status import AgentStatus, BrakeStatus, brake_text, read_statuses
from ha_agent.cluster_records import InSyncRecord, PrimaryRecord
from ha_agent.epoch_counter import EpochCounterError, read_epoch
from ha_agent.in_sync import InSyncRecordError, read_in_sync
from ha_agent.membership import Member, read_members
from ha_agent.node_loads import cluster_names
from ha_agent.primary_record import read_primary_full
from ha_agent.store_choice import choose_store
from ha_agent.zk_auth import ZkAuth, zk_security
from ha_agent.zk_format import ZkFormatError
from ha_agent.zk_layout import ClusterLayout
from ha_agent.zk_tls import ZkTls, tls_refusal

__all__ = [
    "ClusterViewError",
    "format_cluster",
    "format_clusters",
    "position_text",
    "read_cluster",
    "read_clusters",
    "two_primaries",
]

# kazoo logs every refused connection: the command says it once, in one line.
_quiet = logging.getLogger("qpid_ha_cli.kazoo")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class ClusterViewError(CommandError):
    """ZooKeeper unreachable, or no such cluster: ``qpid-ha`` exits 3 (UNREACHABLE)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitStatus.UNREACHABLE)


def read_cluster(
    hosts: str,
    cluster: str,
    timeout: float,
    *,
    auth: ZkAuth | None = None,
    tls: ZkTls | None = None,
) -> dict[str, Any]:
    """Members, primary, virtual IP owner and last epoch of ``cluster``, as plain data;
    read with ``auth``'s digest and over ``tls`` when given."""
    ClusterLayout(cluster)  # ValueError for a bad name
    with _session(hosts, timeout, auth, tls) as client:
        return _read(client, hosts, cluster, auth)


def read_clusters(
    hosts: str,
    timeout: float,
    *,
    auth: ZkAuth | None = None,
    tls: ZkTls | None = None,
) -> list[dict[str, Any]]:
    """Every cluster on the ZooKeeper at ``hosts`` (``qpid-ha --zk HOSTS status --all``
    without ``--cluster``), each as :func:`read_cluster` reads it, by name; a cluster that
    cannot be read (another cluster's credentials, a record of a newer format, an epoch
    counter that holds no epoch) is ``{"cluster": NAME, "error": WHY}``."""
    with _session(hosts, timeout, auth, tls) as client:
        try:
            names = cluster_names(client)
        except NoAuthError:
            raise ClusterViewError(f"ZooKeeper at {hosts} denied listing the clusters") from None
        except KazooException as exc:
            raise ClusterViewError(f"ZooKeeper at {hosts}: {exc!r}") from None
        views = []
        for name in names:
            try:
                views.append(_read(client, hosts, name, auth))
            except (ClusterViewError, EpochCounterError) as exc:  # this cluster's, not all
                views.append({"cluster": name, "error": str(exc)})
        return views


@contextmanager
def _session(
    hosts: str, timeout: float, auth: ZkAuth | None, tls: ZkTls | None
) -> Iterator[KazooClient]:
    """A read-only client of the ZooKeeper at ``hosts``, started, stopped after."""
    started = time.monotonic()
    answered, refusal = connect_refusal(hosts, timeout)
    if not answered:  # kazoo would retry a refused connection for the whole timeout
        raise ClusterViewError(
            f"cannot reach ZooKeeper at {hosts}" + (f": {refusal}" if refusal else "")
        )
    timeout = max(0.1, timeout - (time.monotonic() - started))
    if tls is not None:
        refusal = tls_refusal(hosts, tls, timeout)
        if refusal is not None:
            raise ClusterViewError(refusal)
    client = KazooClient(
        hosts=hosts,
        timeout=max(1.0, timeout),
        read_only=True,
        logger=_quiet,
        **zk_security(auth, tls),
    )
    try:
        try:
            client.start(timeout=timeout)
        except KazooTimeoutError:
            raise ClusterViewError(f"cannot reach ZooKeeper at {hosts}") from None
        yield client
    finally:
        client.stop()
        client.close()


def _read(client: KazooClient, hosts: str, cluster: str, auth: ZkAuth | None) -> dict[str, Any]:
    """One cluster's view over ``client`` (:func:`read_cluster`)."""
    layout = ClusterLayout(cluster)
    try:
        if client.exists(layout.root) is None:
            raise ClusterViewError(f"no cluster {cluster!r} in ZooKeeper at {hosts}")
        invalid: list[str] = []  # member records left out, said in the view (not logged)
        unreadable: list[ZkFormatError] = []
        members = read_members(client, cluster, unreadable, invalid)
        invalid.extend(str(exc) for exc in unreadable)
        agents = read_statuses(client, cluster)
        primary = read_primary_full(client, cluster)
        epoch = read_epoch(client, cluster)
        in_sync_error = None
        try:
            versioned = read_in_sync(client, cluster)
        except InSyncRecordError as exc:
            versioned, in_sync_error = None, str(exc)
    except ZkFormatError as exc:  # a record of a format this qpid-ha cannot read
        raise ClusterViewError(str(exc)) from None
    except NoAuthError:
        who = f"user {auth.user!r}" if auth is not None else "no credentials"
        raise ClusterViewError(
            f"ZooKeeper at {hosts} denied reading cluster {cluster!r} to {who} (NoAuth):"
            " give the agents' --zk-auth"
        ) from None
    except (KazooException, NoNodeError) as exc:
        raise ClusterViewError(f"ZooKeeper at {hosts}: {exc!r}") from None
    record, vip = primary if primary is not None else (None, None)
    in_sync = None if versioned is None else versioned.record
    ids = frozenset() if in_sync is None else in_sync.broker_ids

    def member_in_sync(node: str, broker_id: str) -> bool | None:
        if in_sync is None or (record is not None and record.node == node):
            return None
        return bool(broker_id) and broker_id in ids

    return {
        "cluster": cluster,
        "epoch": epoch,
        "primary": None if record is None else record.node,
        "primary_epoch": None if record is None else record.epoch,
        "primary_url": None if record is None else record.broker_url,
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
                "broker_id": m.broker_id,
                "in_sync": member_in_sync(m.node, m.broker_id),
            }
            for m in members.values()
        ],
        "in_sync": None
        if versioned is None or in_sync is None
        else {
            "epoch": in_sync.epoch,
            "version": versioned.version,
            "members": [
                {"broker_id": m.broker_id, "node": m.node, "url": m.url} for m in in_sync.members
            ],
        },
        "in_sync_error": in_sync_error,
        "invalid_members": invalid,
        "agents": [asdict(a) for a in agents.values()],
        "choice": _choice(members, record, in_sync),
    }


def _choice(
    members: dict[str, Member], primary: PrimaryRecord | None, in_sync: InSyncRecord | None
) -> dict[str, Any] | None:
    """Without a primary and without a live member of the set: the store the agents choose
    by protocol, or which broker is needed and why (:mod:`ha_agent.store_choice`)."""
    if primary is not None or in_sync is None or not in_sync.store_ids:
        return None
    if any(m.broker_id and m.broker_id in in_sync.broker_ids for m in members.values()):
        return None  # a live member of the set contends: the usual way
    choice = choose_store(members, in_sync, cluster_size=None)
    return {"chosen": choice.chosen, "reason": choice.reason, "needed": choice.needed or None}


def _in_sync_cell(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def _in_sync_summary(view: dict[str, Any]) -> str:
    if view.get("in_sync_error"):
        return f", in-sync set unreadable ({view['in_sync_error']})"
    in_sync = view.get("in_sync")
    if in_sync is None:
        return ", no in-sync set"
    live = {m.get("broker_id"): m["node"] for m in view["members"] if m.get("broker_id")}
    names = sorted(
        live.get(m["broker_id"]) or m["node"] or m["broker_id"] for m in in_sync["members"]
    )
    return f", in-sync set epoch {in_sync['epoch']}: {', '.join(names) or 'none'}"


#: A primary promoted at epoch E numbers each queue's messages from ``E << 40`` (its era:
#: ``broker.ha``'s ``ERA_SHIFT``), so a position packs two numbers (:func:`position_text`).
POSITION_ERA = 2**40


def position_text(position: int) -> str:
    """A member's replication position for people: ``ERAS:IDS``, the eras (summed over
    queues) and the ids within them, apart, instead of one number like 1099511629442
    (``1:1666``)."""
    if not isinstance(position, int) or position < 0:
        return str(position)
    eras, ids = divmod(position, POSITION_ERA)
    return f"{eras}:{ids}"


def format_cluster(view: dict[str, Any]) -> list[str]:
    """The table for people. POSITION is :func:`position_text`'s ``ERAS:IDS``."""
    lines = [f"{'NODE':<16} {'STATE':<12} {'EPOCH':>6} {'POSITION':>14} {'IN-SYNC':<7}  URL"]
    for m in view["members"]:
        mark = "  (primary)" if m["primary"] else ""
        in_sync = _in_sync_cell(m.get("in_sync"))
        position = position_text(m["position"])
        lines.append(
            f"{m['node']:<16} {m['state']:<12} {m['epoch']:>6} {position:>14} "
            f"{in_sync:<7}  {m['url']}{mark}"
        )
    primary = view["primary"] or "none"
    warning = two_primaries(view)
    lines.append(
        f"cluster {view['cluster']}: primary {primary}"
        + (f" (epoch {view['primary_epoch']})" if view["primary"] else "")
        + f", last epoch {view['epoch']}"
        + (f", virtual IP {view['vip']} on {view['vip_owner']}" if view["vip"] else "")
        + _in_sync_summary(view)
    )
    if warning:
        lines.append(f"warning: {warning}")
    lines.extend(
        f"warning: member record left out: {text}" for text in view.get("invalid_members") or []
    )
    agents = view.get("agents") or []
    for agent in agents:
        brake = brake_text(AgentStatus(agent["node"], brake=BrakeStatus(**agent["brake"])))
        if brake:
            lines.append(f"warning: {brake}")
    choice = view.get("choice")
    if not view["primary"] and choice is not None:
        lines.append(
            f"no primary: {choice['needed']}"
            if choice["needed"]
            else f"no primary: the agents promote {choice['chosen']}: {choice['reason']}"
        )
    if not view["primary"]:
        lines.extend(f"{a['node']}'s agent: {a['eligibility']}" for a in agents)
    return lines


def two_primaries(view: dict[str, Any]) -> str:
    """Why more than one member serves as primary ("" when at most one does): e.g. a
    backup promoted by hand beside the agents' primary, at an epoch ZooKeeper never
    issued, which no agent fences."""
    serving = [m for m in view["members"] if m["state"] in ("active", "recovering")]
    if len(serving) < 2:
        return ""
    names = ", ".join(f"{m['node']} (epoch {m['epoch']})" for m in serving)
    text = f"{len(serving)} members serve as primary: {names}"
    text += f"; ZooKeeper's primary is {view['primary'] or 'none'}"
    for m in serving:
        if m["epoch"] > view["epoch"]:
            text += (
                f"; {m['node']}'s epoch {m['epoch']} is above ZooKeeper's last epoch"
                f" {view['epoch']}: promoted outside the agents (qpid-ha --cluster-manager"
                " promote?): stop it (qpid-ha stop-member)"
            )
    return text


def format_clusters(views: list[dict[str, Any]]) -> list[str]:
    """Every cluster on one ZooKeeper, a line each (its primary's node, epoch and URL, its
    in-sync set), then how many primaries each node runs (issue 32: several clusters on one
    set of nodes spread their primaries: docs/deploy.md)."""
    lines = [f"{'CLUSTER':<20} {'PRIMARY':<16} {'EPOCH':>6}  {'URL':<24} IN-SYNC"]
    per_node: dict[str, list[str]] = {}
    for view in views:
        name = view["cluster"]
        if "error" in view:
            lines.append(f"{name:<20} unreadable: {view['error']}")
            continue
        primary = view["primary"]
        if primary:
            per_node.setdefault(primary, []).append(name)
        summary = _in_sync_summary(view).removeprefix(", ")
        epoch = view["primary_epoch"] if primary else "-"
        lines.append(
            f"{name:<20} {primary or 'none':<16} {epoch:>6}  "
            f"{view.get('primary_url') or '-':<24} {summary}"
        )
        warning = two_primaries(view)
        if warning:
            lines.append(f"warning: {name}: {warning}")
    nodes = sorted(
        {m["node"] for v in views for m in v.get("members", [])} | set(per_node),
    )
    counts = ", ".join(f"{node} {len(per_node.get(node, []))}" for node in nodes)
    lines.append(f"{len(views)} clusters; primaries per node: {counts or 'none'}")
    return lines
