"""Hot backup and restore end to end: real qpidd processes, a real pika publisher with
confirms, the real ``qpid-ha`` program.

The whole-site loss of docs/store.md: back up a broker while a publisher keeps publishing
persistent messages to durable queues, kill the broker, delete its data directory, restore
the backup into a new data directory, start a broker there (new ports), and find every
message confirmed before the backup was asked for (and nothing that was never published).
A damaged backup is refused in one line with exit code 2 (``qpid-ha`` in this process
for those: a program start costs more than the check).
"""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pika
import pytest
from typer.testing import Result

from broker.store.hot_backup import MANIFEST, SEGMENTS_DIR
from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.cli.conftest import qpid_ha as qpid_ha_here
from tests.store.store_brokers import PERSISTENT, connect, drain, events

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))
QUEUES = ("orders", "audit")


def qpid_ha(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([QPID_HA, *args], capture_output=True, text=True, timeout=60, check=False)


def mgmt(broker: BrokerProcess) -> str:
    return f"guest/guest@127.0.0.1:{broker.mgmt_port}"


class Publisher(threading.Thread):
    """Publishes numbered persistent messages with confirms, round robin over QUEUES, until
    stopped; ``confirmed`` lists the numbers the broker confirmed, in order."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.confirmed: list[int] = []
        self.published = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.url))
            channel = connection.channel()
            channel.confirm_delivery()
            n = 0
            while not self.stop.is_set():
                self.published = n + 1
                channel.basic_publish("", QUEUES[n % 2], b"%d" % n, PERSISTENT)
                self.confirmed.append(n)  # basic_publish returned: confirmed
                n += 1
            connection.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


def back_up_under_load(
    publisher: Publisher, management: str, to: Path, *, before: int = 40, after: int = 20
) -> tuple[set[int], subprocess.CompletedProcess[str]]:
    """Start ``publisher``; once ``before`` messages are confirmed, ``qpid-ha -b
    MANAGEMENT backup --to TO`` (asserted to succeed) while it goes on publishing; stop it
    once ``after`` more are confirmed. The numbers confirmed before the backup was asked
    for, and qpid-ha's result."""
    publisher.start()
    poll_until(lambda: len(publisher.confirmed) >= before or publisher.error, 30)
    confirmed = set(publisher.confirmed)
    result = qpid_ha("-b", management, "backup", "--to", str(to))
    assert result.returncode == 0, result.stderr
    during = len(publisher.confirmed)
    # under load: the publisher went on being confirmed after the backup
    poll_until(lambda: len(publisher.confirmed) >= during + after or publisher.error, 30)
    publisher.stop.set()
    publisher.join(30)
    assert publisher.error is None, publisher.error
    return confirmed, result


def test_a_backup_under_load_restores_every_confirmed_message(tmp_path: Path) -> None:
    source = BrokerProcess(tmp_path / "site", [f"--data-dir={tmp_path / 'site' / 'data'}"])
    restored = BrokerProcess(tmp_path / "new", [f"--data-dir={tmp_path / 'new' / 'data'}"])
    publisher = None
    try:
        source.start()
        setup = connect(source)
        channel = setup.channel()
        for queue in QUEUES:
            channel.queue_declare(queue, durable=True)
        setup.close()
        publisher = Publisher(source.url)
        before, result = back_up_under_load(
            publisher, mgmt(source), tmp_path / "backup", before=60, after=30
        )
        assert result.stdout.startswith("backup of ") and "messages ->" in result.stdout
        published = publisher.published
        started = events(source, "store_backup_started")
        finished = events(source, "store_backup_finished")
        assert len(started) == len(finished) == 1
        assert finished[0]["bytes"] == started[0]["bytes"] > 0

        # The whole site is lost: the broker killed, its data directory deleted.
        assert source.stop(signal.SIGKILL) == -signal.SIGKILL
        shutil.rmtree(tmp_path / "site")

        result = qpid_ha(
            "restore", str(tmp_path / "backup"), "--data-dir", str(tmp_path / "new" / "data")
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("restored the backup of ")
        restored.start()
        connection = connect(restored)
        channel = connection.channel()
        found: list[int] = []
        for queue in QUEUES:
            taken = drain(channel, queue)
            numbers = [int(body) for body, _redelivered, _properties in taken]
            assert numbers == sorted(numbers), queue  # in order, no duplicate
            assert all(redelivered for _body, redelivered, _p in taken)  # "may have been"
            found += numbers
        connection.close()
        assert before <= set(found), sorted(before - set(found))[:10]
        assert set(found) <= set(range(published))
        assert len(found) == len(set(found))
        manifest = json.loads((tmp_path / "backup" / MANIFEST).read_text())
        assert manifest["contents"]["messages"] == len(found)
        (restored_event,) = events(restored, "store_restored_from_backup")
        assert restored_event["messages"] == len(found)
        assert restored_event["point"] == manifest["point"]["taken_at"]
        assert not (tmp_path / "new" / "data" / "restored-from.json").exists()
    finally:
        if publisher is not None:
            publisher.stop.set()
        source.stop(signal.SIGKILL)
        restored.stop(signal.SIGKILL)


def one_line_error(result: subprocess.CompletedProcess[str] | Result, *words: str) -> None:
    if isinstance(result, subprocess.CompletedProcess):
        code = result.returncode
    else:
        code = result.exit_code
    assert code == 2, (code, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


MIB = 1 << 20


def abandon_a_backup(broker: BrokerProcess) -> None:
    """Ask for a backup, read its header line and hang up: the broker logs
    store_backup_failed, and its next backup is whole (tested by the caller)."""
    connection = http.client.HTTPConnection("127.0.0.1", broker.mgmt_port, timeout=10)
    token = base64.b64encode(b"guest:guest").decode()
    connection.request("POST", "/api/store/backup", b"{}", {"Authorization": f"Basic {token}"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.readline().startswith(b'{"format": "qpid-store-backup/1"')
    connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()  # a reset, the unread bytes in its buffer
    (failed,) = poll_until(lambda: events(broker, "store_backup_failed"), 30)
    assert failed["bytes_sent"] < 8 * MIB


@pytest.fixture(scope="module")
def good_backup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A backup of a small store (queue q, 20 messages; queue big, 8 of 1 MiB), taken after
    an abandoned one."""
    root = tmp_path_factory.mktemp("good")
    broker = BrokerProcess(root / "b", [f"--data-dir={root / 'b' / 'data'}"])
    try:
        broker.start()
        connection = connect(broker)
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q", durable=True)
        for i in range(20):
            channel.basic_publish("", "q", b"%d" % i, PERSISTENT)
        channel.queue_declare("big", durable=True)
        for i in range(8):  # more than the sockets' buffers hold
            channel.basic_publish("", "big", bytes([i]) * MIB, PERSISTENT)
        connection.close()
        abandon_a_backup(broker)
        result = qpid_ha("-b", mgmt(broker), "backup", "--to", str(root / "backup"))
        assert result.returncode == 0, result.stderr
        again = qpid_ha_here("-b", mgmt(broker), "backup", "--to", str(root / "backup"))
        one_line_error(again, "--to", "is not an empty directory")
    finally:
        broker.stop(signal.SIGKILL)
    return root / "backup"


def damaged_copy(good: Path, target: Path, how: str) -> Path:
    shutil.copytree(good, target)
    segment = sorted((target / SEGMENTS_DIR).glob("*.seg"))[-1]
    data = bytearray(segment.read_bytes())
    if how == "truncated":
        segment.write_bytes(data[:-7])
    elif how == "flipped":
        data[len(data) // 2] ^= 0x40
        segment.write_bytes(bytes(data))
    elif how == "no manifest":
        (target / MANIFEST).unlink()
    elif how == "bad manifest":
        (target / MANIFEST).write_text('{"format": "qpid-store-backup/1"')
    elif how == "missing segment":
        segment.unlink()
    return target


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("truncated", ("bad backup", "bytes, the manifest says")),
        ("flipped", ("bad backup", "SHA-256 does not match")),
        ("no manifest", ("bad backup", "manifest.json is missing")),
        ("bad manifest", ("bad backup", "not JSON")),
        ("missing segment", ("bad backup", "is missing from")),
    ],
)
def test_a_damaged_backup_is_refused_in_one_line(
    good_backup: Path, tmp_path: Path, how: str, words: tuple[str, ...]
) -> None:
    backup = damaged_copy(good_backup, tmp_path / "copy", how)
    result = qpid_ha_here("restore", str(backup), "--data-dir", str(tmp_path / "d"))
    one_line_error(result, *words)
    assert not (tmp_path / "d").exists()


def test_restore_refuses_a_used_data_directory_unless_forced(
    good_backup: Path, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / "store").mkdir()
    (data / "store" / "old.seg").write_bytes(b"old")
    result = qpid_ha_here("restore", str(good_backup), "--data-dir", str(data))
    one_line_error(result, "is not empty", "--force")
    result = qpid_ha_here("restore", str(good_backup), "--data-dir", str(data), "--force")
    assert result.exit_code == 0, result.stderr
    assert "_cluster.bak.0001" in result.stdout
    assert (data / "_cluster.bak.0001" / "store" / "old.seg").read_bytes() == b"old"
    broker = BrokerProcess(tmp_path / "b", [f"--data-dir={data}"])
    try:
        broker.start()
        connection = connect(broker)
        channel = connection.channel()
        assert [body for body, _r, _p in drain(channel, "q")] == [b"%d" % i for i in range(20)]
        connection.close()
        # a running broker's data directory is never restored over
        result = qpid_ha_here("restore", str(good_backup), "--data-dir", str(data), "--force")
        one_line_error(result, "another qpidd is using this data directory")
    finally:
        broker.stop(signal.SIGKILL)
