"""A member catching up a backlog keeps the primary serving (issue 25): two real brokers.

A primary holds a backlog on ten queues (100,000 messages); its member links and catches
up all ten at once. Before each link had a bound on what is ahead of a lease request
(:mod:`broker.ha.link_credit`), every queue's channel credit was on the wire before it
(9 MB measured) and the backup took up to 2.9 s (load 15) to read its way to a request:
a fixed 2 s lease lapsed. Now at most 512 KiB is: the lease holds throughout the catch-up
(0.34 s the longest round trip measured at load 29), with neither loop stopped.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from broker.amqp.client import connect
from common.polling import poll_until
from tests.ha.cluster import Cluster, http

pytestmark = pytest.mark.timeout(300)

LEASE = 2.0
QUEUES = 10
PER_QUEUE = 10_000
BODY = b"x" * 100


async def fill(port: int) -> None:
    client = await connect("127.0.0.1", port, user="guest", password="guest", timeout=30)
    try:
        channel = await client.open_channel()
        names = [f"backlog{i}" for i in range(QUEUES)]
        for name in names:
            await channel.declare_queue(name, durable=True)
        for seq in range(QUEUES * PER_QUEUE):
            await channel.publish("", names[seq % QUEUES], BODY)

        async def held() -> int:
            total = 0
            for name in names:
                _, ready, _ = await channel.declare_queue(name, passive=True)
                total += ready
            return total

        deadline = asyncio.get_running_loop().time() + 120
        while await held() != QUEUES * PER_QUEUE:
            assert asyncio.get_running_loop().time() < deadline, "the backlog was not held"
            await asyncio.sleep(0.1)
    finally:
        await client.close()


def events(path: Path, name: str) -> list[dict[str, Any]]:
    with open(path) as log:
        return [e for e in map(json.loads, log) if e.get("event") == name]


def test_a_member_catching_up_a_backlog_keeps_the_primary_serving(tmp_path: Path) -> None:
    cluster = Cluster(
        tmp_path,
        2,
        f"--ha-member-lease={LEASE}",
        f"--ha-member-lease-max={LEASE}",  # fixed: what the catch-up does to it shows
    ).start()
    try:
        cluster.brokers[1].stop()  # back later, to a primary with a backlog
        assert cluster.promote(0, epoch=1, in_sync=[])["state"]
        asyncio.run(fill(cluster.ports[0]))
        cluster.brokers[1].start()
        port = cluster.brokers[0].mgmt_port
        member = cluster.ha(1)["broker_id"]  # a broker started again has a new id
        # the cluster manager commits it to the set as it links (soak31's n3, a member of
        # a recovering primary's set): its lease stream opens before its snapshot, and its
        # first request asks its grant, so every byte of its catch-up comes after that
        body = {"cluster_manager": True, "epoch": 1, "members": [member]}
        answer = http("POST", port, "/api/ha/in-sync", body)
        assert "http_status" not in answer, answer
        poll_until(
            lambda: cluster.ha(0)["member_lease"]["members"].get(member) is not None,
            15,
            "its grant counted",
        )
        state = cluster.state(1)
        assert state in ("joining", "catch-up"), f"caught up before it was a member: {state}"
        poll_until(lambda: cluster.state(1) == "ready", 240, "the member caught up")
        for i in range(QUEUES):
            assert cluster.queue_messages(1, f"backlog{i}") == PER_QUEUE
        lease = cluster.ha(0)["member_lease"]
        assert lease["serving"]
        primary_log = cluster.brokers[0].log_file
        assert events(primary_log, "member_lease_lapsed") == []
        assert events(primary_log, "member_lease_clients_closed") == []
    finally:
        cluster.stop()
