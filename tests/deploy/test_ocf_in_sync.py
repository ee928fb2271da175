"""The OCF agent keeps the in-sync set in the CIB (docs/reliability.md, "Under Pacemaker").

Real brokers, started and promoted by the agent itself (run from deploy/ with /bin/sh, as
Pacemaker would), a primary and a backup on loopback:

- a ready backup outside the CIB's set gets no promotion score (the reason logged once),
  and promote refuses it; inside the set it scores ready_score;
- the primary's monitor stores the broker's set in the CIB and only after that write
  commits exactly that set: a gone in-sync backup's held confirm stays held while the
  write fails and is released once it succeeds;
- promote passes the CIB's set to the broker (--in-sync) and stores the set minus the new
  primary at its new epoch.

Pacemaker's daemons are not running in the test machine, so ``crm_attribute`` has no CIB
(it exits 102). Only then are ``crm_attribute`` and ``crm_master`` replaced, first on the
agent's PATH and in ``HA_SBIN_DIR``, by a recording stand-in (``cib_standin.py``): it
checks the command lines and keeps the attribute in a file the next call reads. With a
real CIB the real tools are used, on an attribute of the test's own, deleted afterwards,
and the steps that need the stand-in (a failing write, the call log) are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest

from common.polling import free_port, poll_until
from tests.deploy.conftest import AGENT_SOURCE, OCF_ROOT, QPID_HA, QPIDD, kill_and_wait, pids_using
from tests.ha.cluster import http

OCF_SUCCESS, OCF_ERR_GENERIC, OCF_RUNNING_PROMOTED = 0, 1, 8
# ~30 s each quiet, 110-120 s at load 45 (a CI run beside other suites hit the default 120)
pytestmark = pytest.mark.timeout(300)
STANDIN = Path(__file__).with_name("cib_standin.py")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def real_cib_answers() -> bool:
    """Whether Pacemaker's CIB answers here (crm_attribute does not exit 102)."""
    tool = shutil.which("crm_attribute", path=SYSTEM_PATH)
    if tool is None:
        return False
    probe = subprocess.run(
        [tool, "--type", "crm_config", "--name", "qpidd-test-probe", "--query", "--quiet"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return probe.returncode != 102


@dataclass
class Cib:
    """The cluster-wide attribute and the promotion scores, real or the stand-in's."""

    resource: str
    state: Path
    bin: Path | None  # the stand-in's directory; None with a real CIB

    @property
    def name(self) -> str:
        return f"qpidd-in-sync-{self.resource}"

    def _tool(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = ["crm_attribute", "--type", "crm_config", "--set-name", "qpidd-ha"]
        return subprocess.run(
            [*command, "--name", self.name, *args],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env("test")},
            timeout=30,
            check=False,
        )

    def env(self, node: str) -> dict[str, str]:
        """What the agent runs with to reach this CIB."""
        if self.bin is None:
            return {"PATH": SYSTEM_PATH}
        return {
            "PATH": f"{self.bin}:{SYSTEM_PATH}",
            "HA_SBIN_DIR": str(self.bin),
            "QPIDD_TEST_CIB": str(self.state),
            "QPIDD_TEST_NODE": node,
        }

    def get(self) -> str | None:
        result = self._tool("--query", "--quiet")
        return None if result.returncode == 105 else result.stdout.strip()

    def put(self, value: str) -> None:
        assert self._tool("--update", value).returncode == 0

    def delete(self) -> None:
        self._tool("--delete")

    def score(self, node: str) -> str | None:
        """The stand-in's promotion score of ``node`` (None: deleted)."""
        path = self.state / f"score-{node}"
        return path.read_text() if path.exists() else None

    def calls(self) -> list[dict[str, Any]]:
        path = self.state / "calls.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]

    def fail_updates(self, failing: bool) -> None:
        flag = self.state / "fail-update"
        if failing:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)


@pytest.fixture
def cib(tmp_path: Path) -> Iterator[Cib]:
    state = tmp_path / "cib"
    state.mkdir()
    if real_cib_answers():
        real = Cib(f"qpiddtest{uuid.uuid4().hex[:8]}", state, None)
        try:
            yield real
        finally:
            real.delete()
        return
    # Pacemaker's daemons are not running in the test machine: the recording stand-in.
    bin_dir = tmp_path / "standin-bin"
    bin_dir.mkdir()
    for tool in ("crm_attribute", "crm_master"):
        wrapper = bin_dir / tool
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} {tool} "$@"\n')
        wrapper.chmod(0o755)
    stand_in = Cib("qpidd", state, bin_dir)
    yield stand_in
    assert not [c for c in stand_in.calls() if c.get("bad")], stand_in.calls()


def needs_standin(cib: Cib) -> None:
    if cib.bin is None:
        pytest.skip("needs the recording stand-in (a real CIB answers here)")


