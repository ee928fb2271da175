"""The agents' view of the cluster, read from ZooKeeper for the console's cluster page.

:Status: Beta

With ``--console-zk HOSTS`` and ``--console-cluster NAME`` (the agents' ``--zk`` and
``--cluster``) the console reads, every :data:`PERIOD` seconds, what the agents record
(``docs/agent.md``; the layout of ``ha_agent.zk_layout``, written out here because the
broker never imports the agent): each agent's member record (its broker's state, epoch,
URL, broker id), the primary record with the virtual IP its holder took, the last
epoch handed out, and each agent's status record (``alerts``: an engaged fence brake;
without a primary, why each agent waits: which broker is needed; ``electing``: without a
primary, the agents whose claim contends, and why their broker may be promoted), and every
cluster on the ZooKeeper with its primary's node (``clusters``, ``per_node``: several
clusters on one set of nodes). Read only, with a read-only client. This is ``qpid-ha --zk
HOSTS --cluster NAME status --all`` (and, for the list, ``qpid-ha --zk HOSTS status
--all``) in the page.

Error Handling
==============

Nothing here raises to the console: ZooKeeper unreachable, no such cluster, a record that
does not parse, each gives a view with ``error`` set (one line) and what could be read. The
blocking reads run in a worker thread (:func:`asyncio.to_thread`), never on the event loop.
A cluster whose znodes need the agents' ``--zk-auth`` credentials reads as an error
(NoAuth) unless ``--console-zk-auth`` gives them; TLS to ZooKeeper's secureClientPort with
``--console-zk-ssl*``, the agents' ``--zk-ssl*`` (:mod:`common.zk_access`). A TLS handshake
that fails is said as such (kazoo only times out).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

from common.zk_access import ZkAccess, kazoo_options, parse_digest, tls_problem

__all__ = ["PERIOD", "AgentsView", "cluster_paths", "parse_clusters", "per_node", "zk_access"]

#: Seconds between two reads.
PERIOD = 2.0
#: Other clusters' primary records read at most (each read every PERIOD).
MAX_CLUSTERS = 100
#: ``ha_agent.zk_layout.ROOT``.
ROOT = "/qpid-ha"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

# kazoo logs every refused connection: the view says it once.
_quiet = logging.getLogger("broker.console.kazoo")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def cluster_paths(cluster: str) -> dict[str, str]:
    """The znodes read for ``cluster`` (``ha_agent.zk_layout.ClusterLayout``'s paths).

    :raises ValueError: for a name the agents could not have used.
    """
    if not _NAME.fullmatch(cluster):
        raise ValueError(f"bad cluster name {cluster!r}")
    root = f"{ROOT}/{cluster}"
    return {
        "root": root,
        "members": f"{root}/members",
        "primary": f"{root}/primary",
        "epoch": f"{root}/epoch",
        "agents": f"{root}/agents",
    }


def zk_access(options: Any) -> ZkAccess:
    """``--console-zk-auth`` and ``--console-zk-ssl*`` (checked at start: check_options)."""
    auth = getattr(options, "console_zk_auth", None)
    files = [
        getattr(options, f"console_zk_ssl_{name}_file", None) for name in ("ca", "cert", "key")
    ]
    return ZkAccess(
        digest=parse_digest(auth, "console-zk-auth") if isinstance(auth, str) else None,
        tls=bool(getattr(options, "console_zk_ssl", False)) or any(files),
        ca_file=files[0],
        cert_file=files[1],
        key_file=files[2],
    )


def _json(data: bytes | None) -> Any:
    try:
        return json.loads(data or b"")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _alerts(agents: dict[str, bytes | None], primary: bool) -> list[str]:
    """Lines for people from the agents' status records (``ha_agent.agent_status``): an
    engaged fence brake; without a primary, each agent's reason (which broker is needed)."""
    lines = []
    for node, data in sorted(agents.items()):
        record = _json(data)
        if not isinstance(record, dict):
            continue
        raw = record.get("brake")
        brake: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if brake.get("engaged") is True:
            lines.append(
                f"fence brake engaged on {node}'s agent since {brake.get('since') or '?'}:"
                f" {brake.get('promotions')} promotions within {brake.get('window_s')} s; a"
                f" silent (not gone) primary is given {brake.get('patience_s')} s"
                f" (--broker-timeout {brake.get('broker_timeout_s')} s) before it is fenced"
            )
        reason = record.get("eligibility")
        if not primary and isinstance(reason, str) and reason:
            lines.append(f"no primary: {node}'s agent: {reason}")
    return lines


def _electing(agents: dict[str, bytes | None], primary: bool) -> list[dict[str, str]]:
    """Without a primary record, the agents whose status record says their claim contends
    (or won and promotes now: ``claim``), each with its reason: the cluster is electing."""
    if primary:
        return []
    found = []
    for node, data in sorted(agents.items()):
        record = _json(data)
        if isinstance(record, dict) and record.get("claim") in ("contending", "leading"):
            reason = record.get("eligibility")
            found.append(
                {
                    "node": node,
                    "election": str(record["claim"]),
                    "reason": reason if isinstance(reason, str) else "",
                }
            )
    return found


def parse_clusters(primaries: dict[str, bytes | None]) -> list[dict[str, Any]]:
    """Every cluster on the ZooKeeper with its primary record's node, epoch and URL (None:
    no primary), by name, from each cluster's primary znode bytes (pure)."""
    out = []
    for name, data in sorted(primaries.items()):
        body = _json(data) if data is not None else None
        body = body if isinstance(body, dict) else {}
        node = body.get("node")
        out.append(
            {
                "cluster": name,
                "primary": node if isinstance(node, str) else None,
                "primary_epoch": body.get("epoch"),
                "primary_url": body.get("broker_url"),
            }
        )
    return out


def per_node(clusters: list[dict[str, Any]]) -> dict[str, int]:
    """How many of ``clusters``' primaries each node runs."""
    counts: dict[str, int] = {}
    for row in clusters:
        if row["primary"]:
            counts[row["primary"]] = counts.get(row["primary"], 0) + 1
    return dict(sorted(counts.items()))


def parse_view(
    cluster: str,
    members: dict[str, bytes | None],
    primary: bytes | None,
    epoch: bytes | None,
    agents: dict[str, bytes | None] | None = None,
    others: dict[str, bytes | None] | None = None,
) -> dict[str, Any]:
    """The view from the znodes' bytes (pure: tests feed it records); ``others``: the
    primary znodes of the other clusters on the ZooKeeper (several clusters on one set of
    nodes, docs/deploy.md)."""
    problems: list[str] = []
    rows = []
    for node, data in sorted(members.items()):
        record = _json(data)
        if not isinstance(record, dict):
            problems.append(f"member {node}: not a record")
            continue
        rows.append(
            {
                "node": node,
                "state": record.get("ha_state"),
                "epoch": record.get("epoch"),
                "url": record.get("broker_url"),
                "broker_id": record.get("broker_id"),
                "store": record.get("store_status"),
            }
        )
    body = _json(primary) if primary is not None else None
    if primary is not None and not isinstance(body, dict):
        problems.append("primary record: not a record")
        body = None
    text = (epoch or b"").strip()
    last_epoch = int(text) if text.isdigit() and len(text) < 20 else None
    clusters = parse_clusters({**(others or {}), cluster: primary})
    return {
        "cluster": cluster,
        "primary": None if body is None else body.get("node"),
        "primary_epoch": None if body is None else body.get("epoch"),
        "primary_url": None if body is None else body.get("broker_url"),
        "vip": None if body is None else body.get("vip"),
        "epoch": last_epoch,
        "members": rows,
        "alerts": _alerts(agents or {}, body is not None),
        "electing": _electing(agents or {}, body is not None),
        "clusters": clusters,
        "per_node": per_node(clusters),
        "error": "; ".join(problems) or None,
    }


class AgentsView:
    """One ZooKeeper client for the console, read every :data:`PERIOD` seconds."""

    def __init__(
        self, hosts: str, cluster: str, timeout: float = 2.0, access: ZkAccess | None = None
    ) -> None:
        self.hosts = hosts
        self.cluster = cluster
        self.timeout = timeout
        self.access = access or ZkAccess()
        self.view: dict[str, Any] | None = None
        self._client: Any = None
        self._next = 0.0

    async def refresh(self) -> None:
        """Read again when :data:`PERIOD` has passed since the last read."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + PERIOD
        self.view = await asyncio.to_thread(self._read)

    def _read(self) -> dict[str, Any]:
        at = time.time()
        try:
            paths = cluster_paths(self.cluster)
        except ValueError as exc:
            return {"cluster": self.cluster, "error": str(exc), "members": [], "read_at": at}
        from kazoo.client import KazooClient
        from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
        from kazoo.handlers.threading import KazooTimeoutError

        try:
            if self._client is None:
                self._client = KazooClient(
                    hosts=self.hosts,
                    timeout=self.timeout,
                    read_only=True,
                    logger=_quiet,
                    **kazoo_options(self.access),
                )
                self._client.start(timeout=self.timeout)  # on a timeout: close() stops it
            client = self._client
            timeout = self.timeout

            def wait(pending: Any) -> Any:
                # Each read bounded: a plain client.get() waits without limit while kazoo
                # reconnects (the page once showed a view 10 s old, read before a stall).
                return pending.get(timeout=timeout)

            if wait(client.exists_async(paths["root"])) is None:
                raise LookupError(f"no cluster {self.cluster!r} in ZooKeeper at {self.hosts}")
            members: dict[str, bytes | None] = {}
            listed = wait(client.exists_async(paths["members"]))
            nodes = wait(client.get_children_async(paths["members"])) if listed else []
            for node in nodes:
                try:
                    members[node] = wait(client.get_async(f"{paths['members']}/{node}"))[0]
                except NoNodeError:
                    continue  # gone between the listing and the read
            try:
                primary: bytes | None = wait(client.get_async(paths["primary"]))[0]
            except NoNodeError:
                primary = None
            try:
                epoch: bytes | None = wait(client.get_async(paths["epoch"]))[0]
            except NoNodeError:
                epoch = None
            others: dict[str, bytes | None] = {}
            names = sorted(wait(client.get_children_async(ROOT)))
            for name in [n for n in names if n != self.cluster][:MAX_CLUSTERS]:
                if not _NAME.fullmatch(name):
                    continue
                try:
                    others[name] = wait(client.get_async(f"{ROOT}/{name}/primary"))[0]
                except NoNodeError:
                    others[name] = None
                except NoAuthError:
                    continue  # another cluster's credentials: not shown
            agents: dict[str, bytes | None] = {}
            listed = wait(client.exists_async(paths["agents"]))
            for node in wait(client.get_children_async(paths["agents"])) if listed else []:
                try:
                    agents[node] = wait(client.get_async(f"{paths['agents']}/{node}"))[0]
                except NoNodeError:
                    continue
        except KazooTimeoutError:
            self.close()
            problem = tls_problem(self.hosts, self.access) if self.access.tls else None
            reason = (
                f"ZooKeeper {problem}" if problem else f"cannot reach ZooKeeper at {self.hosts}"
            )
            return self._error(reason, at)
        except NoAuthError:
            digest = self.access.digest
            who = "no credentials" if digest is None else f"user {digest.user!r}"
            return self._error(
                f"ZooKeeper denied reading cluster {self.cluster!r} to {who} (NoAuth):"
                " give the agents' --zk-auth as console-zk-auth",
                at,
            )
        except (KazooException, LookupError) as exc:
            return self._error(str(exc) or type(exc).__name__, at)
        view = parse_view(self.cluster, members, primary, epoch, agents, others)
        return {**view, "read_at": at}

    def _error(self, reason: str, at: float) -> dict[str, Any]:
        previous = self.view or {}
        return {
            "cluster": self.cluster,
            "members": previous.get("members", []),
            "primary": previous.get("primary"),
            "vip": previous.get("vip"),
            "error": reason,
            "read_at": at,
            "stale": bool(previous.get("members")),
        }

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.stop()
                client.close()
            except Exception:  # closing a client that never connected
                pass

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)
