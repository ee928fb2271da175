"""Member records: ephemeral JSON znodes, one per agent."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ha_agent.membership import (
    MEMBER_SCHEMA,
    STORE_STATUSES,
    Member,
    MemberConflictError,
    MemberPublisher,
    MemberRecordError,
    read_members,
)
from ha_agent.zk_layout import ClusterLayout

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
members = st.builds(
    Member,
    node=names,
    broker_url=st.text(max_size=40),
    ha_state=st.sampled_from(["joining", "catch-up", "ready", "recovering", "active"]),
    epoch=st.integers(min_value=0, max_value=2**63 - 1),
    store_status=st.sampled_from(sorted(STORE_STATUSES)),
    replication_position=st.integers(min_value=0, max_value=2**63 - 1),
    broker_id=st.text(max_size=40),
)


@given(members)
def test_a_record_survives_json(member: Member) -> None:
    data = member.to_json()
    assert json.loads(data)["version"] == MEMBER_SCHEMA
    assert Member.from_json(data) == member


def test_a_record_without_broker_id_reads_as_empty() -> None:
    """Schema 1 before the in-sync set: no broker_id field."""
    old = (
        b'{"version": 1, "node": "a", "broker_url": "u", "ha_state": "ready", "epoch": 2,'
        b' "store_status": "clean", "replication_position": 5}'
    )
    expected = Member(
        "a", "u", "ready", 2, "clean", 5, "", replication_formats="1-1", zookeeper_formats="1-1"
    )
    assert Member.from_json(old) == expected  # and of a build before 0.1.0: format 1


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not JSON"),
        (b"\xff", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"node": "a", "broker_url": "u"}', "missing"),  # no version: format 1
        (b'{"version": "2", "node": "a", "broker_url": "u"}', "bad version"),
        (b'{"version": 1, "node": "a", "broker_url": "u"}', "missing"),
    ],
)
def test_bad_records_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(MemberRecordError, match=reason):
        Member.from_json(data)


@pytest.mark.parametrize(
    "changes",
    [
        {"epoch": -1},
        {"epoch": True},
        {"epoch": "3"},
        {"replication_position": 1.5},
        {"store_status": "fine"},
        {"node": "a/b"},
        {"ha_state": None},
    ],
)
def test_bad_fields_are_refused(changes: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"node": "n1", "broker_url": "amqp://h:1", **changes}
    with pytest.raises(MemberRecordError):
        Member(**fields)


def test_publish_update_read(zk: Any, cluster: str) -> None:
    assert read_members(zk, cluster) == {}
    one = MemberPublisher(zk, cluster, Member("n1", "amqp://127.0.0.1:5672", "joining"))
    one.publish()
    _, stat = zk.get(ClusterLayout(cluster).member("n1"))
    assert stat.ephemeralOwner == zk.client_id[0]
    assert read_members(zk, cluster) == {"n1": one.member}

    updated = one.update(ha_state="ready", epoch=3, store_status="clean", replication_position=9)
    assert updated == Member("n1", "amqp://127.0.0.1:5672", "ready", 3, "clean", 9)
    assert read_members(zk, cluster)["n1"] == updated
    with pytest.raises(MemberRecordError):
        one.update(epoch=-2)
    assert read_members(zk, cluster)["n1"] == updated  # nothing written

    one.publish()  # again, same session: overwrites, no conflict
    assert one.withdraw() is True
    assert one.withdraw() is False
    assert read_members(zk, cluster) == {}


def test_records_are_ephemeral(make_client: Any, cluster: str) -> None:
    watcher = make_client()
    for node in ("n1", "n2"):
        MemberPublisher(make_client(), cluster, Member(node, f"amqp://{node}")).publish()
    assert sorted(read_members(watcher, cluster)) == ["n1", "n2"]
    gone = MemberPublisher(make_client(), cluster, Member("n3", "amqp://n3"))
    gone.publish()
    gone.client.stop()  # closes the session: its ephemeral node goes at once
    assert sorted(read_members(watcher, cluster)) == ["n1", "n2"]


def test_update_recreates_a_record_lost_with_the_session(zk: Any, cluster: str) -> None:
    publisher = MemberPublisher(zk, cluster, Member("n1", "amqp://n1"))
    publisher.publish()
    zk.delete(publisher.path)  # as after LOST: the new session has no record
    publisher.update(ha_state="ready")
    assert read_members(zk, cluster)["n1"].ha_state == "ready"


def test_invalid_records_are_left_out(zk: Any, cluster: str) -> None:
    layout = ClusterLayout(cluster)
    MemberPublisher(zk, cluster, Member("good", "amqp://g")).publish()
    zk.create(layout.member("junk"), b"not json", makepath=True)
    zk.create(layout.member("liar"), Member("other", "amqp://o").to_json())
    try:
        assert list(read_members(zk, cluster)) == ["good"]
        invalid: list[str] = []
        assert list(read_members(zk, cluster, invalid=invalid)) == ["good"]
        assert [text.split(":")[0] for text in invalid] == [
            layout.member("junk"),
            layout.member("liar"),
        ]
    finally:  # persistent records: qpid-ha status --all on this ZooKeeper would show them
        zk.delete(layout.member("junk"))
        zk.delete(layout.member("liar"))


def test_a_live_record_of_another_session_is_never_taken(make_client: Any, cluster: str) -> None:
    first = MemberPublisher(make_client(), cluster, Member("n1", "amqp://old"))
    first.publish()
    second = MemberPublisher(make_client(), cluster, Member("n1", "amqp://new"))
    with pytest.raises(MemberConflictError, match="belongs to ZooKeeper session") as info:
        second.publish()
    assert info.value.owner == first.client.client_id[0]
    with pytest.raises(MemberConflictError):
        second.update(ha_state="ready")
    assert second.withdraw() is False
    assert read_members(second.client, cluster)["n1"].broker_url == "amqp://old"


def test_publish_waits_for_the_old_session_to_go(make_client: Any, cluster: str) -> None:
    old = MemberPublisher(make_client(), cluster, Member("n1", "amqp://old"))
    old.publish()
    new = MemberPublisher(make_client(), cluster, Member("n1", "amqp://new"))
    stopper = threading.Timer(0.3, old.client.stop)
    stopper.start()
    began = time.monotonic()
    new.publish(timeout=10)
    waited = time.monotonic() - began
    stopper.join()
    assert 0.2 < waited < 5
    assert read_members(new.client, cluster)["n1"].broker_url == "amqp://new"


def test_update_waits_for_an_old_sessions_record_to_go(make_client: Any, cluster: str) -> None:
    """After LOST the agent's new session may find its old session's record still there (a
    ZooKeeper electing a leader applies the expiry a moment later): the update waits for
    it to go and writes its own, instead of raising (the agent's thread died on it)."""
    old = MemberPublisher(make_client(), cluster, Member("n1", "amqp://n1"))
    old.publish()
    new = MemberPublisher(make_client(), cluster, Member("n1", "amqp://n1"))
    with pytest.raises(MemberConflictError):
        new.update(ha_state="ready")  # no wait: a live record of another session
    assert read_members(new.client, cluster)["n1"].ha_state == old.member.ha_state
    stopper = threading.Timer(0.3, old.client.stop)  # the old session ends
    stopper.start()
    new.update(wait=10, ha_state="ready")
    stopper.join()
    record = read_members(new.client, cluster)["n1"]
    assert record.ha_state == "ready" and new.member.ha_state == "ready"
    _, stat = new.client.get(new.path)
    assert stat.ephemeralOwner == new.client.client_id[0]
