"""The systemd template units in deploy/systemd/, checked by ``systemd-analyze verify``.

The shipped files are verified as they are, with one substitution: the installed program
paths (/usr/bin/qpidd, /usr/bin/qpid-ha-agent) become this virtualenv's, so that the
programs exist. Their options are checked against the programs' own ``--help``.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from common.priority import COORDINATOR_NICE
from tests.deploy.conftest import BIN, DEPLOY, system_tool

UNITS = DEPLOY / "systemd"
TEMPLATES = ("qpidd@.service", "qpid-ha-agent@.service", "qpid-ha-agent-supervising@.service")
PROGRAMS = {"/usr/bin/qpidd": BIN / "qpidd", "/usr/bin/qpid-ha-agent": BIN / "qpid-ha-agent"}


def render(directory: Path, substitutions: dict[str, Path] | None = None) -> None:
    """Copy every template into ``directory`` with only the program paths substituted."""
    for name in TEMPLATES:
        text = (UNITS / name).read_text()
        for installed, here in (PROGRAMS if substitutions is None else substitutions).items():
            text = text.replace(installed, str(here))
        (directory / name).write_text(text)


def verify(directory: Path, *units: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [system_tool("systemd-analyze"), "verify", "--man=no", *units],
        capture_output=True,
        text=True,
        cwd=directory,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
        timeout=60,
        check=False,
    )


@pytest.fixture
def programs() -> None:
    for installed, here in PROGRAMS.items():
        if not here.exists():
            pytest.fail(f"{here} is missing: pip install -e . provides {Path(installed).name}")


def test_units_verify_clean(tmp_path: Path, programs: None) -> None:
    render(tmp_path)
    instances = [f"./{name.replace('@.', '@node1.')}" for name in TEMPLATES]
    result = verify(tmp_path, *instances)
    assert result.returncode == 0, result.stdout + result.stderr
    # Not even a warning (an unknown key or section only warns).
    assert result.stderr.strip() == "", result.stderr


def test_verify_catches_a_missing_program(tmp_path: Path, programs: None) -> None:
    """The check bites: the same unit pointing at a program that is not there fails."""
    render(tmp_path, {"/usr/bin/qpidd": tmp_path / "no-such-qpidd"})
    result = verify(tmp_path, "./qpidd@node1.service")
    assert result.returncode != 0
    assert "no-such-qpidd" in result.stderr


def unit_settings(name: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        if not line or line.startswith(("#", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_the_agent_unit_follows_its_broker_instance() -> None:
    agent = unit_settings("qpid-ha-agent@.service")
    assert "qpidd@%i.service" in agent["BindsTo"][0].split()
    assert "qpidd@%i.service" in agent["After"][0].split()
    assert "qpidd@%i.service" in agent["WantedBy"][0].split()
    assert agent["EnvironmentFile"] == ["/etc/qpid-ha/agent-%i.env"]
    assert "--broker-command" not in agent["ExecStart"][0]
    supervising = unit_settings("qpid-ha-agent-supervising@.service")
    assert "BindsTo" not in supervising
    assert supervising["Conflicts"] == ["qpidd@%i.service"]
    assert "--broker-command ${QPID_HA_BROKER_COMMAND}" in supervising["ExecStart"][0]
    broker = unit_settings("qpidd@.service")
    assert broker["ExecStart"] == ["/usr/bin/qpidd --config /etc/qpidd/%i.conf"]


def test_the_cluster_manager_runs_ahead_of_the_broker() -> None:
    """docs/deploy.md, "Scheduling priority": the agents and the ZooKeeper drop-in at
    COORDINATOR_NICE, a CPU weight only where the cgroup holds no broker."""
    agent = unit_settings("qpid-ha-agent@.service")
    assert agent["Nice"] == [str(COORDINATOR_NICE)] and agent["CPUWeight"] == ["1000"]
    supervising = unit_settings("qpid-ha-agent-supervising@.service")
    assert supervising["Nice"] == [str(COORDINATOR_NICE)] and "CPUWeight" not in supervising
    zookeeper = unit_settings("zookeeper-priority.conf")
    assert zookeeper["Nice"] == [str(COORDINATOR_NICE)] and zookeeper["CPUWeight"] == ["1000"]
    broker = unit_settings("qpidd@.service")
    assert "Nice" not in broker and "CPUWeight" not in broker


def help_text(program: Path) -> str:
    result = subprocess.run(
        [str(program), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"},
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_option_in_the_units_is_one_the_programs_know(programs: None) -> None:
    known = {
        "/usr/bin/qpidd": set(re.findall(r"--[a-z][a-z-]+", help_text(BIN / "qpidd"))),
        "/usr/bin/qpid-ha-agent": set(
            re.findall(r"--[a-z][a-z-]+", help_text(BIN / "qpid-ha-agent"))
        ),
    }
    env = (UNITS / "agent.env").read_text()
    commands = [line for name in TEMPLATES for line in unit_settings(name)["ExecStart"]]
    commands += [
        "/usr/bin/qpid-ha-agent " + value
        for key, _, value in (line.partition("=") for line in env.splitlines())
        if key == "QPID_HA_AGENT_OPTIONS"
    ]
    commands += [
        value
        for key, _, value in (line.partition("=") for line in env.splitlines())
        if key == "QPID_HA_BROKER_COMMAND"
    ]
    assert len(commands) == 5
    for command in commands:
        program = command.split()[0]
        used = set(re.findall(r"(?<!\S)--[a-z][a-z-]+", command))
        assert used, command
        assert used <= known[program], (command, used - known[program])
