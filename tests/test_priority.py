"""The cluster manager's scheduling priority (common/priority.py, issue 25): a ZooKeeper
server or an agent runs at COORDINATOR_NICE, the broker an agent supervises back at nice 0.
Real processes; their nice values read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.polling import poll_until
from common.priority import COORDINATOR_NICE, coordinator_argv, default_priority_argv
from ha_agent.supervisor import BrokerSupervisor

#: prints its own nice value
PRINT_NICE = [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"]


def may_raise_priority() -> bool:
    """Can this process start one at a negative nice value (root, CAP_SYS_NICE)?"""
    probe = subprocess.run(coordinator_argv(PRINT_NICE), capture_output=True, text=True)
    return probe.stdout.strip() == str(COORDINATOR_NICE)


needs_privilege = pytest.mark.skipif(
    not may_raise_priority(), reason="raising a priority needs CAP_SYS_NICE"
)


def test_coordinator_argv_runs_the_command_ahead() -> None:
    if not may_raise_priority():
        # unprivileged: nice warns and runs the command anyway, unchanged
        out = subprocess.run(coordinator_argv(PRINT_NICE), capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == str(os.getpriority(0, 0))
        return
    out = subprocess.run(coordinator_argv(PRINT_NICE), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(COORDINATOR_NICE)


@needs_privilege
def test_a_coordinators_child_runs_at_the_default_priority() -> None:
    """An agent at nice -10 starts its broker at nice 0, not its own."""
    inner = (
        "import subprocess, os; "
        "from common.priority import default_priority_argv; "
        f"argv = {PRINT_NICE!r}; "
        "print(os.getpriority(os.PRIO_PROCESS, 0)); "
        "subprocess.run(default_priority_argv(argv), check=True)"
    )
    out = subprocess.run(
        coordinator_argv([sys.executable, "-c", inner]),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert out.stdout.split() == [str(COORDINATOR_NICE), "0"]


def test_default_priority_leaves_a_lower_priority_alone() -> None:
    """At nice 0 or above, the command is run as it is (no privilege to lower the value)."""
    if os.getpriority(os.PRIO_PROCESS, 0) >= 0:
        assert default_priority_argv(["x", "y"]) == ["x", "y"]


@needs_privilege
def test_the_supervised_broker_does_not_inherit_the_agents_priority(tmp_path: Path) -> None:
    """BrokerSupervisor in an agent at COORDINATOR_NICE: its broker (here a process that
    writes its nice value and sleeps) runs at 0, its pid the broker's own. The agent says
    the pid it supervises in a file, not on stdout: its supervisor thread logs
    ``broker_process_started`` there at that moment, and a log line could take the marker's
    line (the test then read on while the agent waited on its stdin: a 120 s time-out, cc1
    of 2026-12-02)."""
    out = tmp_path / "nice"
    said = tmp_path / "supervised"
    script = tmp_path / "agent.py"
    broker = [
        sys.executable,
        "-c",
        f"import os, time; open({str(out)!r}, 'w').write("
        "f'{os.getpid()} {os.getpriority(os.PRIO_PROCESS, 0)}'); time.sleep(60)",
    ]
    script.write_text(
        "import os, sys, time\n"
        "from ha_agent.supervisor import BrokerSupervisor\n"
        f"s = BrokerSupervisor({broker!r})\n"
        "s.start()\n"
        "deadline = time.monotonic() + 30\n"
        "while s.pid is None and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        f"open({str(said) + '.tmp'!r}, 'w').write(str(s.pid))\n"
        f"os.replace({str(said) + '.tmp'!r}, {str(said)!r})\n"
        "sys.stdin.readline()\n"
        "s.stop()\n"
    )
    agent = subprocess.Popen(
        coordinator_argv([sys.executable, str(script)]),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        assert agent.stdin is not None
        poll_until(lambda: said.exists() or agent.poll() is not None, timeout=60)
        assert agent.poll() is None, f"the agent exited: {agent.returncode}"
        supervised = int(said.read_text())
        poll_until(lambda: out.exists() and out.read_text().count(" ") == 1, timeout=30)
        pid, nice = out.read_text().split()
        assert (int(pid), int(nice)) == (supervised, 0)
        agent.stdin.write("\n")
        agent.stdin.flush()
        assert agent.wait(timeout=30) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_supervisor_argv_unchanged_at_the_default_priority() -> None:
    """In a process at nice 0 the supervisor starts exactly its command."""
    if os.getpriority(os.PRIO_PROCESS, 0) != 0:
        pytest.skip("this process does not run at nice 0")
    supervisor = BrokerSupervisor([sys.executable, "-c", "pass"])
    assert default_priority_argv(supervisor.argv) == supervisor.argv
