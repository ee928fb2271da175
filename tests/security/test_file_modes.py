"""A users file or ACL that others may write is refused at start, one line naming it and
exit 2; one that others may read starts with one warning (issue 30, item 3). Real qpidd
processes; the reload keeps the running users when the file became writable by others."""

from __future__ import annotations

import base64
import http.client
import os
import subprocess
from pathlib import Path

import pytest

from broker.security.file_modes import FileModeError, readable_by_others
from tests.broker_process import QPIDD, BrokerProcess
from tests.console.support import write_users
from tests.drill.log_schema import check_log_file

ACL = "acl allow all all\n"


def start_refused(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            QPIDD,
            "--port=0",
            "--mgmt-port=0",
            "--interface=127.0.0.1",
            "--mgmt-interface=127.0.0.1",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("which", ["users", "acl"])
def test_a_file_writable_by_others_is_refused_at_start(tmp_path: Path, which: str) -> None:
    users = write_users(tmp_path / "users")
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    os.chmod(acl, 0o640)
    bad = users if which == "users" else acl
    os.chmod(bad, 0o646)
    refused = start_refused(f"--sasl-users={users}", f"--acl-file={acl}")
    assert refused.returncode == 2, refused.stderr
    what = "users file" if which == "users" else "ACL file"
    assert refused.stderr.splitlines() == [
        f"qpidd: error: {what} {str(bad)!r} is writable by others (mode 0646): refused, any"
        f" local account could give itself every right; chmod o-w {bad}"
    ]


def test_a_file_readable_by_others_warns_once_and_reload_refuses_writable(
    tmp_path: Path,
) -> None:
    users = write_users(tmp_path / "users")
    os.chmod(users, 0o644)
    broker = BrokerProcess(tmp_path, [f"--sasl-users={users}"]).start()
    try:
        warnings = [e for e in broker.events() if e["event"] == "security_file_readable"]
        assert [(e["file"], e["level"]) for e in warnings] == [(str(users), "warning")]
        assert check_log_file(broker.log_file)[1] == []
        os.chmod(users, 0o666)  # then made writable by others: a reload keeps the users
        connection = http.client.HTTPConnection("127.0.0.1", broker.mgmt_port, timeout=10)
        token = base64.b64encode(b"guest:guest").decode()
        connection.request("POST", "/api/users/reload", headers={"Authorization": f"Basic {token}"})
        answer = connection.getresponse()
        body = answer.read().decode()
        assert answer.status == 409 and "writable by others" in body, (answer.status, body)
    finally:
        broker.stop()


def test_the_decision(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("x")
    os.chmod(path, 0o600)
    assert readable_by_others(str(path), "users file") is None
    os.chmod(path, 0o660)  # the group is the administrator's choice
    assert readable_by_others(str(path), "users file") is None
    os.chmod(path, 0o604)
    assert "readable by others (mode 0604)" in str(readable_by_others(str(path), "users file"))
    os.chmod(path, 0o602)
    with pytest.raises(FileModeError, match="writable by others"):
        readable_by_others(str(path), "users file")
    assert readable_by_others(str(tmp_path / "missing"), "users file") is None
