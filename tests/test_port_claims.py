"""common.port_claims: a port claimed by a live process is not given to another."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from common import polling, port_claims

CLAIM_AND_WAIT = """
import sys
from pathlib import Path
from common import port_claims
assert port_claims.claim(int(sys.argv[1]), Path(sys.argv[2]))
print("claimed", flush=True)
sys.stdin.read()
"""


def _claimant(port: int, directory: Path) -> subprocess.Popen[str]:
    """Another process that claims ``port`` and lives until its stdin closes."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen(
        [sys.executable, "-c", CLAIM_AND_WAIT, str(port), str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "claimed"
    return child


def test_a_live_process_claim_refuses_the_port_until_it_exits(tmp_path: Path) -> None:
    child = _claimant(23456, tmp_path)
    try:
        assert not port_claims.claim(23456, tmp_path)
        assert port_claims.claim(23457, tmp_path)  # another port: free to claim
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert port_claims.claim(23456, tmp_path)  # its claim lapsed with it
    assert (tmp_path / "23456").read_text() == str(os.getpid())
    assert port_claims.claim(23456, tmp_path)  # this process's own claim: again


def test_claims_that_cannot_be_read_or_written_refuse_nothing(tmp_path: Path) -> None:
    (tmp_path / "23458").write_text("not a pid")
    assert port_claims.claim(23458, tmp_path)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert port_claims.claim(23459, blocked / "claims")  # cannot make the directory


def test_alive() -> None:
    assert port_claims.alive(os.getpid())
    assert not port_claims.alive(0)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    assert not port_claims.alive(child.pid)


def test_free_port_skips_a_port_another_process_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pytest workers choosing at once: the second is not given the first's port, bound
    or not."""
    monkeypatch.setattr(port_claims, "claims_dir", lambda: tmp_path)
    held = polling.free_port()  # free now, and claimed by nobody else
    polling._given_ports.discard(held)
    (tmp_path / str(held)).unlink()
    child = _claimant(held, tmp_path)
    try:
        first = [held]
        real = random.randint
        monkeypatch.setattr(
            "common.polling.random.randint", lambda a, b: first.pop() if first else real(a, b)
        )
        port = polling.free_port()
        assert port != held and not first
        assert (tmp_path / str(port)).read_text() == str(os.getpid())
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
