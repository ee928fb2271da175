"""IPv6 and IPv4 by default (issue 31): qpidd listened on 0.0.0.0 only, so a client whose
``localhost`` is ``::1`` (Node's amqplib IPv6 test) could not connect. Now AMQP listens on
``::`` (one dual-stack socket) and the management API on ``127.0.0.1`` and ``::1``; an
IPv4 client of the dual-stack socket (``::ffff:10.77.0.1``) counts as the IPv4 address it
is for the loopback-only user guest, the logs and the connection names.

The non-loopback peers are real: a namespace this test makes, with 10.77.x.1 and
fd77:x::1 on its ``eth0``; the broker and the client both run in it, so every packet stays
inside it.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from broker.listen import listen_addresses, peer_address, serve
from common.polling import free_port, poll_until
from tests.broker_process import QPIDD
from tests.netns import Host, Lan, ip, is_root

# -- without sockets -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ipv6", "addresses"),
    [
        ("::", True, ["::"]),
        ("::", False, ["0.0.0.0"]),  # a host without IPv6: IPv4 only
        ("127.0.0.1,::1", True, ["127.0.0.1", "::1"]),
        ("127.0.0.1,::1", False, ["127.0.0.1"]),
        ("[::1], 127.0.0.1,127.0.0.1", True, ["::1", "127.0.0.1"]),
        ("0.0.0.0", True, ["0.0.0.0"]),
        ("node1.example", False, ["node1.example"]),  # a name: resolved when bound
    ],
)
def test_listen_addresses(value: str, ipv6: bool, addresses: list[str]) -> None:
    assert listen_addresses(value, ipv6=ipv6) == addresses


def test_a_listener_bound_but_not_serving_refuses_at_once_then_accepts() -> None:
    """A broker binds its AMQP port first and listens only once it is started (issue 26):
    a client dialling it meanwhile is refused at once (it tries its next address) instead
    of waiting in a backlog nobody reads."""

    async def scenario() -> None:
        listener = await serve(
            asyncio.Protocol, "AMQP", "--interface/--port", "127.0.0.1", 0, start_serving=False
        )
        try:
            port = listener.port
            assert port
            with pytest.raises(ConnectionRefusedError):
                await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
            await listener.start_serving()
            _reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
            writer.close()
        finally:
            listener.close()
            await listener.wait_closed()

    asyncio.run(scenario())


def test_only_ipv6_addresses_on_a_host_without_ipv6_is_an_error() -> None:
    with pytest.raises(ValueError, match="no address to listen on"):
        listen_addresses("::1", ipv6=False)


@pytest.mark.parametrize(
    ("peername", "host", "peer"),
    [
        (("127.0.0.1", 5000), "127.0.0.1", "127.0.0.1:5000"),
        (("::ffff:127.0.0.1", 5000, 0, 0), "127.0.0.1", "127.0.0.1:5000"),
        (("::ffff:10.77.0.1", 5000, 0, 0), "10.77.0.1", "10.77.0.1:5000"),
        (("::1", 5000, 0, 0), "::1", "[::1]:5000"),
        (("fd77::1", 5000, 0, 0), "fd77::1", "[fd77::1]:5000"),
    ],
)
def test_peer_address_reads_ipv4_mapped_as_ipv4(peername: Any, host: str, peer: str) -> None:
    assert peer_address(peername) == (host, peer)


# -- a real broker with the default addresses --------------------------------------------


class DefaultBroker:
    """qpidd with neither --interface nor --mgmt-interface, optionally in a namespace."""

    def __init__(self, workdir: Path, host: Host | None = None) -> None:
        self.workdir = workdir
        self.host = host
        self.port = 5672 if host else free_port()  # a fresh namespace has every port free
        self.mgmt_port = 8672 if host else free_port()
        self.log = workdir / "qpidd.log"
        argv = [QPIDD, f"--port={self.port}", f"--mgmt-port={self.mgmt_port}",
                f"--log-file={self.log}"]  # fmt: skip
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            host.exec_argv(argv) if host else argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        poll_until(self._started, 20, "qpidd to start")

    def _started(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"qpidd exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}"
            )
        return self.log.exists() and '"broker_started"' in self.log.read_text()

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e.get("event") == name]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def guest(host: str, port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(host, port, connection_attempts=1, socket_timeout=5)
    )


def api(host: str, port: int, path: str) -> Any:
    request = urllib.request.Request(
        f"http://{host}:{port}{path}",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.load(answer)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[DefaultBroker]:
    started = DefaultBroker(tmp_path / "b")
    yield started
    started.stop()


def test_guest_from_ipv6_and_ipv4_loopback_and_localhost(broker: DefaultBroker) -> None:
    localhost = {
        str(a[4][0]) for a in socket.getaddrinfo("localhost", broker.port, 0, socket.SOCK_STREAM)
    }
    for host in sorted({"::1", "127.0.0.1", *localhost}):  # localhost over ::1 and 127.0.0.1
        connection = guest(host, broker.port)
        channel = connection.channel()
        channel.queue_declare(f"from-{host}")
        connection.close()
    # both loopback listeners of the management API, and the peers as they came
    for host in ("127.0.0.1", "[::1]"):
        assert api(host, broker.mgmt_port, "/api/status")["pid"] == broker.proc.pid
    connection = guest("127.0.0.1", broker.port)  # over the dual-stack socket
    try:
        (seen,) = api("[::1]", broker.mgmt_port, "/api/connections")
        assert seen["peer"].startswith("127.0.0.1:"), seen  # not ::ffff:127.0.0.1
    finally:
        connection.close()
    (started,) = broker.events("broker_started")
    assert started["interface"] == "::"


@pytest.mark.skipif(not is_root(), reason="network namespaces need root; CI runs as root")
def test_guest_refused_from_non_loopback_ipv6_and_ipv4_mapped_peers(tmp_path: Path) -> None:
    lan = Lan().start()
    try:
        host = lan.add_host("b", 1)
        ipv6 = str(ipaddress.IPv6Address(f"fd77:{lan.subnet}::1"))  # as the broker writes it
        ip("-n", host.namespace, "addr", "add", f"{ipv6}/64", "dev", "eth0", "nodad")
        broker = DefaultBroker(tmp_path / "b", host)
        try:

            def attempt(address: str) -> bool:
                try:
                    guest(address, broker.port).close()
                except pika.exceptions.ProbableAuthenticationError:
                    return False
                return True

            assert host.call(lambda: attempt("::1"))
            assert not host.call(lambda: attempt(ipv6))  # from fd77:x::1, not loopback
            assert not host.call(lambda: attempt(host.address))  # as ::ffff:10.77.x.1
            reasons = [e["reason"] for e in broker.events("authentication_failed")]
            assert reasons == [
                f"user 'guest' may log in only from a loopback address, not {peer}"
                " (see loopback-users)"
                for peer in (ipv6, host.address)  # the IPv4-mapped peer as IPv4
            ], reasons
        finally:
            broker.stop()
    finally:
        lan.delete()
