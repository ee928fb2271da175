"""A publisher behind a held basic.get is not read past a bound, and loses nothing.

On a new primary whose expected backup has not acknowledged a delivery watermark, a
basic.get on a queue with messages is held, and the frames that follow on its channel are
kept and replayed once it is answered (docs/ha-design.md). What is kept is bounded by
protocol (broker/amqp/held_frames.py): past 1 MiB the broker stops reading the connection,
so what the client sends waits in the kernel's socket buffers and then in the client's
own socket write; it reads again once the gate opens and the kept frames are replayed.
A client that dies while its connection is not read is cleaned up all the same (the
broker's heartbeat write finds the socket gone). Real qpidd processes (a 2-broker cluster:
the primary SIGKILLed, the backup promoted with the committed in-sync set naming both, so it
waits for the old primary), real pika clients.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common.polling import poll_until
from tests.ha.cluster import Cluster, http
from tests.ha.failover_clients import connect, drain_get, events, publish

#: Messages the publisher sends behind its held get, and their size: 64 MiB, more than the
#: loopback socket buffers of both ends can hold.
COUNT = 256
SIZE = 256 * 1024
#: The broker's limit (broker.amqp.held_frames.HELD_BYTES_LIMIT) and the most one socket
#: read (uvloop: 256000 bytes) adds to it, with each frame's cost.
LIMIT = 1024 * 1024
ONE_READ = 256_000 + 100 * (256_000 // SIZE + 3)


#: A client in a process of its own: a held get, then a flood on its channel; SIGKILLed.
_FLOODER = """
import sys, pika
parameters = pika.ConnectionParameters("127.0.0.1", int(sys.argv[1]), heartbeat=2)
channel = pika.BlockingConnection(parameters).channel()
channel._impl.basic_get("work", lambda *args: None, auto_ack=False)
for i in range(256):
    channel.basic_publish("", "work", bytes(262144))
"""


def _body(i: int) -> bytes:
    return i.to_bytes(4, "big") + bytes(SIZE - 4)


class _Publisher(threading.Thread):
    """Sends basic.get, then publishes COUNT messages on the same channel without waiting
    for the get (as a client pipelining its requests does), then waits for the get-ok."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.sent = 0
        self.got: list[bytes] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = connect(self.port)
            channel = connection.channel()
            # pika's BlockingChannel.basic_get waits for its answer; the channel under it
            # sends basic.get and goes on.
            channel._impl.basic_get("work", self._got, auto_ack=True)
            for i in range(COUNT):
                channel.basic_publish("", "work", _body(i))  # returns once written
                self.sent += 1
            deadline = time.monotonic() + 30
            while not self.got and time.monotonic() < deadline:
                connection.process_data_events(time_limit=0.1)
            connection.close()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _got(self, _channel: Any, _method: Any, _properties: Any, body: bytes) -> None:
        self.got.append(body)


def _unread(port: int) -> int:
    """Bytes received on the broker's established connections at ``port`` that it has
    not read yet (the kernel's receive queues, /proc/net/tcp)."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if state == "01" and int(local.rpartition(":")[2], 16) == port:
            total += int(queues.partition(":")[2], 16)
    return total


def _rss(cluster: Cluster, i: int) -> int:
    proc = cluster.brokers[i].proc
    assert proc is not None
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _recovering(cluster: Cluster) -> None:
    """Queue ``work`` with one message ``a``; broker 0, the primary, SIGKILLed; broker 1
    promoted with an in-sync set naming broker 0: it waits for it, its gate closed."""
    cluster.promote(0, epoch=1)
    cluster.wait_state(1, "ready")
    ids = [str(cluster.ha(i)["broker_id"]) for i in range(2)]
    connection = connect(cluster.ports[0])
    connection.channel().queue_declare("work", durable=True)
    connection.close()
    publish(cluster.ports[0], "work", [b"a"])
    poll_until(lambda: cluster.queue_messages(1, "work") == 1, 10)
    cluster.kill(0)
    promoted = http(
        "POST",
        cluster.brokers[1].mgmt_port,
        "/api/ha/promote",
        {"cluster_manager": True, "epoch": 2, "in_sync": ids},
    )
    assert promoted["state"] == "recovering"


def test_a_publisher_behind_a_held_get_waits_in_its_socket_and_loses_nothing(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 2).start()
    publisher: _Publisher | None = None
    try:
        _recovering(cluster)
        port = cluster.ports[1]
        rss_before = _rss(cluster, 1)

        publisher = _Publisher(port)
        publisher.start()
        paused = poll_until(lambda: events(cluster, 1, "held_frames_paused"), 15)
        assert len(paused) == 1 and paused[0]["limit"] == LIMIT
        assert LIMIT <= paused[0]["held_bytes"] < LIMIT + ONE_READ

        # The broker reads no more: bytes wait unread in its socket, the publisher in its
        # write (polled until neither moves; the assertions below do not rest on timing).
        seen: list[tuple[int, int]] = []

        def stalled() -> bool:
            seen.append((publisher.sent if publisher else 0, _unread(port)))
            return len(seen) >= 3 and seen[-1][1] > 0 and len(set(seen[-3:])) == 1

        poll_until(stalled, 30, interval=0.5)
        assert publisher.is_alive() and publisher.error is None
        assert publisher.sent < COUNT and publisher.got == []
        assert events(cluster, 1, "held_frames_resumed") == []
        grown = _rss(cluster, 1) - rss_before
        assert grown < 24 * 1024 * 1024, f"broker RSS grew {grown} bytes"
        assert cluster.queue_messages(1, "work") == 1  # the kept publishes wait behind the get

        cluster.commit_in_sync(1)  # broker 0 leaves the in-sync set: the gate opens
        publisher.join(60)
        assert not publisher.is_alive() and publisher.error is None
        assert publisher.sent == COUNT and publisher.got == [b"a"]
        assert len(events(cluster, 1, "held_frames_resumed")) == 1
        assert drain_get(port, "work") == [_body(i) for i in range(COUNT)]
    finally:
        if publisher is not None and publisher.is_alive():
            publisher.join(1)
        cluster.stop()


def test_a_client_killed_while_not_read_is_cleaned_up(tmp_path: Path) -> None:
    """A client SIGKILLed while the broker does not read it: the broker's next heartbeat
    write finds the socket gone, before the gate opens; what its connection kept is dropped
    (never confirmed), and its held get took nothing."""
    cluster = Cluster(tmp_path, 2).start()
    flooder: subprocess.Popen[bytes] | None = None
    try:
        _recovering(cluster)
        port = cluster.ports[1]
        before = len(events(cluster, 1, "connection_closed"))  # the backup's own links
        flooder = subprocess.Popen([sys.executable, "-c", _FLOODER, str(port)])
        poll_until(lambda: events(cluster, 1, "held_frames_paused"), 15)
        flooder.send_signal(signal.SIGKILL)
        flooder.wait(10)
        closed = poll_until(lambda: events(cluster, 1, "connection_closed")[before:], 15)
        assert len(closed) == 1 and closed[0]["published"] == 0
        assert closed[0]["reason"].startswith("socket error")  # a heartbeat's write
        resumed = events(cluster, 1, "held_frames_resumed")
        assert len(resumed) == 1 and resumed[0]["held_bytes"] == 0
        assert cluster.state(1) == "recovering"  # the gate is still closed
        assert cluster.queue_messages(1, "work") == 1

        cluster.commit_in_sync(1)
        assert drain_get(port, "work") == [b"a"]  # not taken, nothing kept went on
    finally:
        if flooder is not None and flooder.poll() is None:
            flooder.kill()
            flooder.wait(10)
        cluster.stop()
