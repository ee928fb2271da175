"""Leader election through kazoo's recipe, against a real ZooKeeper."""

from __future__ import annotations

import threading
import time
from typing import Any

from common.polling import poll_until
from ha_agent.election import LeaderElection, Leadership


class Contender:
    """A LeaderElection with its callbacks recorded."""

    def __init__(self, client: Any, cluster: str, node: str, fail: bool = False) -> None:
        self.led = threading.Event()
        self.led_at = 0.0
        self.ended: list[str] = []
        self.fail = fail
        self.election = LeaderElection(client, cluster, node, self.on_leading, self.ended.append)

    def on_leading(self) -> None:
        self.led_at = time.monotonic()
        self.led.set()
        if self.fail:
            raise RuntimeError("promotion failed")


def test_contends_only_when_told(zk: Any, cluster: str) -> None:
    a = Contender(zk, cluster, "a")
    assert a.election.state is Leadership.IDLE
    assert a.election.contenders() == []
    assert a.election.contend() is True
    assert a.election.contend() is False  # one contention at a time
    assert a.led.wait(5)
    assert a.election.leading
    assert a.election.contenders() == ["a"]
    assert a.election.cancel() is True
    assert a.election.state is Leadership.IDLE
    assert a.ended == ["cancelled"]
    assert a.election.contenders() == []


def test_the_other_leads_when_the_leaders_session_closes(make_client: Any, cluster: str) -> None:
    a = Contender(make_client(), cluster, "a")
    b = Contender(make_client(), cluster, "b")
    a.election.contend()
    assert a.led.wait(5)
    b.election.contend()
    poll_until(lambda: a.election.contenders() == ["a", "b"], 5, "b contending")
    assert not b.led.is_set() and b.election.state is Leadership.CONTENDING

    closed_at = time.monotonic()
    a.election.client.stop()  # closes the session: its contender znode goes at once
    assert b.led.wait(5), "b did not lead"
    handover = b.led_at - closed_at
    print(f"election hand-over after the leader's session closed: {handover * 1000:.0f} ms")
    assert handover < 2.0
    poll_until(lambda: a.ended == ["session_lost"], 5, "a's contention ended")
    assert a.election.state is Leadership.IDLE
    assert b.election.contenders() == ["b"]
    b.election.cancel()


def test_cancel_resigns_and_hands_over(make_client: Any, cluster: str) -> None:
    a = Contender(make_client(), cluster, "a")
    b = Contender(make_client(), cluster, "b")
    a.election.contend()
    assert a.led.wait(5)
    b.election.contend()
    poll_until(lambda: len(a.election.contenders()) == 2, 5, "b contending")
    assert a.election.cancel() is True
    assert b.led.wait(5)
    assert a.ended == ["cancelled"] and not a.election.leading
    assert b.election.contenders() == ["b"]


def test_a_contender_cancelled_before_winning_never_leads(make_client: Any, cluster: str) -> None:
    a = Contender(make_client(), cluster, "a")
    b = Contender(make_client(), cluster, "b")
    a.election.contend()
    assert a.led.wait(5)
    b.election.contend()
    poll_until(lambda: len(a.election.contenders()) == 2, 5, "b contending")
    assert b.election.cancel() is True
    assert b.ended == ["cancelled"]
    assert a.election.contenders() == ["a"]
    a.election.cancel()
    assert not b.led.is_set()
    # and b can contend again later
    b.election.contend()
    assert b.led.wait(5)
    b.election.cancel()


def test_a_failing_callback_gives_up_the_leadership(make_client: Any, cluster: str) -> None:
    a = Contender(make_client(), cluster, "a", fail=True)
    b = Contender(make_client(), cluster, "b")
    b_client = b.election.client
    a.election.contend()
    assert a.led.wait(5)
    poll_until(lambda: a.ended == ["callback_failed"], 5, "a gave up")
    b.election.contend()
    assert b.led.wait(5)
    assert LeaderElection(b_client, cluster, "x", lambda: None).contenders() == ["b"]
    b.election.cancel()