@dataclass
class Node:
    """One instance of the agent on loopback: a broker it starts, stops and promotes."""

    name: str
    workdir: Path
    cib: Cib
    port: int
    mgmt_port: int
    brokers_url: str = ""
    backup_timeout: float = 2.0

    def params(self) -> dict[str, str]:
        return {
            "qpidd": str(QPIDD),
            "qpid_ha": str(QPID_HA),
            "data_dir": str(self.workdir / "data"),
            "port": str(self.port),
            "mgmt_port": str(self.mgmt_port),
            "brokers_url": self.brokers_url,
            "pidfile": str(self.workdir / "qpidd.pid"),
            "log_file": str(self.workdir / "qpidd.log"),
            "admin_user": "guest",
            "admin_password": "guest",
            "check_timeout": "3",
            "options": (
                f"--interface=127.0.0.1 --mgmt-interface=127.0.0.1 --node-name={self.name}"
                " --ha-replicate=all --link-maintenance-interval=0.1"
                f" --ha-backup-timeout={self.backup_timeout:g}"
                " --link-heartbeat-interval=1 --ha-username=guest --ha-password=guest"
            ),
        }

    def run(self, action: str) -> subprocess.CompletedProcess[str]:
        """One agent action; its log lines (stderr) in ``stdout`` too."""
        env = {
            "OCF_ROOT": str(OCF_ROOT),
            "OCF_RESOURCE_INSTANCE": f"{self.cib.resource}:{self.name}",
            "OCF_RESKEY_CRM_meta_timeout": "60000",
            **{f"OCF_RESKEY_{k}": v for k, v in self.params().items()},
            **self.cib.env(self.name),
        }
        return subprocess.run(
            ["/bin/sh", str(AGENT_SOURCE), action],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            timeout=90,
            check=False,
        )

    def ha(self) -> dict[str, Any]:
        return dict(http("GET", self.mgmt_port, "/api/ha"))

    def pid(self) -> int:
        return int((self.workdir / "qpidd.pid").read_text())

    def kill(self) -> None:
        kill_and_wait(self.pid())


@pytest.fixture
def nodes(cib: Cib, tmp_path: Path) -> Iterator[Callable[..., list[Node]]]:
    """``nodes(n)``: n started agents' brokers of one cluster, stopped afterwards."""
    made: list[Node] = []

    def make(count: int, backup_timeout: float = 2.0) -> list[Node]:
        for i in range(count):
            workdir = tmp_path / f"n{i}"
            workdir.mkdir()
            node = Node(f"n{i}", workdir, cib, free_port(), free_port())
            node.backup_timeout = backup_timeout
            made.append(node)
        url = ",".join(f"127.0.0.1:{n.port}" for n in made)
        for node in made:
            node.brokers_url = url
            start = node.run("start")
            assert start.returncode == OCF_SUCCESS, start.stdout
        return made

    try:
        yield make
    finally:
        for node in made:
            node.run("stop")
            for pid in pids_using(str(node.workdir)):
                kill_and_wait(pid)


def monitor(node: Node, code: int) -> str:
    result = node.run("monitor")
    assert result.returncode == code, result.stdout
    return result.stdout


