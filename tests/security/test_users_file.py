"""``qpid-ha users`` and the broker reading its file (issue 13, item 2), real processes.

Also: no password ever appears in a log line, whether the login succeeds or fails, over
AMQP or the management API.
"""

from __future__ import annotations

import base64
import http.client
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import ProbableAuthenticationError

from common.polling import poll_until
from tests.broker_process import BrokerProcess

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))


def qpid_ha(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QPID_HA, *args], input=stdin, capture_output=True, text=True, timeout=30, check=False
    )


def test_users_verbs(tmp_path: Path) -> None:
    path = str(tmp_path / "users")
    added = qpid_ha("users", "add", "alice", "-f", path, "-r", "monitoring", "--password-stdin",
                    stdin="Wonder-1\n")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert (
        qpid_ha("users", "add", "bob", "-f", path, "--password-stdin", stdin="b0b\n").returncode
        == 0
    )
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    text = Path(path).read_text()
    assert "Wonder-1" not in text and "b0b" not in text and "$scrypt$" in text
    listed = qpid_ha("users", "list", "-f", path)
    assert listed.stdout.splitlines() == ["alice\tmonitoring", "bob\t-"]

    again = qpid_ha("users", "add", "alice", "-f", path, "--password-stdin", stdin="x\n")
    assert again.returncode == 1 and again.stderr.startswith("qpid-ha: error: user 'alice' exists")
    bad_role = qpid_ha("users", "add", "carol", "-f", path, "-r", "root", "--password-stdin",
                       stdin="x\n")  # fmt: skip
    assert bad_role.returncode == 2 and "unknown role 'root'" in bad_role.stderr
    empty = qpid_ha("users", "add", "carol", "-f", path, "--password-stdin", stdin="\n")
    assert empty.returncode == 2 and "empty password" in empty.stderr

    assert (
        qpid_ha("users", "roles", "bob", "administrator", "cluster-manager", "-f", path).returncode
        == 0
    )
    assert (
        qpid_ha(
            "users", "passwd", "alice", "-f", path, "--password-stdin", stdin="Land-2\n"
        ).returncode
        == 0
    )
    assert qpid_ha("users", "delete", "bob", "-f", path).returncode == 0
    missing = qpid_ha("users", "delete", "bob", "-f", path)
    assert missing.returncode == 1 and "no such user: 'bob'" in missing.stderr
    assert qpid_ha("users", "list", "-f", path).stdout.splitlines() == ["alice\tmonitoring"]

    broken = tmp_path / "plain"
    broken.write_text("alice:Wonder-1\n")
    plain = qpid_ha("users", "list", "-f", str(broken))
    assert plain.returncode == 2 and "no password hash" in plain.stderr
    assert "Wonder-1" not in plain.stderr


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_broker_reads_the_file_and_logs_no_password(tmp_path: Path) -> None:
    path = str(tmp_path / "users")
    secret, wrong = "Zebra-Secret-77", "Wrong-Horse-42"
    assert qpid_ha("users", "add", "alice", "-f", path, "-r", "monitoring", "--password-stdin",
                   stdin=secret + "\n").returncode == 0  # fmt: skip
    broker = BrokerProcess(tmp_path / "b", args=[f"--sasl-users={path}"]).start()
    try:
        params = pika.ConnectionParameters(
            "127.0.0.1", broker.port, credentials=pika.PlainCredentials("alice", secret)
        )
        pika.BlockingConnection(params).close()
        for user in ("alice", "guest"):  # guest is not in the file
            bad = pika.ConnectionParameters(
                "127.0.0.1",
                broker.port,
                credentials=pika.PlainCredentials(user, wrong),
                connection_attempts=1,
            )
            with pytest.raises(ProbableAuthenticationError):
                pika.BlockingConnection(bad)
        for password, status in ((secret, 200), (wrong, 401)):
            conn = http.client.HTTPConnection("127.0.0.1", broker.mgmt_port, timeout=5)
            conn.request("GET", "/api/queues", headers=_basic("alice", password))
            assert conn.getresponse().status == status
            conn.close()
    finally:
        broker.stop()
    logged = broker.log_file.read_text() + (broker.workdir / "stderr").read_text()
    events = [e["event"] for e in broker.events()]
    assert "authentication_failed" in events and "management_auth_failed" in events
    assert secret not in logged and wrong not in logged


