"""Tell the primary which replication formats the cluster's members speak.

A primary holds a client's declare to what the lowest format a link to any member would
use can carry (:class:`broker.ha.replication_contract.ContractFloor`): while a member of
release 0.1.0 (replication format 1) is in the cluster, a queue name of 250 bytes or
arguments 40 deep are refused with 406 naming that member, instead of being accepted and
then refusing that member's link. The primary's agent reads the member records
(:mod:`ha_agent.membership`: ``replication_formats``, ``"1-1"`` for a record of a build
before 0.1.0) at every check and, when they changed since it last told this broker
(or the broker restarted: a new broker id), posts them (``POST /api/ha/members``).

This is the early word, for clients; the promise does not rest on it: a backup link the
primary admitted counts from connection.open, and a link whose format cannot carry what
the primary already holds is refused then (docs/ha-design.md, "Format versions").

Blocking (one HTTP call when something changed): the agent's check loop calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import structlog

from broker.management.client import ManagementError
from ha_agent.broker_check import PromoteRefused
from ha_agent.membership import Member

__all__ = ["MemberFormats"]

_log = structlog.get_logger("ha_agent.member_formats", component="agent")


class _Tells(Protocol):
    def tell_member_formats(self, formats: dict[str, str]) -> dict[str, object]:
        """``POST /api/ha/members``; the broker's answer (its floor)."""
        ...


class MemberFormats:
    """What this agent last told its broker (see the module docstring)."""

    def __init__(self) -> None:
        self._told: tuple[str, dict[str, str]] | None = None

    def tell(self, broker: _Tells, broker_id: str, members: Mapping[str, Member]) -> bool:
        """Post the members' formats to ``broker`` (id ``broker_id``) if they changed since
        last told; True once told (a failure is tried again at the next check)."""
        formats = {node: m.replication_formats for node, m in sorted(members.items())}
        if not formats or self._told == (broker_id, formats):
            return False
        try:
            answer = broker.tell_member_formats(formats)
        except (ManagementError, PromoteRefused, OSError):
            return False  # the next check tries again (advice: the links hold the promise)
        self._told = (broker_id, formats)
        _log.info("member_formats_told", formats=formats, floor=answer.get("format"))
        return True
