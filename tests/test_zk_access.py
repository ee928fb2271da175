"""common.zk_access's TLS part, shared by the agent (--zk-ssl*) and the console
(--console-zk-ssl*): files that do not load, and one handshake that says why TLS fails."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.polling import free_port
from common.zk_access import (
    TlsFileError,
    ZkAccess,
    connect_refusal,
    tls_context,
    tls_failure,
    tls_problem,
)
from ha_agent.zk_tls import ZkTls, tls_refusal, zk_tls


@pytest.fixture
def not_tls() -> Iterator[int]:
    """A loopback server that answers a TLS hello with plain text, as a plain port does."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer() -> None:
            try:
                peer, _ = server.accept()
            except OSError:
                return
            with peer:
                peer.recv(4096)
                peer.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        yield int(server.getsockname()[1])
    thread.join(5)


def test_a_file_that_does_not_load_names_its_option_and_says_why(tmp_path: Path) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(TlsFileError, match=r"^--zk-ssl-ca-file '.*ca.pem': ") as caught:
        tls_context(str(garbage), None, None, "--zk-ssl")
    assert caught.value.reason
    with pytest.raises(ValueError, match=r"^--zk-ssl-ca-file '.*ca.pem': "):
        zk_tls(True, str(garbage), None, None)
    problem = tls_problem("127.0.0.1:1", ZkAccess(tls=True, ca_file=str(garbage)))
    assert problem == f"TLS files: {caught.value.reason}"


def test_a_plain_port_is_named_and_a_silent_one_is_not_a_tls_failure(not_tls: int) -> None:
    silent = free_port()
    hosts = f"127.0.0.1:{silent},127.0.0.1:{not_tls}/chroot"
    failure = tls_failure(hosts, tls_context(None, None, None, "--zk-ssl"), 5.0)
    assert failure is not None
    assert failure.startswith(f"127.0.0.1:{not_tls}: TLS: handshake failed (")
    assert failure.endswith("): is it ZooKeeper's secureClientPort?")
    assert tls_failure(f"127.0.0.1:{silent}", tls_context(None, None, None, "x"), 5.0) is None


def test_the_agent_says_zookeeper_and_the_kazoo_options_are_the_consoles(not_tls: int) -> None:
    refusal = tls_refusal(f"127.0.0.1:{not_tls}", ZkTls())
    assert refusal is not None and refusal.startswith(f"ZooKeeper 127.0.0.1:{not_tls}: TLS: ")
    assert ZkTls("ca", "cert", "key").kazoo_options() == {
        "use_ssl": True,
        "ca": "ca",
        "certfile": "cert",
        "keyfile": "key",
        "verify_certs": True,
        "check_hostname": True,
    }


def test_connect_refusal_tells_a_listening_port_from_a_closed_one() -> None:
    closed = free_port()
    assert connect_refusal(f"127.0.0.1:{closed}", 5) == (False, "connection refused")
    assert connect_refusal(f"127.0.0.1:{closed},127.0.0.1:{free_port()}/chroot", 5) == (
        False,
        "connection refused",
    )
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert connect_refusal(f"127.0.0.1:{closed},127.0.0.1:{port}", 5) == (True, None)
    assert connect_refusal("127.0.0.1:x", 5) == (False, "no port number")
