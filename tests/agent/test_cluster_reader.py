"""The agent's cluster reads (ha_agent.cluster_reader) on a real ZooKeeper, without an
agent or a broker: its member record published and updated from the broker's view, the
epoch counter covered, the records read and kept, and a read that fails leaving them (and
their read time) as they were."""

from __future__ import annotations

import queue
import threading
from typing import Any

from ha_agent.agent_hints import AgentHints
from ha_agent.agent_report import AgentReport
from ha_agent.broker_check import BrokerCheck
from ha_agent.cluster_reader import ClusterReader
from ha_agent.cluster_records import BrokerView, PrimaryRecord
from ha_agent.epoch_counter import read_counter
from ha_agent.in_sync_keeper import InSyncKeeper
from ha_agent.primary_record import write_primary


def reader(client: Any, cluster: str) -> ClusterReader:
    hints = AgentHints(client, cluster, "n1", queue.SimpleQueue(), threading.Event())
    keeper = InSyncKeeper(client, cluster, BrokerCheck("127.0.0.1:1"), "n1")
    return ClusterReader(
        client, cluster, "n1", "127.0.0.1:1", keeper, hints, AgentReport("n1", 2.0)
    )


def test_the_reader_publishes_its_member_record_and_keeps_what_it_read(
    make_client: Any, cluster: str
) -> None:
    client = make_client()
    cluster_reader = reader(client, cluster)
    silent = cluster_reader.read(None, leads=False, read_in_sync_set=True, timeout=5.0)
    assert silent is not None and cluster_reader.read_at == silent
    assert cluster_reader.members["n1"].ha_state == "down"
    ready = BrokerView("ready", epoch=3, url="127.0.0.1:5672", broker_id="b1", store_id="s1")
    sent = cluster_reader.read(ready, leads=False, read_in_sync_set=True, timeout=5.0)
    assert sent is not None and sent >= silent and cluster_reader.read_at == sent
    member = cluster_reader.members["n1"]
    assert (member.ha_state, member.epoch, member.broker_id) == ("ready", 3, "b1")
    assert cluster_reader.epoch_floor == 3 and read_counter(client, cluster)[0] >= 3
    assert cluster_reader.primary is None
    write_primary(make_client(), cluster, PrimaryRecord("n2", 4, "127.0.0.1:5673"))
    assert cluster_reader.read(ready, False, True, 5.0) is not None
    assert cluster_reader.primary == PrimaryRecord("n2", 4, "127.0.0.1:5673")
    # ZooKeeper gone for this client: nothing read, the records and their time as they were
    read_at = cluster_reader.read_at
    client.stop()
    assert cluster_reader.read(ready, False, True, 5.0) is None
    assert cluster_reader.read_at == read_at
    assert cluster_reader.primary == PrimaryRecord("n2", 4, "127.0.0.1:5673")
    assert set(cluster_reader.members) == {"n1"}