def test_the_set_scores_backups_and_releases_a_gone_one_only_after_the_cib_write(
    cib: Cib, nodes: Callable[..., list[Node]]
) -> None:
    primary, backup = nodes(2)
    promote = primary.run("promote")
    assert promote.returncode == OCF_SUCCESS, promote.stdout
    epoch = primary.ha()["epoch"]
    poll_until(lambda: backup.ha()["state"] == "ready", 20, "the backup ready")
    backup_id = backup.ha()["broker_id"]

    # The CIB's set (as promote's monitor stored it, or as a primary that has not yet
    # seen the backup in sync would): a ready backup outside it gets no score, once logged.
    cib.put(f"{epoch}")
    out = monitor(backup, OCF_SUCCESS)
    assert (
        f"promotion score delete (broker ready): broker {backup_id} is not in the"
        f" cluster's in-sync set (qpidd-in-sync-{cib.resource})"
    ) in out
    assert "promotion score" not in monitor(backup, OCF_SUCCESS)  # logged once
    refused = backup.run("promote")
    assert refused.returncode == OCF_ERR_GENERIC, refused.stdout
    assert f"cannot promote: broker {backup_id} is not in the in-sync set '{epoch}'" in (
        refused.stdout
    )
    assert backup.ha()["state"] == "ready"
    if cib.bin is not None:
        assert cib.score(backup.name) is None

    # The primary's monitor stores the set with the backup, then commits it to the broker.
    poll_until(lambda: primary.ha()["in_sync"]["wanted"] == [backup_id], 10, "in sync")
    out = monitor(primary, OCF_RUNNING_PROMOTED)
    assert f"in-sync set stored in the CIB: '{epoch} {backup_id}' (was '{epoch}')" in out
    assert cib.get() == f"{epoch} {backup_id}"
    assert primary.ha()["in_sync"]["committed"] == {"epoch": epoch, "members": [backup_id]}
    assert "promotion score 100 (broker ready)" in monitor(backup, OCF_SUCCESS)
    if cib.bin is not None:
        assert cib.score(backup.name) == "100"
    assert "in-sync set" not in monitor(primary, OCF_RUNNING_PROMOTED)  # nothing to do

    # A value that is not a set (written by hand?): no score; the primary replaces it.
    cib.put("garbage")
    out = monitor(backup, OCF_SUCCESS)
    assert "promotion score delete (broker ready): cannot read the in-sync set" in out
    out = monitor(primary, OCF_RUNNING_PROMOTED)
    assert f"stored in the CIB: '{epoch} {backup_id}' (was 'unreadable')" in out
    assert "promotion score 100 (broker ready)" in monitor(backup, OCF_SUCCESS)

    # The backup dies: its confirms are held until a set without it is in the CIB.
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", primary.port))
    channel = connection.channel()
    channel.queue_declare("q")
    channel.confirm_delivery()
    backup.kill()
    poll_until(lambda: primary.ha()["in_sync"]["pending_removal"] == [backup_id], 10, "gone")
    confirmed = threading.Event()

    def publish() -> None:
        channel.basic_publish("", "q", b"held until the CIB excludes the backup")
        confirmed.set()

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        poll_until(lambda: primary.ha()["held_confirms"] >= 1, 10, "the confirm held")
        if cib.bin is not None:
            cib.fail_updates(True)
            out = monitor(primary, OCF_RUNNING_PROMOTED)
            assert f"could not write the in-sync set '{epoch}' to the CIB" in out
            assert cib.get() == f"{epoch} {backup_id}"
            assert primary.ha()["in_sync"]["pending_removal"] == [backup_id]
            assert not confirmed.wait(0.5)
            cib.fail_updates(False)
        out = monitor(primary, OCF_RUNNING_PROMOTED)
        assert f"in-sync set stored in the CIB: '{epoch}' (was '{epoch} {backup_id}')" in out
        assert f"in-sync set '{epoch}' committed to the broker; released: " in out
        assert cib.get() == f"{epoch}"
        assert confirmed.wait(10), "the confirm is released once the set is committed"
        assert primary.ha()["in_sync"]["pending_removal"] == []
    finally:
        publisher.join(15)
        connection.close()
    if cib.bin is not None:
        # The write came before the commit, and the failed write was not followed by one.
        updates = [c for c in cib.calls() if "--update" in c["args"]]
        assert [(c["args"][-1], c["rc"]) for c in updates][-3:] == [
            (f"{epoch} {backup_id}", 0),
            (f"{epoch}", 1),
            (f"{epoch}", 0),
        ]


def test_promote_passes_the_set_and_stores_it_at_the_new_epoch(
    cib: Cib, nodes: Callable[..., list[Node]]
) -> None:
    # ha-backup-timeout 6 s: the new primary most likely still expects ghost when it looks.
    primary, backup = nodes(2, backup_timeout=6.0)
    assert primary.run("promote").returncode == OCF_SUCCESS
    poll_until(lambda: backup.ha()["state"] == "ready", 20, "the backup ready")
    backup_id = backup.ha()["broker_id"]
    poll_until(lambda: primary.ha()["in_sync"]["wanted"] == [backup_id], 10, "in sync")
    monitor(primary, OCF_RUNNING_PROMOTED)
    epoch = primary.ha()["epoch"]
    assert cib.get() == f"{epoch} {backup_id}"

    # A member the new primary must expect, which will never come back.
    cib.put(f"{epoch} {backup_id} ghost")
    primary.kill()
    promote = backup.run("promote")
    assert promote.returncode == OCF_SUCCESS, promote.stdout
    status = backup.ha()
    assert status["epoch"] == epoch + 1
    # expected: still awaited, or (a loaded machine past ha-backup-timeout already) pending
    # removal; either way held until the CIB says it is gone
    in_sync = status["in_sync"]
    stored = f"in-sync set stored in the CIB: '{epoch + 1} ghost'"
    removed = f"in-sync set stored in the CIB: '{epoch + 1}' (was '{epoch + 1} ghost')"
    assert stored in promote.stdout
    if ["ghost"] not in (in_sync["wanted"], in_sync["pending_removal"]):
        # A machine so slow that ha-backup-timeout passed inside the promote action: its
        # closing monitor already stored the removal, after the set with ghost.
        assert removed in promote.stdout, (promote.stdout, status)
        assert promote.stdout.index(stored) < promote.stdout.index(removed)
        assert cib.get() == f"{epoch + 1}"
        assert in_sync["committed"]["members"] == [], status
        return
    assert cib.get() == f"{epoch + 1} ghost"

    # ghost is not back within ha-backup-timeout: its removal waits for the CIB.
    poll_until(lambda: backup.ha()["in_sync"]["pending_removal"] == ["ghost"], 15, "gone")
    out = monitor(backup, OCF_RUNNING_PROMOTED)
    assert removed in out
    assert cib.get() == f"{epoch + 1}"
    assert backup.ha()["in_sync"]["pending_removal"] == []
