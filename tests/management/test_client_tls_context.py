"""The management client's TLS context (``broker.management.client``): made once per CA
file, again when the file changes (a CA rotated under a running agent), never kept when it
could not be made."""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path

import pytest

from broker.management import client
from broker.management.client import CA_FILE_VARIABLE


def _a_ca_file(path: Path) -> Path:
    """A real PEM file of CA certificates (the system's), copied to ``path``."""
    system = ssl.get_default_verify_paths().cafile
    if system is None or not os.path.exists(system):
        pytest.skip("no system CA file to copy")
    shutil.copyfile(system, path)
    return path


def test_one_context_per_ca_file_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = _a_ca_file(tmp_path / "ca.pem")
    monkeypatch.setenv(CA_FILE_VARIABLE, str(ca))
    first = client._tls_context()
    assert client._tls_context() is first  # not parsed again at every call
    assert first.verify_mode is ssl.CERT_REQUIRED and first.check_hostname
    assert first.cert_store_stats()["x509_ca"] > 0
    stat = ca.stat()
    os.utime(ca, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # rotated
    rotated = client._tls_context()
    assert rotated is not first
    assert client._tls_context() is rotated
    other = _a_ca_file(tmp_path / "other.pem")
    monkeypatch.setenv(CA_FILE_VARIABLE, str(other))
    assert client._tls_context() not in (first, rotated)  # another file, another context


def test_a_missing_ca_file_fails_at_every_call_until_it_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "later.pem"
    monkeypatch.setenv(CA_FILE_VARIABLE, str(missing))
    for _ in range(2):
        with pytest.raises(FileNotFoundError):
            client._tls_context()
    _a_ca_file(missing)
    assert client._tls_context().cert_store_stats()["x509_ca"] > 0
