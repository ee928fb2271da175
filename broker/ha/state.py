"""HA broker states and the legal moves between them (seed 001, "HA Broker States").

The names are the seed's: a broker outside a cluster is STANDALONE; in a cluster it starts
JOINING (not yet connected to a primary), is CATCHUP while it downloads the primary's state,
READY when caught up and fit to take over, RECOVERING when newly promoted and waiting for
the expected backups, ACTIVE when serving with every backup ready.

:data:`TRANSITIONS` is the one table of legal moves, each edge with the reason it exists
(after Qpid's ``Membership.cpp``). :func:`check_transition` refuses anything else: an
illegal move is a bug, and the broker stops rather than run inconsistent.
"""

from __future__ import annotations

from enum import Enum


class HaState(Enum):
    STANDALONE = "standalone"  # not part of an HA cluster
    JOINING = "joining"  # newly started, not yet connected to a primary
    CATCHUP = "catch-up"  # connected to the primary, downloading its state
    READY = "ready"  # caught up with the primary, fit to be promoted
    RECOVERING = "recovering"  # newly promoted, waiting for expected backups
    ACTIVE = "active"  # the primary, all expected backups ready

    @property
    def is_primary(self) -> bool:
        return self in (HaState.RECOVERING, HaState.ACTIVE)

    @property
    def is_backup(self) -> bool:
        return self in (HaState.JOINING, HaState.CATCHUP, HaState.READY)

    @classmethod
    def parse(cls, text: str) -> HaState:
        """A state from its name ("catch-up"/"catchup" both accepted)."""
        key = text.strip().lower()
        for state in cls:
            if key in (state.value, state.value.replace("-", "")):
                return state
        names = ", ".join(s.value for s in cls)
        raise ValueError(f"unknown HA state {text!r}: expected one of {names}")


S = HaState

#: Legal moves, each with why it happens.
TRANSITIONS: dict[tuple[HaState, HaState], str] = {
    (S.STANDALONE, S.JOINING): "the broker joins a cluster (ha-cluster=yes)",
    (S.JOINING, S.CATCHUP): "a primary accepted this backup; downloading its state",
    (S.JOINING, S.RECOVERING): "promoted in a new cluster where every broker was joining",
    (S.CATCHUP, S.READY): "every replicated queue caught up",
    (S.READY, S.RECOVERING): "promoted: the primary failed",
    (S.READY, S.CATCHUP): "the primary changed: catching up with the new one",
    (S.RECOVERING, S.ACTIVE): "every expected backup is ready, or ha-backup-timeout passed",
}


class IllegalTransition(RuntimeError):
    """A move outside :data:`TRANSITIONS`: a bug; the broker shuts down."""


def check_transition(old: HaState, new: HaState) -> str:
    """The reason for a legal move; :class:`IllegalTransition` for any other."""
    try:
        return TRANSITIONS[(old, new)]
    except KeyError:
        raise IllegalTransition(f"illegal HA state transition {old.value} -> {new.value}") from None
