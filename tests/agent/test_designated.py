"""``--designated-primary``'s rules without I/O (issue 12, item 5): when the override is
refused, the epoch it takes, and its options. End to end: ``test_two_brokers.py``."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.log import get_log_context, reset_logging
from ha_agent.designated import DesignatedPrimary, PeerStatus, designated_epoch, refusal
from ha_agent.promotion import PRIMARY_STATES, BrokerView
from ha_agent.settings import AgentSettings
from tests.agent.agent_cluster import AGENT

STATES = ["joining", "catch-up", "ready", "active", "recovering", "standalone", None]


def peer(state: str | None, epoch: int = 0, via: str = "management") -> PeerStatus:
    return PeerStatus("127.0.0.1:8672", via, state, epoch)


@pytest.mark.parametrize(
    ("local", "peers", "zookeeper", "why"),
    [
        ("ready", [peer(None)], False, ""),
        ("joining", [peer("joining")], False, ""),
        ("active", [peer(None)], False, ""),  # already primary (the agent restarted)
        ("ready", [peer("active")], False, "answers as primary (active, checked over management"),
        ("ready", [peer(None), peer("recovering", via="amqp")], False, "over amqp"),
        ("active", [peer("active")], False, "answers as primary"),
        ("catch-up", [peer(None)], False, "still catching up"),
        ("unknown", [peer(None)], False, "the broker is unknown"),
        ("ready", [peer(None)], True, "ZooKeeper answers (a quorum)"),
    ],
)
def test_refusal(local: str, peers: list[PeerStatus], zookeeper: bool, why: str) -> None:
    reason = refusal(BrokerView(local, 3), peers, zookeeper)
    assert (reason == "") if not why else (why in reason)


def test_a_broker_that_does_not_answer_is_refused() -> None:
    assert refusal(None, [], False) == "the local broker does not answer"


@given(
    st.sampled_from(STATES[:-1]),
    st.lists(st.tuples(st.sampled_from(STATES), st.integers(0, 9)), max_size=3),
    st.booleans(),
    st.integers(0, 9),
)
def test_never_beside_a_primary_that_answers_and_always_above_every_epoch(
    local: str, peers: list[tuple[str | None, int]], zookeeper: bool, epoch: int
) -> None:
    checked = [peer(state, e) for state, e in peers]
    reason = refusal(BrokerView(local, epoch), checked, zookeeper)
    if any(state in PRIMARY_STATES for state, _e in peers):
        assert "answers as primary" in reason
    if not reason and local not in PRIMARY_STATES:
        assert not zookeeper and local in ("ready", "joining")
    new = designated_epoch(BrokerView(local, epoch), checked)
    assert new > epoch and all(new > e for _s, e in peers)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--designated-primary"], "--designated-primary needs --peer"),
        (["--designated-primary", "--peer=a:b:c:d"], "--peer"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    run = subprocess.run(
        [AGENT, "--zk=127.0.0.1:1", "--cluster=c", "--node=n1", "--broker=127.0.0.1:1", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and message in run.stderr


class PromotingBroker:
    """A broker check whose promote is answered (no I/O)."""

    address = "127.0.0.1:8672"

    def promote(self, epoch: int, timeout: float, in_sync: list[str]) -> dict[str, str]:
        return {"state": "recovering"}


def test_a_designated_promotion_sets_the_agents_log_epoch() -> None:
    """docs/log-schema.md: an agent's ``epoch`` is the epoch it last promoted its broker
    with; the designated primary's promotion is one."""
    settings = AgentSettings(
        "127.0.0.1:1", "c", "n1", "127.0.0.1:8672", designated_primary=True,
        peers=("127.0.0.1:8673",),
    )  # fmt: skip
    designated = DesignatedPrimary(settings)
    designated.broker_check = PromotingBroker()  # type: ignore[assignment]
    reset_logging()
    try:
        assert designated._promote(BrokerView("ready", 3), [peer(None, 5)])
        assert designated.epoch == 6 and get_log_context()["epoch"] == 6
    finally:
        reset_logging()
