"""basic.get across a fail-over: held while the delivery gate is closed, never "empty".

A new primary delivers a replicated queue's messages once every backup it expects
acknowledged a delivery watermark (docs/ha-design.md, "Redelivered after a fail-over").
A client polling with basic.get meanwhile must not see get-empty on a queue that
queue.declare counts full: the get is held and answered when the gate opens. Real qpidd
processes, the primary SIGKILLed, pika clients (one in a process of its own, SIGKILLed
while its get is held: its message is neither lost nor taken twice).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import (
    connect,
    drain_get,
    events,
    publish,
    wait_members,
)

_GETTER = """
import sys, pika
connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", int(sys.argv[1])))
connection.channel().basic_get("work", auto_ack=False)  # held: killed before the answer
"""


def test_a_get_is_held_until_the_expected_backup_is_removed(tmp_path: Path) -> None:
    """The new primary expects a backup that does not come back: basic.get waits (as the
    deliveries and confirms do) until the cluster manager commits an in-sync set without it,
    then gets the head, marked redelivered. A client killed while its get is held takes
    nothing."""
    cluster = Cluster(tmp_path, 3).start()
    getter: subprocess.Popen[bytes] | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        wait_members(cluster, 1, ready=2)
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("work", durable=True)
        connection.close()
        publish(cluster.ports[0], "work", [b"a", b"b", b"c"])
        poll_until(lambda: cluster.queue_messages(1, "work") == 3, 10)
        cluster.kill(0)
        cluster.kill(2)
        assert cluster.promote(1, epoch=2)["state"] == "recovering"  # expects broker 2

        # a client whose get is held, SIGKILLed: the get is forgotten, its message stays
        getter = subprocess.Popen([sys.executable, "-c", _GETTER, str(cluster.ports[1])])
        poll_until(lambda: len(events(cluster, 1, "basic_get_held")) == 1, 15)
        getter.send_signal(signal.SIGKILL)
        getter.wait(10)

        got: list[Any] = []
        client = connect(cluster.ports[1])
        channel = client.channel()
        assert cluster.queue_messages(1, "work") == 3
        poller = threading.Thread(
            target=lambda: got.append(channel.basic_get("work", auto_ack=True)), daemon=True
        )
        poller.start()
        poll_until(lambda: len(events(cluster, 1, "basic_get_held")) == 2, 15)
        held = events(cluster, 1, "basic_get_held")[-1]
        assert (held["queue"], held["messages"]) == ("work", 3)
        assert poller.is_alive() and got == []  # held: no get-empty on a full queue

        cluster.commit_in_sync(1)  # broker 2 is removed from the in-sync set: the gate opens
        poller.join(15)
        assert not poller.is_alive()
        method, _props, body = got[0]
        assert method is not None and body == b"a" and method.redelivered
        assert method.message_count == 2
        client.close()
        assert drain_get(cluster.ports[1], "work") == [b"b", b"c"]  # nothing lost, none twice
    finally:
        if getter is not None and getter.poll() is None:
            getter.kill()
            getter.wait(10)
        cluster.stop()


def test_a_poller_sees_every_message_right_after_a_failover(tmp_path: Path) -> None:
    """The common case: the new primary's backup reconnects and acknowledges its first
    watermark a round trip later; a client polling with basic.get straight after the
    promotion gets every message in order (held, not empty, in between)."""
    cluster = Cluster(tmp_path, 3).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        wait_members(cluster, 1, ready=2)
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("work", durable=True)
        connection.close()
        bodies = [str(i).encode() for i in range(200)]
        publish(cluster.ports[0], "work", bodies)
        poll_until(lambda: cluster.queue_messages(1, "work") == len(bodies), 10)
        cluster.kill(0)
        cluster.promote(1, epoch=2)

        client = connect(cluster.ports[1])
        channel = client.channel()
        got: list[bytes] = []
        while True:  # the first get may be held until broker 2 acknowledged
            method, _props, body = channel.basic_get("work", auto_ack=True)
            if method is None:
                break
            got.append(body)
        client.close()
        assert got == bodies
    finally:
        cluster.stop()
