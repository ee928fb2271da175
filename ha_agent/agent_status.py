"""What each agent tells operators: its fence brake and why it waits (issues 25 and 26).

:Status: Beta

Each agent keeps an *ephemeral* znode ``/qpid-ha/<cluster>/agents/<node>``
(:class:`AgentStatus`, compact JSON, ZooKeeper format 1)::

    {"version": 1, "node": "n2", "eligibility": "no safe choice: n1 (the primary's store)
     is needed: ...", "brake": {"engaged": true, "since": "2026-11-29T08:01:02.123456Z",
     "promotions": 3, "window_s": 60.0, "patience_s": 4.0, "broker_timeout_s": 2.0},
     "claim": "contending"}

``eligibility`` is the reason the agent last decided by (``promotion_eligibility`` in its
log): whether its broker may be promoted, and, in a cluster without a primary, which
broker is needed and why (:mod:`ha_agent.store_choice`). ``claim`` is its claim to
become primary (``"contending"`` while its broker may be promoted and it waits for the
takeover rule; added for issue 32: the candidates of a fail-over let one on a node running
fewer primaries go first only while it tries, :mod:`ha_agent.spread`; without a primary
record, the console says the cluster is electing while an agent's claim is ``contending``
or ``leading``). ``brake`` is its
fence brake
(:class:`ha_agent.fence_brake.FenceBrake`): engaged while primaries are replaced in quick
succession, when a silent (not gone) primary is given ``patience_s`` instead of
``--broker-timeout`` before it is fenced (``agent_fence_cascade`` in the log, once).
``qpid-ha --zk ... status --all`` and the console's cluster page show both.

A record old agents never read: no format bump (docs/ha-design.md, "Format versions"),
and :meth:`AgentStatus.from_json` ignores fields it does not know, so later ones can be
added the same way. :class:`StatusPublisher` writes this agent's record when it changed;
:func:`read_statuses` reads them all.

Error Handling
==============

- ZooKeeper calls raise kazoo's errors; the agent logs them (``zookeeper_error``) and
  publishes again at its next check: the record is for people; the one thing an agent
  reads in it, another's ``claim``, only orders candidates that may all be promoted
  (:mod:`ha_agent.spread`).
- A record that cannot be parsed is left out of :func:`read_statuses`;
  :meth:`AgentStatus.from_json` raises ValueError.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, OperationTimeoutError

from ha_agent.zk_format import WRITTEN_FORMAT, ZkFormatError, record_format
from ha_agent.zk_layout import ClusterLayout, check_name

__all__ = ["AgentStatus", "BrakeStatus", "StatusPublisher", "brake_text", "read_statuses"]


@dataclass(frozen=True)
class BrakeStatus:
    """The fence brake as an operator sees it (:class:`ha_agent.fence_brake.FenceBrake`)."""

    engaged: bool = False
    since: str = ""  # when it engaged (UTC, ISO 8601; "" when not engaged)
    promotions: int = 0  # within the window
    window_s: float = 60.0
    patience_s: float = 0.0  # what a silent (not gone) primary is given now
    broker_timeout_s: float = 0.0


@dataclass(frozen=True)
class AgentStatus:
    """One agent's record: its node, the reason it decides by, its fence brake, its claim."""

    node: str
    eligibility: str = ""
    brake: BrakeStatus = field(default_factory=BrakeStatus)
    #: its claim to become primary (ha_agent.primary_claim.Leadership: "idle",
    #: "contending", "leading", "resigning"; "" from an agent before issue 32): the other
    #: candidates let one on a less loaded node go first only while it tries
    #: (ha_agent.spread)
    claim: str = ""

    def to_json(self) -> bytes:
        body = {"version": WRITTEN_FORMAT, **asdict(self)}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes | None) -> AgentStatus:
        try:
            body = json.loads(data or b"")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ValueError("not an agent status record")
        try:
            record_format(body, "an agent status record")
        except ZkFormatError as exc:
            raise ValueError(str(exc)) from None
        node, eligibility = body.get("node"), body.get("eligibility", "")
        if not isinstance(node, str) or not isinstance(eligibility, str):
            raise ValueError(f"node and eligibility must be strings: {node!r}, {eligibility!r}")
        check_name("node", node)
        raw = body.get("brake")
        raw = raw if isinstance(raw, dict) else {}
        known = {k: raw[k] for k in BrakeStatus.__dataclass_fields__ if k in raw}
        try:
            brake = BrakeStatus(**known)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        claim = body.get("claim", "")
        return cls(node, eligibility, brake, claim if isinstance(claim, str) else "")


def brake_text(status: AgentStatus) -> str:
    """One line for people: the engaged brake of ``status``'s agent ("" when not engaged)."""
    b = status.brake
    if not b.engaged:
        return ""
    return (
        f"fence brake engaged on {status.node}'s agent since {b.since or '?'}: {b.promotions}"
        f" promotions within {b.window_s:g} s; a silent (not gone) primary is given"
        f" {b.patience_s:g} s (--broker-timeout {b.broker_timeout_s:g} s) before it is fenced"
    )


def read_statuses(client: Any, cluster: str) -> dict[str, AgentStatus]:
    """Every agent's record by node (empty when there is none). The records are read all
    at once (asynchronous reads, then their answers): two round trips to ZooKeeper however
    many agents there are."""
    parent = ClusterLayout(cluster).agents
    try:
        children = client.retry(client.get_children, parent)
    except NoNodeError:
        return {}
    pending = [(child, client.get_async(f"{parent}/{child}")) for child in sorted(children)]
    out: dict[str, AgentStatus] = {}
    for child, answer in pending:
        try:
            try:
                data, _ = answer.get()
            except (ConnectionLoss, OperationTimeoutError):  # as the retry policy would
                data, _ = client.retry(client.get, f"{parent}/{child}")
            status = AgentStatus.from_json(data)
        except (NoNodeError, ValueError):
            continue  # gone between the two reads, or not a record
        if status.node == child:
            out[child] = status
    return out


class StatusPublisher:
    """This agent's record: written when it changed. THREAD UNSAFE: the agent's loop."""

    def __init__(self, client: Any, cluster: str, node: str) -> None:
        self.client = client
        self.path = ClusterLayout(cluster).agent(node)
        self.published: AgentStatus | None = None
        self._session: int | None = None

    def publish(self, status: AgentStatus) -> bool:
        """Write ``status`` when it differs from the last written (or the session is new);
        True when it wrote."""
        client_id = self.client.client_id
        session = None if client_id is None else int(client_id[0])
        if status == self.published and session == self._session:
            return False
        data = status.to_json()
        try:
            self.client.retry(self.client.create, self.path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            _, stat = self.client.retry(self.client.get, self.path)
            if stat.ephemeralOwner != session:
                return False  # the last session's, until it expires: again next check
            self.client.retry(self.client.set, self.path, data)
        self.published, self._session = status, session
        return True