def _login(port: int, user: str, password: str) -> bool:
    params = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        credentials=pika.PlainCredentials(user, password),
        connection_attempts=1,
    )
    try:
        pika.BlockingConnection(params).close()
    except ProbableAuthenticationError:
        return False
    return True


def test_users_file_reloads_without_a_restart(tmp_path: Path) -> None:
    """A changed users file applies to later logins without a restart: by itself within a
    second (the broker watches the file), on ``qpid-ha users reload`` and on SIGHUP; a bad
    file is refused and the running users stay."""
    path = str(tmp_path / "users")
    add = ("users", "add", "ops", "-f", path, "-r", "administrator", "--password-stdin")
    assert qpid_ha(*add, stdin="ops-pw\n").returncode == 0
    broker = BrokerProcess(tmp_path / "b", args=[f"--sasl-users={path}"]).start()
    admin = ("-b", f"ops/ops-pw@127.0.0.1:{broker.mgmt_port}")

    def reloads(by: str) -> list[dict[str, Any]]:
        return [e for e in broker.events() if e["event"] == "users_reloaded" and e["by"] == by]

    try:
        added = qpid_ha("users", "add", "bob", "-f", path, "--password-stdin", stdin="bob-pw\n")
        assert added.returncode == 0
        poll_until(lambda: _login(broker.port, "bob", "bob-pw"), 10, "bob logs in")
        assert reloads("file changed")[-1]["users"] == 2
        reloaded = qpid_ha(*admin, "users", "reload")
        assert reloaded.returncode == 0, reloaded.stderr
        assert reloaded.stdout.strip() == f"reloaded {path}: 2 users"

        assert qpid_ha("users", "delete", "bob", "-f", path).returncode == 0
        broker.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]
        poll_until(lambda: reloads("SIGHUP"), 10, "users_reloaded after SIGHUP")
        poll_until(lambda: not _login(broker.port, "bob", "bob-pw"), 10, "bob refused")

        good = Path(path).read_text()
        Path(path).write_text(good + "carol:plain-text-password:\n")
        refused = qpid_ha(*admin, "users", "reload")
        assert refused.returncode == 1 and f"{path}:3: user 'carol' has no password hash" in (
            refused.stderr
        ), refused.stderr
        assert "plain-text-password" not in refused.stderr
        assert _login(broker.port, "ops", "ops-pw")  # the running users stay
        failed = [e for e in broker.events() if e["event"] == "users_reload_failed"]
        assert failed and failed[-1]["level"] == "warning"
    finally:
        broker.stop()
    assert "plain-text-password" not in broker.log_file.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_change_by_root_keeps_the_files_owner(tmp_path: Path) -> None:
    """The broker runs as qpidd (deploy/systemd) and the file is mode 0600: root running
    `qpid-ha users add` (as docs/security.md shows) replaced qpidd's file by one of root's,
    which the broker could no longer read (users_reload_failed; at the next start: cannot
    read users file, exit 2). A rewrite keeps the owner and group of the file it replaces."""
    users = tmp_path / "users"
    assert (
        qpid_ha("users", "add", "a", "--password-stdin", "-f", str(users), stdin="pw\n").returncode
        == 0
    )
    os.chown(users, 65534, 65534)  # the broker's user (nobody here)
    for args in (["add", "b"], ["passwd", "a"]):
        result = qpid_ha("users", *args, "--password-stdin", "-f", str(users), stdin="pw\n")
        assert result.returncode == 0, result.stderr
        info = users.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (65534, 65534, 0o600)
    assert qpid_ha("users", "delete", "b", "-f", str(users)).returncode == 0
    assert (users.stat().st_uid, users.stat().st_gid) == (65534, 65534)
