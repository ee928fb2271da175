"""ha-public-url end to end: what clients of real qpidd processes are told to connect to.

The public URL (``ha-public-url``, else ``ha-brokers-url``) reaches clients as
connection.open-ok's ``known-hosts`` (pika keeps it, a lean pamqp client reads it off the
wire), as the server property ``qpid.ha-public-url`` (aio-pika drops open-ok but keeps the
server properties), in a backup's refusal text, and in ``/api/ha`` and ``qpid-ha``. It never
carries the credentials written in the option.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import aio_pika
import kombu.connection
import pika
import pytest
from pamqp import base, commands, frame, header

from tests.broker_process import QPIDD, free_port
from tests.ha.cluster import Cluster

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))

#: Written with credentials and short forms; advertised in canonical form without them.
PUBLIC = "amqp:ops/secret@clients.example:5672,[::1]:5673"
ADVERTISED = "amqp:tcp:clients.example:5672,tcp:[::1]:5673"


# -- a lean client: the handshake by hand, one frame at a time --------------------------
class FrameReader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def next(self) -> Any:
        """The next method frame (heartbeats skipped)."""
        while True:
            if len(self.buffer) >= 7:
                (size,) = struct.unpack(">I", self.buffer[3:7])
                if len(self.buffer) >= 8 + size:
                    used, _channel, value = frame.unmarshal(self.buffer)
                    self.buffer = self.buffer[used:]
                    if isinstance(value, base.Frame):
                        return value
                    continue
            data = self.sock.recv(65536)
            assert data, "the broker closed the socket"
            self.buffer += data


def lean_open(port: int) -> tuple[commands.Connection.Start, Any]:
    """Connect, log in as guest and open vhost ``/``: (connection.start, the answer to open)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        reader = FrameReader(sock)
        sock.sendall(frame.marshal(header.ProtocolHeader(), 0))
        start = reader.next()
        assert isinstance(start, commands.Connection.Start)
        sock.sendall(
            frame.marshal(
                commands.Connection.StartOk(
                    client_properties={"product": "lean"},
                    mechanism="PLAIN",
                    response="\0guest\0guest",
                ),
                0,
            )
        )
        tune = reader.next()
        assert isinstance(tune, commands.Connection.Tune)
        sock.sendall(
            frame.marshal(
                commands.Connection.TuneOk(
                    channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
                ),
                0,
            )
        )
        sock.sendall(frame.marshal(commands.Connection.Open(virtual_host="/"), 0))
        answer = reader.next()
        if isinstance(answer, commands.Connection.OpenOk):
            sock.sendall(
                frame.marshal(commands.Connection.Close(reply_code=200, class_id=0, method_id=0), 0)
            )
            assert isinstance(reader.next(), commands.Connection.CloseOk)
        else:
            sock.sendall(frame.marshal(commands.Connection.CloseOk(), 0))
        return start, answer


async def aio_pika_public_url(port: int) -> Any:
    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=5)
    try:
        assert connection.transport is not None
        return connection.transport.connection.server_properties.get("qpid.ha-public-url")
    finally:
        await connection.close()


def qpid_ha(cluster: Cluster, i: int, *args: str) -> str:
    done = subprocess.run(
        [QPID_HA, "-b", f"guest/guest@127.0.0.1:{cluster.brokers[i].mgmt_port}", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- the cluster ---------------------------------------------------------------------------
def test_public_url_reaches_clients_and_operators(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, f"--ha-public-url={PUBLIC}").start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        primary, backup = cluster.ports
        # pika keeps known-hosts of connection.open-ok on its connection
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", primary))
        try:
            assert connection._impl.known_hosts == ADVERTISED
            assert connection._impl.server_properties["qpid.ha-public-url"] == ADVERTISED
        finally:
            connection.close()
        # the lean client reads the same off the wire
        start, open_ok = lean_open(primary)
        assert isinstance(open_ok, commands.Connection.OpenOk)
        assert open_ok.known_hosts == ADVERTISED
        assert start.server_properties["qpid.ha-public-url"] == ADVERTISED
        # aio-pika (aiormq) drops open-ok: the server property is there for it
        assert asyncio.run(aio_pika_public_url(primary)) == ADVERTISED
        # kombu (py-amqp) skips the field and carries on
        with kombu.connection.Connection(
            f"amqp://guest:guest@127.0.0.1:{primary}//"
        ) as kombu_client:
            kombu_client.connect()
            declared = kombu_client.default_channel.queue_declare("kombu-was-here")
            assert declared.queue == "kombu-was-here"
        # a backup refuses and says where clients go
        _start, close = lean_open(backup)
        assert isinstance(close, commands.Connection.Close)
        assert close.reply_code == 530
        assert close.reply_text.startswith("NOT_ALLOWED - HA backup: not the primary")
        assert close.reply_text.endswith(f"clients connect to {ADVERTISED}")
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
            pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", backup))
        assert ADVERTISED in str(refused.value)
        # operators: /api/ha and qpid-ha on both brokers; never the credentials
        for i in (0, 1):
            assert cluster.ha(i)["public_url"] == ADVERTISED
            table = qpid_ha(cluster, i, "status", "--all")
            assert f"public URL (for clients): {ADVERTISED}" in table
            assert '"public_url": "' + ADVERTISED + '"' in qpid_ha(cluster, i, "query")
        for broker in cluster.brokers:
            assert "secret" not in broker.log_file.read_text()
    finally:
        cluster.stop()


def test_public_url_defaults_to_the_brokers_url(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 1).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        (port,) = cluster.ports
        expected = f"amqp:tcp:127.0.0.1:{port}"
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        try:
            assert connection._impl.known_hosts == expected
        finally:
            connection.close()
        assert cluster.ha(0)["public_url"] == expected
    finally:
        cluster.stop()


# -- bad values: one line, exit 2 ------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--ha-public-url=node1:port"],
            "qpidd: error: invalid value 'node1:port' for option --ha-public-url",
        ),
        (["--ha-public-url="], "qpidd: error: invalid value '' for option --ha-public-url"),
        (
            ["--ha-public-url=" + ",".join(f"client-host-{i}.example:5672" for i in range(12))],
            "qpidd: error: ha-public-url is too long to advertise to clients",
        ),
        (
            ["--ha-brokers-url=" + ",".join(f"broker-host-{i}.example" for i in range(12))],
            "qpidd: error: ha-brokers-url is too long to advertise to clients",
        ),
    ],
    ids=["bad-port", "empty", "too-long", "brokers-url-too-long"],
)
def test_bad_public_url_is_a_usage_error(tmp_path: Path, args: list[str], message: str) -> None:
    done = subprocess.run(
        [
            QPIDD,
            "--interface=127.0.0.1",
            f"--port={free_port()}",
            "--mgmt-port=0",
            "--ha-cluster=yes",
            "--ha-brokers-url=127.0.0.1:1",
            f"--data-dir={tmp_path}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), done.stderr
    assert "Traceback" not in done.stderr
