"""A claim to become primary, against a real ZooKeeper (:mod:`ha_agent.primary_claim`).

With the lock (an in-sync set in ZooKeeper format 1) a claim behaves as kazoo's election
did: one leader at a time, handed over when the leader's session closes or it resigns.
Without it, every claim waits for the primary record to go and then leads at once: the
promotion's multi-op, not the claim, decides which one commits.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from common.polling import poll_until
from ha_agent import primary_claim
from ha_agent.in_sync import VersionedInSync
from ha_agent.primary_claim import Leadership, PrimaryClaim
from ha_agent.primary_record import delete_primary, encode_primary
from ha_agent.promotion import InSyncRecord, PrimaryRecord
from ha_agent.takeover import OldPrimaryGone
from ha_agent.zk_layout import ClusterLayout


class Contender:
    """A PrimaryClaim with its callbacks recorded; ``lock``: claims take kazoo's lock."""

    def __init__(
        self,
        client: Any,
        cluster: str,
        node: str,
        fail: bool = False,
        lock: bool = True,
        in_sync: VersionedInSync | None = None,
    ) -> None:
        self.led = threading.Event()
        self.led_at = 0.0
        self.ended: list[str] = []
        #: the claims' numbers, as they ended
        self.numbers: list[int] = []
        self.fail = fail
        self.election = PrimaryClaim(
            client,
            cluster,
            node,
            OldPrimaryGone(),
            lambda: (in_sync, {}),
            self.on_leading,
            self.on_ended,
        )
        self.lock = lock

    def contend(self) -> bool:
        return self.election.contend(lock=self.lock)

    def on_ended(self, reason: str, number: int) -> None:
        self.numbers.append(number)
        self.ended.append(reason)

    def on_leading(self) -> None:
        self.led_at = time.monotonic()
        self.led.set()
        if self.fail:
            raise RuntimeError("promotion failed")


def test_contends_only_when_told(zk: Any, cluster: str) -> None:
    a = Contender(zk, cluster, "a")
    assert a.election.state is Leadership.IDLE
    assert a.election.contenders() == []
    assert a.contend() is True
    assert a.contend() is False  # one contention at a time
    assert a.led.wait(5)
    assert a.election.leading and a.election.term == 1
    assert a.election.contenders() == ["a"]
    assert a.election.cancel() is True
    assert a.election.state is Leadership.IDLE and a.election.term is None
    assert a.ended == ["cancelled"] and a.numbers == [1]
    assert a.election.contenders() == []
    # each claim has its number, and its end names it (the agent tells an older claim's
    # end from the current one's by it)
    assert a.contend() is True and a.election.term == 2
    assert a.election.cancel() is True
    assert a.numbers == [1, 2]


def test_the_other_leads_when_the_leaders_session_closes(make_client: Any, cluster: str) -> None:
    a = Contender(make_client(), cluster, "a")
    b = Contender(make_client(), cluster, "b")
    a.contend()
    assert a.led.wait(5)
    b.contend()
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
    a.contend()
    assert a.led.wait(5)
    b.contend()
    poll_until(lambda: len(a.election.contenders()) == 2, 5, "b contending")
    assert a.election.cancel() is True
    assert b.led.wait(5)
    assert a.ended == ["cancelled"] and not a.election.leading
    assert b.election.contenders() == ["b"]


def test_a_contender_cancelled_before_winning_never_leads(make_client: Any, cluster: str) -> None:
    a = Contender(make_client(), cluster, "a")
    b = Contender(make_client(), cluster, "b")
    a.contend()
    assert a.led.wait(5)
    b.contend()
    poll_until(lambda: len(a.election.contenders()) == 2, 5, "b contending")
    assert b.election.cancel() is True
    assert b.ended == ["cancelled"]
    assert a.election.contenders() == ["a"]
    a.election.cancel()
    assert not b.led.is_set()
    # and b can contend again later
    b.contend()
    assert b.led.wait(5)
    b.election.cancel()


def test_a_failing_callback_gives_up_the_leadership(make_client: Any, cluster: str) -> None:
    a = Contender(make_client(), cluster, "a", fail=True)
    b = Contender(make_client(), cluster, "b")
    b_client = b.election.client
    a.contend()
    assert a.led.wait(5)
    poll_until(lambda: a.ended == ["callback_failed"], 5, "a gave up")
    b.contend()
    assert b.led.wait(5)
    assert Contender(b_client, cluster, "x").election.contenders() == ["b"]
    b.election.cancel()


def test_without_the_lock_claims_wait_for_the_record_to_go(
    make_client: Any, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lock-free claims lead only once the primary record is gone, all of them at once
    (the multi-op decides), woken by the record's watch (the recheck is put off here)."""
    monkeypatch.setattr(primary_claim, "RECHECK", 60.0)
    holder = make_client()
    path = ClusterLayout(cluster).primary
    holder.create(path, encode_primary(PrimaryRecord("n1", 1), None), ephemeral=True, makepath=True)
    in_format_2 = VersionedInSync(InSyncRecord(1), 0, format=2)
    b = Contender(make_client(), cluster, "b", lock=False, in_sync=in_format_2)
    c = Contender(make_client(), cluster, "c", lock=False, in_sync=in_format_2)
    b.contend()
    c.contend()
    poll_until(lambda: b.election.state is Leadership.CONTENDING, 5, "b claiming")
    assert not b.led.wait(1.5) and not c.led.is_set()  # the record is there
    assert b.election.contenders() == []  # no lock taken
    gone_at = time.monotonic()
    assert delete_primary(holder, cluster)
    assert b.led.wait(30) and c.led.wait(30)  # the watch: the recheck is a minute away
    print(f"claims led {(max(b.led_at, c.led_at) - gone_at) * 1000:.0f} ms after the record went")
    assert b.election.leading and c.election.leading and not b.election.locked
    b.election.cancel()
    c.election.cancel()
    assert b.ended == ["cancelled"] and c.ended == ["cancelled"]


def test_a_lock_free_claim_withdraws_once_the_set_needs_the_lock(
    make_client: Any, cluster: str
) -> None:
    """A claim without the lock that sees the set in format 1 (or none) withdraws: the
    agent claims again, with the lock."""
    holder = make_client()
    path = ClusterLayout(cluster).primary
    holder.create(path, encode_primary(PrimaryRecord("n1", 1), None), ephemeral=True, makepath=True)
    a = Contender(make_client(), cluster, "a", lock=False)  # its context: no set at all
    a.contend()
    poll_until(lambda: a.ended != [], 5, "the claim withdrawn")
    assert a.ended == ["the lock is needed: the in-sync set is in ZooKeeper format 1"]
    assert not a.led.is_set()
