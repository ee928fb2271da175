"""Who may promote a broker that a qpid-ha-agent manages: the rule, sans I/O.

A broker run by a ``qpid-ha-agent`` is promoted by its agent alone: the agents elect one
primary at a time, on epochs from ZooKeeper's counter, and keep the in-sync set. A promotion
from anyone else (``qpid-ha --cluster-manager promote`` by hand) makes a second primary
beside the agents' (both ``active``, both confirming; the agents' primary may commit this
broker's removal from the in-sync set and go on confirming without it, and its newer epoch
later fences the agents' primary): a way to lose confirmed messages. So the broker
refuses it.

How the broker knows (:class:`PromoteGuard`, one per broker, in memory):

- **Managed**: a broker started with ``ha-agent=NODE`` is managed by ``NODE`` from its
  start (nothing to wait for after a restart, even while its agent is down). Else the
  agent's health check reads ``GET /api/ha?manager=1&agent=NODE``; the
  first such read (or an agent's promotion) marks the broker managed by ``NODE``, sticky
  until the broker restarts (a later read with another name replaces the name only).
  ``manager=1`` alone does not mark (an agent of an older version, and a designated agent
  reading its ``--peer``, send no ``agent``); a broker nobody marked (the Pacemaker OCF agent
  runs ``qpid-ha --cluster-manager promote`` with no qpid-ha-agent) is promoted as before.
- **The agent's mark**: an agent's ``POST /api/ha/promote`` carries ``"agent": NODE``.
- **Force**: ``"force": true`` (``qpid-ha promote --force``) promotes a managed broker
  anyway, for when no agent runs any more; the handler logs it at level warning.

:func:`promote_refusal` is the rule: the reason to refuse, or None.

The same holds for a commit of the in-sync set (``POST /api/ha/in-sync``, ``qpid-ha
in-sync --commit`` by hand) on a managed primary (issue 26, item 2): its agent keeps the
set in ZooKeeper and commits it there first; a set committed by hand that leaves out a
member ZooKeeper still holds releases the confirms held for that member, which may still
be promoted without those messages (the promotion model found it). The agent's commit
carries its mark; ``--force`` overrides, for when no agent runs any more
(:func:`commit_refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.option_converters import agent_name

__all__ = ["PromoteGuard", "check_agent_name", "commit_refusal", "promote_refusal"]


def check_agent_name(name: object) -> str | None:
    """``name`` when it is an agent's node name (1 to 255 printable characters, no white
    space, as ``ha-agent`` takes it), else None."""
    if not isinstance(name, str):
        return None
    try:
        return agent_name(name)
    except ValueError:
        return None


def promote_refusal(managed_by: str | None, agent: str | None, force: bool) -> str | None:
    """Why a promotion must be refused, or None to go on.

    ``managed_by``: the agent that manages the broker (None: none seen since it started);
    ``agent``: the agent's mark on this request (None: not from an agent); ``force``: the
    operator overrides the agent (``qpid-ha promote --force``)."""
    if managed_by is None or agent is not None or force:
        return None
    return (
        f"refused: qpid-ha-agent of node {managed_by} manages this broker and promotes the"
        " primary itself; a promotion by hand makes a second primary beside the agents' and"
        " can lose confirmed messages. To move the primary, stop the agents' primary broker"
        " (the agents fail over); only when no agent runs any more, promote with --force"
        " (qpid-ha --cluster-manager promote --force)"
    )


def commit_refusal(managed_by: str | None, agent: str | None, force: bool) -> str | None:
    """Why a commit of the in-sync set must be refused, or None to go on (the arguments as
    :func:`promote_refusal`'s)."""
    if managed_by is None or agent is not None or force:
        return None
    return (
        f"refused: qpid-ha-agent of node {managed_by} manages this broker and keeps its"
        " in-sync set in ZooKeeper; a set committed by hand that leaves out a member"
        " ZooKeeper holds releases confirms that member may be promoted without. The agent"
        " commits removals itself; only when no agent runs any more, commit with --force"
        " (qpid-ha --cluster-manager in-sync --commit --force)"
    )


@dataclass
class PromoteGuard:
    """The broker's memory of its agent (sticky until the broker restarts) and the rule."""

    #: the node name of the agent that manages the broker (None: none seen)
    managed_by: str | None = None

    def agent_seen(self, agent: str) -> None:
        """An agent read the broker as its manager (``?manager=1&agent=NODE``) or promoted it."""
        self.managed_by = agent

    def refusal(self, agent: str | None, force: bool) -> str | None:
        """:func:`promote_refusal` for this broker; an agent's mark marks it managed."""
        if agent is not None:
            self.agent_seen(agent)
        return promote_refusal(self.managed_by, agent, force)

    def commit_refusal(self, agent: str | None, force: bool) -> str | None:
        """:func:`commit_refusal` for this broker; an agent's mark marks it managed."""
        if agent is not None:
            self.agent_seen(agent)
        return commit_refusal(self.managed_by, agent, force)
