"""The HA state table: exactly Qpid's legal transitions, everything else refused."""

from __future__ import annotations

import itertools

import pytest

from broker.ha.state import TRANSITIONS, HaState, IllegalTransition, check_transition

S = HaState

LEGAL = {
    (S.STANDALONE, S.JOINING),
    (S.JOINING, S.CATCHUP),
    (S.JOINING, S.RECOVERING),
    (S.CATCHUP, S.READY),
    (S.READY, S.RECOVERING),
    (S.READY, S.CATCHUP),
    (S.RECOVERING, S.ACTIVE),
}


def test_table_is_qpids() -> None:
    assert set(TRANSITIONS) == LEGAL
    assert all(reason for reason in TRANSITIONS.values())


@pytest.mark.parametrize(("old", "new"), list(itertools.product(HaState, HaState)))
def test_every_pair(old: HaState, new: HaState) -> None:
    if (old, new) in LEGAL:
        assert check_transition(old, new)
    else:
        with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value}"):
            check_transition(old, new)


def test_roles() -> None:
    assert {s for s in HaState if s.is_primary} == {S.RECOVERING, S.ACTIVE}
    assert {s for s in HaState if s.is_backup} == {S.JOINING, S.CATCHUP, S.READY}


@pytest.mark.parametrize("text", ["catch-up", "catchup", "CATCHUP", " catch-up "])
def test_parse(text: str) -> None:
    assert HaState.parse(text) is S.CATCHUP


def test_parse_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="unknown HA state 'primary'"):
        HaState.parse("primary")
