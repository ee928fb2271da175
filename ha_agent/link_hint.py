"""The early hint: a backup's replication link to the primary is down (issue 10, item 7).

:Status: Beta

A backup's broker knows that the primary's broker is gone long before anything else does:
its replication link drops at once when the primary's process dies (the kernel closes its
sockets), or after ``2 x link-heartbeat-interval`` when it hangs. The primary's own agent
learns it at its next check (up to ``--check-interval`` later, plus the check's timeout for
a hung broker); the other agents learn it only from the primary's agent.

The hint shortens that, and only that. A backup's agent that sees its broker's link down
while ZooKeeper names another node primary (and the link was up under that primary record:
:class:`LinkWatch`) publishes an ephemeral znode
``/qpid-ha/<cluster>/hints/<node>`` (:class:`LinkHint`: the primary's node and epoch, the
broker's reason); it deletes it when the link is up again or the primary changed. The
primary's agent watches ``hints``: a hint naming its node and epoch makes it check its
broker *at once* instead of at its next check. What it then does is what any check decides
(:func:`ha_agent.promotion.decide`) on that fresh view: a broker that does not answer is
fenced and the agent resigns, so the next contender wins the election now; a broker that
answers (the link dropped for another reason: a partition between two nodes) is left alone,
and the in-sync set's removal protocol deals with the silent backup.

Safety never rests on the hint. It only moves a check earlier; promotion still happens only
through the election (kazoo's recipe: the old leader resigned, or its session expired) and
only of a member of the committed in-sync set. When the primary's whole node is gone (its
agent too), nobody acts on the hints: the other agents wait for the session's expiry, the
only proof that the old primary's lease has run out. Hints then cost one znode per backup.

:func:`hint_for` and :func:`hints_against` are pure; :class:`HintPublisher` owns this
agent's znode; :func:`read_hints` reads them all.

Error Handling
==============

- ZooKeeper calls raise kazoo's errors (connection loss, session expired); the agent logs
  them (``zookeeper_error``) and publishes again at its next check: a hint is best effort.
- A hint znode that cannot be parsed is left out of :func:`read_hints` (a debug line);
  :meth:`LinkHint.from_json` raises ValueError.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from typing import Any

import structlog
from kazoo.exceptions import NodeExistsError, NoNodeError

from ha_agent.promotion import BrokerView, PrimaryRecord
from ha_agent.zk_format import WRITTEN_FORMAT, ZkFormatError, record_format
from ha_agent.zk_layout import ClusterLayout, check_name

__all__ = ["HintPublisher", "LinkHint", "LinkWatch", "hint_for", "hints_against", "read_hints"]

_log = structlog.get_logger("ha_agent.link_hint", component="agent")

#: Backup states whose link may drop (a joining broker has not had one yet).
_LINKED_STATES = frozenset({"ready", "catch-up"})


@dataclass(frozen=True)
class LinkHint:
    """Backup ``node`` lost its link to ``primary`` (its node) at ``epoch``."""

    node: str
    primary: str
    epoch: int
    reason: str = ""

    def to_json(self) -> bytes:
        body = {"version": WRITTEN_FORMAT, **asdict(self)}
        return json.dumps(body, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes | None) -> LinkHint:
        try:
            record = json.loads(data or b"")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise ValueError("not a link hint")
        try:  # a hint of a format this agent cannot read is not acted on: left out
            record_format(record, "a link hint")
        except ZkFormatError as exc:
            raise ValueError(str(exc)) from None
        record.pop("version", None)
        try:
            hint = cls(**record)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(hint.epoch, int) or isinstance(hint.epoch, bool):
            raise ValueError(f"epoch must be an integer: {hint.epoch!r}")
        check_name("node", hint.node)
        check_name("node", hint.primary)
        return hint


def hint_for(
    node: str, broker: BrokerView | None, primary: PrimaryRecord | None
) -> LinkHint | None:
    """The hint agent ``node`` should publish: its broker is a backup whose link is down
    while ZooKeeper names another node primary; None otherwise (no hint, or withdraw it)."""
    if broker is None or primary is None or primary.node == node:
        return None
    if broker.ha_state not in _LINKED_STATES or broker.link_up is not False:
        return None
    return LinkHint(node, primary.node, primary.epoch, broker.link_error or "link down")


@dataclass
class LinkWatch:
    """Publish a hint only about a link that was up: the primary (node, epoch) under which
    this backup's link was last seen up. Without it, the backup that has not yet linked to
    a just promoted primary would hint against it, and the new primary's agent would check
    for nothing. THREAD UNSAFE: the agent's loop owns it."""

    linked: tuple[str, int] | None = None

    def observe(
        self, node: str, broker: BrokerView | None, primary: PrimaryRecord | None
    ) -> LinkHint | None:
        """The hint to publish now (:func:`hint_for`, once the link was up under ``primary``)."""
        current = None if primary is None else (primary.node, primary.epoch)
        if broker is not None and broker.link_up and current is not None:
            self.linked = current
        return hint_for(node, broker, primary) if self.linked == current else None


def hints_against(hints: list[LinkHint], node: str, epoch: int | None) -> list[LinkHint]:
    """The hints about the primary on ``node`` at ``epoch`` (this agent's promotion)."""
    if epoch is None:
        return []
    return [h for h in hints if h.primary == node and h.epoch == epoch and h.node != node]


def read_hints(client: Any, cluster: str) -> list[LinkHint]:
    """Every backup's hint (sorted by node)."""
    layout = ClusterLayout(cluster)
    try:
        children = client.retry(client.get_children, layout.hints)
    except NoNodeError:
        return []
    hints = []
    for child in sorted(children):
        try:
            data, _ = client.retry(client.get, f"{layout.hints}/{child}")
            hints.append(LinkHint.from_json(data))
        except NoNodeError:
            continue  # withdrawn between the two reads
        except ValueError as exc:
            _log.debug("link_hint_invalid", node=child, reason=str(exc))
    return hints


class HintPublisher:
    """This agent's hint znode. THREAD UNSAFE: the agent's loop owns it."""

    def __init__(self, client: Any, cluster: str, node: str) -> None:
        self.client = client
        self.path = ClusterLayout(cluster).hint(node)
        self.published: LinkHint | None = None
        self._session: int | None = None  # the session that created the znode

    def _session_id(self) -> int | None:
        client_id = self.client.client_id
        return None if client_id is None else int(client_id[0])

    def publish(self, hint: LinkHint | None) -> bool:
        """Make the znode say ``hint`` (delete it for None); True when something changed.
        A changed hint is deleted and created again, so that a children watch sees it. A
        hint of an ended session (its ephemeral znode is gone) counts as not published."""
        if self.published is not None and self._session != self._session_id():
            self.published = None
        if hint == self.published:
            return False
        if self.published is not None:
            with contextlib.suppress(NoNodeError):
                self.client.retry(self.client.delete, self.path)
            self.published = None
        if hint is not None:
            try:
                self.client.retry(
                    self.client.create, self.path, hint.to_json(), ephemeral=True, makepath=True
                )
            except NodeExistsError:  # this session's, left by a call that seemed to fail
                self.client.retry(self.client.set, self.path, hint.to_json())
            self.published = hint
            self._session = self._session_id()
        return True
