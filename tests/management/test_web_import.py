"""broker.management.web_import: contexts made while the CA file is held out trust the CA
directory, no more; the hold ends with the block. Real TLS handshakes over a socket pair."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from broker.management.web_import import ca_directory_only
from tests.security.certs import Ca


def handshake(client: ssl.SSLContext, cert: Path, key: Path) -> bool:
    """Whether ``client`` accepts a server presenting ``cert`` for ``localhost``."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.settimeout(30)
        theirs.settimeout(30)

        def serve() -> None:
            try:
                with server.wrap_socket(theirs, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass  # the client refused the certificate

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with client.wrap_socket(ours, server_hostname="localhost"):
                return True
        except ssl.SSLCertVerificationError:
            return False
        finally:
            thread.join(timeout=30)


def test_a_context_made_while_held_trusts_the_ca_directory_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_dir, in_file = Ca.make(tmp_path / "in-dir", "dir-ca"), Ca.make(tmp_path / "in-file", "f")
    directory = tmp_path / "certs"
    directory.mkdir()
    (directory / "dir-ca.pem").write_bytes(in_dir.cert.read_bytes())
    subprocess.run(["openssl", "rehash", str(directory)], check=True, timeout=60)
    monkeypatch.setenv("SSL_CERT_DIR", str(directory))
    monkeypatch.setenv("SSL_CERT_FILE", str(in_file.cert))
    by_dir, by_file = in_dir.issue("a", "localhost"), in_file.issue("b", "localhost")

    with ca_directory_only():
        held = ssl.create_default_context()
    after = ssl.create_default_context()

    assert handshake(held, *by_dir)
    assert not handshake(held, *by_file)  # the file was not read: less trust, never more
    assert handshake(after, *by_dir) and handshake(after, *by_file)  # the hold has ended
