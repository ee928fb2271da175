"""When a candidate may take the primary record over: one named rule (issue 26, item 1).

:Status: Beta

A promotion is one ZooKeeper multi-op (:mod:`ha_agent.promotion_txn`) that deletes the old
primary's record (when there is one) and creates the new, ephemeral one, together with the
epoch and the in-sync set. Whether a candidate may try it, and whether it may delete an
old record that is still there, is decided here and nowhere else: by a
:class:`TakeoverRule`, asked with a :class:`TakeoverView` (the primary record as read, with
its znode version and owning session; the committed in-sync set; the member records).

The rule today is :class:`OldPrimaryGone`: **only once the old primary's record is gone**,
that is, its agent deleted it (it fenced its broker or resigned) or its ZooKeeper session
expired (the node is lost: ZooKeeper deletes the ephemeral record at the expiry, after the
session guard fenced the old broker, docs/agent.md, "Fencing: the timing argument"). It
never deletes a record: a record that is there belongs to a primary that may still serve.

The hook for the lease (issue 26, item 1's broker half, the next session): a second source,
"my broker's grant to the old epoch has lapsed, and every member of the committed set
supports the fast path", is one more :class:`TakeoverRule` whose :meth:`may_take_over`
answers ``Takeover(True, replace=view.old, ...)`` for a record still there; combined with
:class:`AnyOf` (``AnyOf(OldPrimaryGone(), LapsedGrant(...))``) and handed to the agent
(``Agent(settings, takeover=...)``). The multi-op then deletes that record at the version
read (never a ``setData`` on the dead session's node, whose expiry would delete the new
record), so a record that changed since fails the transaction, and nothing else changes.

Who asks: the claim's thread (:class:`ha_agent.primary_claim.PrimaryClaim`, whenever the
primary record changes, every second, and on :meth:`~ha_agent.primary_claim.PrimaryClaim.wake`)
and the agent's loop thread just before the multi-op
(:meth:`ha_agent.in_sync_keeper.InSyncKeeper.take`, with the record it deletes). A rule is
thread-safe and quick (an answer from the broker's liveness thread, not its event loop).

No I/O; raises nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ha_agent.cluster_records import InSyncRecord, PrimaryRecord
from ha_agent.membership import Member

__all__ = ["AnyOf", "OldPrimary", "OldPrimaryGone", "Takeover", "TakeoverRule", "TakeoverView"]


@dataclass(frozen=True)
class OldPrimary:
    """The primary record as read: its content (None: one that cannot be parsed), its znode
    data ``version`` (what a delete must name) and the session that owns it."""

    record: PrimaryRecord | None
    version: int
    owner: int


@dataclass(frozen=True)
class TakeoverView:
    """What a rule reads: the primary record (None: there is none), the committed in-sync
    set (None: none recorded) and the member records."""

    old: OldPrimary | None
    in_sync: InSyncRecord | None = None
    members: Mapping[str, Member] = field(default_factory=dict)


@dataclass(frozen=True)
class Takeover:
    """A rule's answer: ``allowed`` to try the promotion's multi-op; ``replace``: the old
    record it deletes in that multi-op (None: it creates the record where there is none);
    ``reason``: why, for the log."""

    allowed: bool
    reason: str
    replace: OldPrimary | None = None


class TakeoverRule(Protocol):
    """Decides whether a candidate may take the primary record over now."""

    def may_take_over(self, view: TakeoverView) -> Takeover:
        """Allowed or not, and which old record the multi-op deletes."""
        ...


class OldPrimaryGone:
    """The rule of this release: the old primary's record is gone (its agent deleted it, or
    its session expired). A record still there is never replaced."""

    def may_take_over(self, view: TakeoverView) -> Takeover:
        old = view.old
        if old is None:
            return Takeover(True, "no primary record: the old primary's is gone")
        record = old.record
        who = "an unreadable record" if record is None else f"{record.node} (epoch {record.epoch})"
        return Takeover(False, f"the primary record names {who}: waiting for it to go")


class AnyOf:
    """The first rule that allows, in order (e.g. the record gone, else a lapsed grant)."""

    def __init__(self, *rules: TakeoverRule) -> None:
        self.rules = rules

    def may_take_over(self, view: TakeoverView) -> Takeover:
        refused = Takeover(False, "no rule")
        for rule in self.rules:
            answer = rule.may_take_over(view)
            if answer.allowed:
                return answer
            refused = answer if refused.reason == "no rule" else refused
        return refused
