"""The ZooKeeper format of the agents' records (ha_agent.zk_format).

- A record without a ``version`` is format 1, and every record as today's (pre-0.1.0) main
  writes it reads as before: a cluster of it can be upgraded.
- A record of a format this agent cannot read is a fault, never garbage and never "no
  record": the member, primary and in-sync readers raise it with one line naming the path,
  the format found and the formats read; the agent logs ``zk_record_format_unknown`` once and
  a backup's agent does not contend (nor a contender stay in the election).
- :func:`cluster_speaks`: a feature of a format is used only once every member reports it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from common.formats import FormatRange
from common.version import REPLICATION_FORMATS, ZOOKEEPER_FORMATS
from ha_agent.in_sync import InSyncFormatError, InSyncRecordError, decode_in_sync, read_in_sync
from ha_agent.link_hint import LinkHint
from ha_agent.membership import Member, MemberPublisher, cluster_speaks, read_members
from ha_agent.primary_record import decode_primary, read_primary
from ha_agent.promotion import BrokerView, ClusterView, Step, decide
from ha_agent.zk_format import FormatFaults, ZkFormatError, record_format
from ha_agent.zk_layout import ClusterLayout

#: Records byte for byte as the agents of main before release 0.1.0 wrote them.
OLD_MEMBER = (
    b'{"broker_id":"b2","broker_url":"127.0.0.1:5672","epoch":3,"ha_state":"ready",'
    b'"node":"n2","replication_position":9,"store_id":"s2","store_status":"clean","version":1}'
)
OLD_PRIMARY = b'{"broker_url":"127.0.0.1:5672","epoch":3,"node":"n1","version":1,"vip":null}'
OLD_IN_SYNC = (
    b'{"epoch":3,"members":[{"broker_id":"b2","node":"n2","store_id":"s2","url":"u2"}],'
    b'"primary_store_id":"s1","version":1}'
)
OLD_HINT = b'{"epoch": 3, "node": "n2", "primary": "n1", "reason": "", "version": 1}'


def test_a_record_without_a_version_is_format_1() -> None:
    assert record_format({}, "a record") == 1
    assert record_format({"version": 1}, "a record") == 1
    with pytest.raises(ZkFormatError, match=r"^a record is in ZooKeeper format 3; this agent"):
        record_format({"version": 3}, "a record")
    for bad in ("1", 0, True, None):
        with pytest.raises(ValueError, match="bad version"):
            record_format({"version": bad}, "a record")


def test_the_records_of_main_before_0_1_0_read_as_before() -> None:
    member = Member.from_json(OLD_MEMBER)
    assert (member.node, member.epoch, member.store_id) == ("n2", 3, "s2")
    assert (member.replication_formats, member.zookeeper_formats) == ("1-1", "1-1")
    record, vip = decode_primary(OLD_PRIMARY) or (None, None)
    assert record is not None and (record.node, record.epoch, vip) == ("n1", 3, None)
    in_sync = decode_in_sync(OLD_IN_SYNC)
    assert in_sync.epoch == 3 and in_sync.broker_ids == frozenset({"b2"})
    assert LinkHint.from_json(OLD_HINT) == LinkHint("n2", "n1", 3)


def newer(data: bytes) -> bytes:
    return json.dumps({**json.loads(data), "version": 3}).encode()


def test_a_record_of_a_newer_format_is_a_fault_not_garbage() -> None:
    with pytest.raises(ZkFormatError, match="a member record is in ZooKeeper format 3"):
        Member.from_json(newer(OLD_MEMBER))
    with pytest.raises(ZkFormatError, match="the primary record is in ZooKeeper format 3"):
        decode_primary(newer(OLD_PRIMARY))  # not None: "no primary" would be a misreading
    with pytest.raises(InSyncFormatError) as info:
        decode_in_sync(newer(OLD_IN_SYNC))
    assert isinstance(info.value, InSyncRecordError) and info.value.found == 3
    with pytest.raises(ValueError, match="a link hint is in ZooKeeper format 3"):
        LinkHint.from_json(newer(OLD_HINT))  # left out of read_hints: a hint is advice


def test_what_this_agent_writes_is_format_1_and_says_what_it_speaks() -> None:
    body = json.loads(Member("n1", "u").to_json())
    assert body["version"] == 1
    assert (body["replication_formats"], body["zookeeper_formats"]) == (
        REPLICATION_FORMATS.text,
        ZOOKEEPER_FORMATS.text,
    )


@st.composite
def ranges(draw: st.DrawFn) -> FormatRange:
    low = draw(st.integers(1, 5))
    return FormatRange(low, draw(st.integers(low, 5)))


@given(st.lists(st.tuples(ranges(), ranges()), min_size=1, max_size=4), st.integers(1, 5))
def test_a_format_is_used_once_every_member_speaks_it(
    spoken: list[tuple[FormatRange, FormatRange]], format_: int
) -> None:
    members = {
        f"n{i}": Member(f"n{i}", "u", replication_formats=r.text, zookeeper_formats=z.text)
        for i, (r, z) in enumerate(spoken)
    }
    assert cluster_speaks(members, "replication", format_) == all(format_ in r for r, _ in spoken)
    assert cluster_speaks(members, "zookeeper", format_) == all(format_ in z for _, z in spoken)


def test_a_member_of_main_before_0_1_0_speaks_format_1_only() -> None:
    members = {"n2": Member.from_json(OLD_MEMBER), "n1": Member("n1", "u", zookeeper_formats="1-2")}
    assert cluster_speaks(members, "zookeeper", 1)
    assert not cluster_speaks(members, "zookeeper", 2)
    assert not cluster_speaks({}, "zookeeper", 1)
    with pytest.raises(ValueError, match="bad format kind"):
        cluster_speaks(members, "wire", 1)


def test_a_backup_s_agent_does_not_contend_while_it_cannot_read_the_cluster() -> None:
    fault = "/qpid-ha/c/primary: the primary record is in ZooKeeper format 3; ..."
    ready = BrokerView("ready", epoch=1)
    assert decide(ClusterView(node="n1", broker=ready)).steps == (Step.CONTEND,)
    decision = decide(ClusterView(node="n1", broker=ready, format_error=fault))
    assert decision.steps == ()
    assert decision.eligibility == f"a ZooKeeper record this agent cannot read: {fault}"
    contending = ClusterView(node="n1", broker=ready, format_error=fault, leadership="contending")
    assert decide(contending).steps == (Step.WITHDRAW,)
    # a primary's agent does not act on what it cannot read either: no fence
    active = ClusterView(node="n1", broker=BrokerView("active", epoch=1), format_error=fault)
    assert Step.FENCE not in decide(active).steps


def test_each_unreadable_record_is_logged_once() -> None:
    faults = FormatFaults()
    one = ZkFormatError("the primary record", 2, "/qpid-ha/c/primary")
    with structlog.testing.capture_logs() as logs:
        assert faults.note([one]) == str(one)
        assert faults.note([one]) == str(one)
        assert faults.note([]) == ""
        faults.note([one])
    lines = [e for e in logs if e["event"] == "zk_record_format_unknown"]
    assert len(lines) == 2 and lines[0]["path"] == "/qpid-ha/c/primary"
    assert lines[0]["found"] == 2 and lines[0]["log_level"] == "error"
    assert lines[0]["reason"].startswith("/qpid-ha/c/primary: the primary record is in")


def test_records_of_a_newer_format_in_a_real_zookeeper(zk: Any, cluster: str) -> None:
    layout = ClusterLayout(cluster)
    MemberPublisher(zk, cluster, Member("n1", "u1")).publish()
    zk.create(layout.member("n2"), newer(OLD_MEMBER), makepath=True)
    zk.create(layout.primary, newer(OLD_PRIMARY), makepath=True)
    zk.create(layout.in_sync, newer(OLD_IN_SYNC), makepath=True)
    unreadable: list[ZkFormatError] = []
    assert list(read_members(zk, cluster, unreadable)) == ["n1"]
    [member_fault] = unreadable
    assert member_fault.path == layout.member("n2")
    assert str(member_fault).startswith(f"{layout.member('n2')}: a member record is in")
    with pytest.raises(ZkFormatError) as info:
        read_primary(zk, cluster)
    assert info.value.path == layout.primary and info.value.found == 3
    with pytest.raises(InSyncFormatError, match=f"^{layout.in_sync}: the in-sync record is in"):
        read_in_sync(zk, cluster)
