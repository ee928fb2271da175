"""Fixtures for the packaging tests: Debian tools, the installed OCF agent, its brokers.

The OCF tests run Pacemaker's own tools (``ocf-tester``, ``crm_resource``) on the real
agent, which starts real ``qpidd`` processes. They need root (the agent must lie under
``/usr/lib/ocf/resource.d/<provider>/``) and are skipped, saying so, only when not root; as
root (CI) a missing tool is a failure: ``make test`` installs them (``system-packages``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from common.polling import free_port, poll_until

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
AGENT_SOURCE = DEPLOY / "ocf" / "qpidd-ha"
BIN = Path(sys.executable).parent
QPIDD = BIN / "qpidd"
QPID_HA = BIN / "qpid-ha"
OCF_ROOT = Path("/usr/lib/ocf")
IS_ROOT = os.geteuid() == 0

ROOT_REASON = (
    "needs root: installs the OCF agent under /usr/lib/ocf/resource.d and runs Pacemaker's"
    " ocf-tester and crm_resource (CI runs as root)"
)
needs_root = pytest.mark.skipif(not IS_ROOT, reason=ROOT_REASON)

#: Each tool the tests run, with the Debian package that has it.
PACKAGES = {
    "ocf-tester": "resource-agents",
    "xmllint": "libxml2-utils",
    "crm_resource": "pacemaker-cli-utils",
    "systemd-analyze": "systemd",
}


def system_tool(name: str) -> str:
    """The path of a Debian tool: skip when missing and not root, fail when root."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin:/sbin:/bin"
    found = shutil.which(name, path=path)
    if found is not None:
        return found
    message = f"{name} is not installed (Debian package {PACKAGES.get(name, name)})"
    if IS_ROOT:
        pytest.fail(message + ": `make test` installs it (target system-packages)")
    pytest.skip(message + " and installing it needs root")


def pid_alive(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[-1][:1] not in ("Z", "X")


def kill_and_wait(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` (a broker the agent started, not our child) and wait until gone."""
    if not pid_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    poll_until(
        lambda: not pid_alive(pid), timeout, f"process {pid} gone after SIGKILL", interval=0.05
    )


def pids_using(marker: str) -> list[int]:
    """PIDs of processes whose command line holds ``marker`` (a test's own temp path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def ocf_provider() -> Iterator[str]:
    """The agent installed under a provider of its own; removed afterwards."""
    if not IS_ROOT:
        pytest.skip(ROOT_REASON)
    provider = f"qpidtest{uuid.uuid4().hex[:8]}"
    directory = OCF_ROOT / "resource.d" / provider
    directory.mkdir(parents=True)
    try:
        target = directory / "qpidd-ha"
        shutil.copyfile(AGENT_SOURCE, target)
        target.chmod(0o755)
        yield provider
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class OcfBroker:
    """One qpidd-ha resource instance, driven through ``crm_resource --force-*``."""

    name: str
    workdir: Path
    provider: str
    port: int
    mgmt_port: int
    brokers_url: str = ""
    extra_options: str = ""
    seen_pids: set[int] = field(default_factory=set)

    @property
    def pidfile(self) -> Path:
        return self.workdir / "qpidd.pid"

    def params(self) -> dict[str, str]:
        return {
            "qpidd": str(QPIDD),
            "qpid_ha": str(QPID_HA),
            "data_dir": str(self.workdir / "data"),
            "port": str(self.port),
            "mgmt_port": str(self.mgmt_port),
            "brokers_url": self.brokers_url or f"127.0.0.1:{self.port}",
            "pidfile": str(self.pidfile),
            "log_file": str(self.workdir / "qpidd.log"),
            "admin_user": "guest",
            "admin_password": "guest",
            "check_timeout": "3",
            "options": (
                f"--interface=127.0.0.1 --mgmt-interface=127.0.0.1 --node-name={self.name}"
                " --ha-replicate=all --link-maintenance-interval=0.1 --ha-backup-timeout=2"
                f" --ha-username=guest --ha-password=guest {self.extra_options}"
            ).strip(),
        }

    def pid(self) -> int | None:
        try:
            text = self.pidfile.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def crm(self, action: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        """Run one agent action through ``crm_resource --force-ACTION``; output in stdout."""
        command = [
            system_tool("crm_resource"),
            f"--force-{action}",
            # The operation timeout the agent sees (CRM_meta_timeout), as deploy/pacemaker.md
            # configures start and stop: 60 s.
            "--timeout=60",
            "--class=ocf",
            f"--provider={self.provider}",
            "--agent=qpidd-ha",
        ]
        for key, value in self.params().items():
            command += ["--option", f"{key}={value}"]
        # crm_resource prints the agent's stderr (its log lines) on stdout: keep one stream.
        result = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        pid = self.pid()
        if pid is not None:
            self.seen_pids.add(pid)
        return result

    def cleanup(self) -> None:
        """The agent's stop, then SIGKILL for any broker of this instance still alive."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.crm("stop")
        for pid in sorted(self.seen_pids | set(pids_using(str(self.workdir)))):
            kill_and_wait(pid)


@pytest.fixture
def ocf_brokers(ocf_provider: str, tmp_path: Path) -> Iterator[Callable[[str], OcfBroker]]:
    """A factory of OCF broker instances on free loopback ports, all cleaned up after."""
    made: list[OcfBroker] = []

    def make(name: str) -> OcfBroker:
        workdir = tmp_path / name
        workdir.mkdir()
        broker = OcfBroker(name, workdir, ocf_provider, free_port(), free_port())
        made.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in made:
            broker.cleanup()
