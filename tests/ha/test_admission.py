"""Whom an HA broker serves (broker/ha/admission.py), without sockets."""

from __future__ import annotations

import pytest

from broker.core.errors import ReplyCode, RoutineRefusal
from broker.ha.admission import client_refusal, link_user_refusal, redirect_address
from broker.ha.state import HaState
from common.url import Address

URL = "amqp://n1:5672,n2:5672"


@pytest.mark.parametrize("state", [HaState.RECOVERING, HaState.ACTIVE])
def test_a_serving_primary_admits(state: HaState) -> None:
    assert client_refusal(state, False, URL) is None


@pytest.mark.parametrize("state", [HaState.JOINING, HaState.CATCHUP, HaState.READY])
def test_a_backup_sends_clients_to_the_public_url(state: HaState) -> None:
    refusal = client_refusal(state, False, URL)
    assert refusal is not None and refusal.reply_code is ReplyCode.NOT_ALLOWED
    assert f"state {state.value}" in refusal.reply_text and URL in refusal.reply_text


def test_a_backup_names_where_a_redirected_client_goes() -> None:
    refusal = client_refusal(HaState.READY, False, URL, Address("n1", 5673))
    assert isinstance(refusal, RoutineRefusal) and refusal.redirect == ("n1", 5673)
    fenced = client_refusal(HaState.READY, True, URL, Address("n1", 5673))
    assert isinstance(fenced, RoutineRefusal) and fenced.redirect is None


def test_the_redirect_is_the_public_url_else_the_primary_else_nowhere() -> None:
    assert redirect_address("amqp:tcp:vip:5672,tcp:other:5672", "n1:5673") == Address("vip")
    assert redirect_address(None, "n1:5673") == Address("n1", 5673)
    assert redirect_address(None, "[::1]:5673") == Address("::1", 5673)
    assert redirect_address(None, None) is None


@pytest.mark.parametrize("state", list(HaState))
def test_a_broker_that_may_not_confirm_serves_nobody(state: HaState) -> None:
    refusal = client_refusal(state, True, URL)
    assert refusal is not None and refusal.reply_code is ReplyCode.NOT_ALLOWED
    assert "fenced" in refusal.reply_text


def test_links_only_from_ha_username() -> None:
    assert link_user_refusal(None, "anyone") is None
    assert link_user_refusal("replicator", "replicator") is None
    refusal = link_user_refusal("replicator", "guest")
    assert refusal is not None and refusal.reply_code is ReplyCode.ACCESS_REFUSED
    assert "'replicator'" in refusal.reply_text and "'guest'" in refusal.reply_text
