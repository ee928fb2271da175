"""A management answer is a promise as the AMQP one is (issue 10, item 2): the management
API's declare, delete and purge answer only once every in-sync backup has the change, as
declare-ok, delete-ok and purge-ok do.

A real 3-broker cluster; backup b1 is stopped (SIGSTOP), so it can acknowledge nothing.
A queue declared, an exchange deleted and a queue purged through the API on the primary are
not answered while b1 is in the in-sync set; once the cluster manager commits b1's removal
(as ``qpid-ha in-sync --commit`` does) they are, with what they did.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pika

from common.polling import poll_until
from tests.ha.cluster import AUTH, Cluster


class Call(threading.Thread):
    """One management request on its own thread (the answer may take a while)."""

    def __init__(self, method: str, port: int, path: str, body: dict[str, Any] | None) -> None:
        super().__init__(daemon=True)
        data = None if body is None else json.dumps(body).encode()
        self.request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", data=data, method=method
        )
        self.request.add_header("Authorization", AUTH)
        self.request.add_header("Content-Type", "application/json")
        self.status = 0
        self.answer: Any = None
        self.start()

    def run(self) -> None:
        with urllib.request.urlopen(self.request, timeout=120) as response:
            self.status = response.status
            self.answer = json.load(response)


def test_management_changes_wait_for_every_in_sync_backup(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3).start()
    stopped: list[int] = []
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", cluster.ports[0])
        )
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("full", durable=True)
        channel.exchange_declare("old", "fanout", durable=True)
        for i in range(5):
            channel.basic_publish("", "full", b"%d" % i, pika.BasicProperties(delivery_mode=2))
        connection.close()
        poll_until(lambda: cluster.queue_messages(1, "full") == 5, 15)
        backup = cluster.brokers[1].proc
        assert backup is not None
        os.kill(backup.pid, signal.SIGSTOP)
        stopped.append(backup.pid)

        port = cluster.brokers[0].mgmt_port
        calls = [
            Call("PUT", port, "/api/queues/declared", {"durable": True}),
            Call("DELETE", port, "/api/exchanges/old", None),
            Call("DELETE", port, "/api/queues/full/contents", None),
        ]
        # b1 is dropped only once its removal is committed: until then nothing is answered
        poll_until(lambda: cluster.ha(0)["in_sync"]["pending_removal"], 30)
        assert [call.is_alive() for call in calls] == [True, True, True]
        cluster.commit_in_sync(0)
        for call in calls:
            call.join(30)
        assert [call.status for call in calls] == [201, 200, 200]
        assert calls[2].answer["messages_purged"] == 5
        assert cluster.queue_messages(2, "full") == 0  # b2 has the purge: it was waited for
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        cluster.stop()
