"""The OCF agent deploy/ocf/qpidd-ha under Pacemaker's own tools, with real brokers.

- meta-data is valid against ra-api-1.dtd; validate-all names what is wrong;
- ``ocf-tester`` passes (start, monitor, notify, promote/demote twice, stop twice);
- ``crm_resource --force-*`` gives Pacemaker's codes: 7 stopped, 0 backup, 8 primary;
- two brokers: the agent promotes one, the other becomes a ready backup (score 100); the
  primary killed by SIGKILL is 9 (failed promoted), the ready backup is promoted in its
  place, and the old primary demoted (restarted) follows it as a ready backup.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from common.polling import PollTimeout, free_port, poll_until
from tests.deploy.conftest import (
    AGENT_SOURCE,
    OCF_ROOT,
    QPID_HA,
    QPIDD,
    OcfBroker,
    needs_root,
    pid_alive,
    system_tool,
)
from tests.ha.cluster import http

OCF_SUCCESS, OCF_ERR_GENERIC, OCF_ERR_INSTALLED, OCF_ERR_CONFIGURED = 0, 1, 5, 6
OCF_NOT_RUNNING, OCF_RUNNING_PROMOTED, OCF_FAILED_PROMOTED = 7, 8, 9

ACTIONS = {"start", "stop", "monitor", "promote", "demote", "notify", "validate-all", "meta-data"}


def run_agent(
    action: str, params: dict[str, str] | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the agent straight from deploy/ with /bin/sh, as Pacemaker would (no cluster)."""
    environment = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "OCF_ROOT": str(OCF_ROOT),
        "OCF_RESOURCE_INSTANCE": "qpidd-test",
        **{f"OCF_RESKEY_{key}": value for key, value in (params or {}).items()},
        **(env or {}),
    }
    return subprocess.run(
        ["/bin/sh", str(AGENT_SOURCE), action],
        capture_output=True,
        text=True,
        env=environment,
        timeout=30,
        check=False,
    )


def valid_params(tmp_path: Path) -> dict[str, str]:
    return {
        "qpidd": str(QPIDD),
        "qpid_ha": str(QPID_HA),
        "data_dir": str(tmp_path / "data"),
        "pidfile": str(tmp_path / "qpidd.pid"),
        "brokers_url": "127.0.0.1:5672",
    }


def test_agent_is_a_posix_shell_script() -> None:
    text = AGENT_SOURCE.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert os.access(AGENT_SOURCE, os.X_OK), "deploy/ocf/qpidd-ha must be executable (755)"
    assert subprocess.run(["/bin/sh", "-n", str(AGENT_SOURCE)], check=False).returncode == 0


def test_meta_data_is_valid_and_lists_the_actions_and_parameters() -> None:
    result = run_agent("meta-data")
    assert result.returncode == OCF_SUCCESS, result.stderr
    dtd = Path("/usr/share/resource-agents/ra-api-1.dtd")
    xmllint = system_tool("xmllint")
    if not dtd.exists():
        if os.geteuid() == 0:
            pytest.fail(f"{dtd} is missing (Debian package resource-agents)")
        pytest.skip(f"{dtd} is missing (Debian package resource-agents) and needs root")
    lint = subprocess.run(
        [xmllint, "--noout", "--valid", "-"],
        input=result.stdout,
        capture_output=True,
        text=True,
        cwd=dtd.parent,
        check=False,
    )
    assert lint.returncode == 0, lint.stderr
    root = ET.fromstring(result.stdout)
    assert {a.get("name") for a in root.iter("action")} == ACTIONS
    roles = {a.get("role") for a in root.iter("action") if a.get("name") == "monitor"}
    assert roles == {"Promoted", "Unpromoted"}
    params = {p.get("name") for p in root.iter("parameter")}
    assert {
        "qpidd",
        "qpid_ha",
        "config",
        "data_dir",
        "port",
        "mgmt_port",
        "brokers_url",
        "pidfile",
        "options",
    } <= params


def test_default_pid_file_ignores_the_clone_instance_number() -> None:
    """An anonymous clone's instance may be qpidd:0 today and qpidd:2 tomorrow on the same
    node: the default PID file (how monitor finds the broker) must be the same."""
    meta = run_agent("meta-data", env={"OCF_RESOURCE_INSTANCE": "qpidd:2", "HA_RSCTMP": "/x"})
    defaults = {
        str(p.get("name")): next(p.iter("content")).get("default")
        for p in ET.fromstring(meta.stdout).iter("parameter")
    }
    assert defaults["pidfile"] == "/x/qpidd-ha-qpidd.pid"
    assert defaults["log_file"] == "/var/log/qpidd/qpidd-ha-qpidd.log"


def test_meta_data_without_ocf_shellfuncs() -> None:
    """The agent's own fallbacks when the resource-agents functions are not installed."""
    result = run_agent("meta-data", env={"OCF_FUNCTIONS_DIR": "/nonexistent"})
    assert result.returncode == OCF_SUCCESS
    assert '<resource-agent name="qpidd-ha"' in result.stdout


@pytest.mark.parametrize("functions", ["installed", "fallback"])
def test_validate_all_names_what_is_wrong(tmp_path: Path, functions: str) -> None:
    env = {"OCF_FUNCTIONS_DIR": "/nonexistent"} if functions == "fallback" else {}
    good = valid_params(tmp_path)
    assert run_agent("validate-all", good, env).returncode == OCF_SUCCESS
    cases: list[tuple[dict[str, str], int, str]] = [
        ({"brokers_url": ""}, OCF_ERR_CONFIGURED, "brokers_url"),
        ({"port": "0"}, OCF_ERR_CONFIGURED, "parameter port"),
        ({"mgmt_port": "http"}, OCF_ERR_CONFIGURED, "parameter mgmt_port"),
        ({"ready_score": "lots"}, OCF_ERR_CONFIGURED, "ready_score"),
        ({"config": str(tmp_path / "missing.conf")}, OCF_ERR_CONFIGURED, "missing.conf"),
        ({"qpidd": str(tmp_path / "no-qpidd")}, OCF_ERR_INSTALLED, "no-qpidd"),
        ({"qpid_ha": "/nonexistent/qpid-ha"}, OCF_ERR_INSTALLED, "/nonexistent/qpid-ha"),
    ]
    for change, code, words in cases:
        result = run_agent("validate-all", {**good, **change}, env)
        assert result.returncode == code, (change, result.stderr)
        assert "ocf-exit-reason:" in result.stderr and words in result.stderr, result.stderr
    # ha-brokers-url may come from the config file instead.
    config = tmp_path / "qpidd.conf"
    config.write_text("ha-cluster=yes\nha-brokers-url=127.0.0.1:5672\n")
    result = run_agent("validate-all", {**good, "brokers_url": "", "config": str(config)}, env)
    assert result.returncode == OCF_SUCCESS, result.stderr


def test_monitor_of_a_stopped_broker_and_unknown_actions(tmp_path: Path) -> None:
    params = valid_params(tmp_path)
    assert run_agent("monitor", params).returncode == OCF_NOT_RUNNING
    # The initial probe with every binary missing is still 7, not an error.
    missing = {**params, "qpidd": "/nonexistent/qpidd", "qpid_ha": "/nonexistent/qpid-ha"}
    probe = run_agent("monitor", missing, {"OCF_RESKEY_CRM_meta_interval": "0"})
    assert probe.returncode == OCF_NOT_RUNNING
    assert run_agent("stop", missing).returncode == OCF_SUCCESS
    assert run_agent("notify", params).returncode == OCF_SUCCESS
    assert run_agent("migrate_to", params).returncode == 3  # OCF_ERR_UNIMPLEMENTED


def test_a_bad_broker_option_fails_start_with_the_brokers_reason(tmp_path: Path) -> None:
    params = {**valid_params(tmp_path), "port": str(free_port()), "mgmt_port": str(free_port())}
    result = run_agent("start", {**params, "options": "--no-such-option=1"})
    assert result.returncode == OCF_ERR_CONFIGURED, result.stderr
    assert "qpidd exited with status 2" in result.stderr
    assert "unknown option '--no-such-option'" in result.stderr
    assert not (tmp_path / "qpidd.pid").exists()


@needs_root
@pytest.mark.timeout(300)
def test_ocf_tester_passes_with_a_real_broker(
    ocf_brokers: Callable[[str], OcfBroker],
) -> None:
    broker = ocf_brokers("tester")
    installed = OCF_ROOT / "resource.d" / broker.provider / "qpidd-ha"
    # ocf-tester gives every action 20 s; 60 s, as deploy/pacemaker.md configures start and
    # stop, keeps a loaded CI machine from failing a slow start.
    command = [
        system_tool("ocf-tester"),
        "-v",
        "-n",
        "qpidd-ha-test",
        "-o",
        "CRM_meta_timeout=60000",
    ]
    for key, value in broker.params().items():
        command += ["-o", f"{key}={value}"]
    system_tool("xmllint")  # ocf-tester validates the meta-data with it
    started = time.monotonic()
    result = subprocess.run(
        [*command, str(installed)], capture_output=True, text=True, timeout=280, check=False
    )
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"{installed} passed all tests" in output
    # It really ran a broker: started, promoted, restarted as a backup.
    assert "qpidd promoted: active" in output
    assert "as a backup (joining)" in output
    assert not broker.pidfile.exists()
    print(f"ocf-tester: {elapsed:.1f} s")


@needs_root
@pytest.mark.timeout(300)
def test_crm_resource_force_actions_give_pacemakers_codes(
    ocf_brokers: Callable[[str], OcfBroker],
) -> None:
    broker = ocf_brokers("single")
    assert broker.crm("check").returncode == OCF_NOT_RUNNING
    start = broker.crm("start")
    assert start.returncode == OCF_SUCCESS, start.stdout
    first_pid = broker.pid()
    assert first_pid is not None and pid_alive(first_pid)
    check = broker.crm("check")
    assert check.returncode == OCF_SUCCESS, check.stdout
    # A new cluster: every broker is joining, and a joining one may be promoted.
    assert "promotion score 5 (broker joining)" in start.stdout + check.stdout
    again = broker.crm("start")
    assert again.returncode == OCF_SUCCESS and broker.pid() == first_pid

    promote = broker.crm("promote")
    assert promote.returncode == OCF_SUCCESS, promote.stdout
    assert "promotion score 1000 (broker active)" in promote.stdout
    assert broker.crm("check").returncode == OCF_RUNNING_PROMOTED
    assert broker.crm("promote").returncode == OCF_SUCCESS  # already primary
    status = subprocess.run(
        [str(QPID_HA), "-b", f"127.0.0.1:{broker.mgmt_port}", "status", "--is-primary"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.returncode == 0, status.stdout

    demote = broker.crm("demote")
    assert demote.returncode == OCF_SUCCESS, demote.stdout
    assert broker.crm("check").returncode == OCF_SUCCESS
    second_pid = broker.pid()
    assert second_pid is not None and second_pid != first_pid  # demote = restart
    assert not pid_alive(first_pid)
    assert broker.crm("demote").returncode == OCF_SUCCESS  # already a backup

    assert broker.crm("stop").returncode == OCF_SUCCESS
    assert not pid_alive(second_pid)
    assert broker.crm("check").returncode == OCF_NOT_RUNNING
    assert broker.crm("stop").returncode == OCF_SUCCESS


def ha_state(broker: OcfBroker) -> str | None:
    """The broker's HA state as its management API says it (GET /api/ha); None while it
    does not answer."""
    try:
        return str(http("GET", broker.mgmt_port, "/api/ha")["state"])
    except (OSError, KeyError, ValueError):
        return None


def wait_for_score(
    broker: OcfBroker, line: str, before: str = "", timeout: float = 30.0, state: str = "ready"
) -> None:
    """Poll monitor (crm_resource --force-check) until it reports ``line``; each must be 0.

    The agent logs a score when it changes, so the line may already be in ``before``, the
    output of the action that started the broker. A monitor is a crm_resource, the agent's
    shell and two qpid-ha runs (about 0.7 CPU s): between two, the broker's own HA state is
    polled (one GET /api/ha, about 1 ms of CPU) until it is ``state``, the state the line's
    score is for, rather than running monitors back to back while the backup catches up.
    """
    if line in before:
        return
    seen: list[str] = []

    def reported() -> bool:
        check = broker.crm("check")
        seen.append(check.stdout)
        assert check.returncode == OCF_SUCCESS, check.stdout
        return line in check.stdout

    def until_state(left: float) -> None:
        with contextlib.suppress(PollTimeout):
            poll_until(lambda: ha_state(broker) == state, left, interval=0.1)

    poll_until(
        reported,
        timeout,
        lambda: f"{broker.name} to say {line!r}: {seen[-3:]}",
        between=until_state,
    )


@needs_root
@pytest.mark.timeout(300)
def test_two_brokers_one_promoted_the_other_ready_then_fail_over(
    ocf_brokers: Callable[[str], OcfBroker],
) -> None:
    a, b = ocf_brokers("a"), ocf_brokers("b")
    url = f"127.0.0.1:{a.port},127.0.0.1:{b.port}"
    a.brokers_url = b.brokers_url = url
    for broker in (a, b):
        start = broker.crm("start")
        assert start.returncode == OCF_SUCCESS, start.stdout

    promote = a.crm("promote")
    assert promote.returncode == OCF_SUCCESS, promote.stdout
    assert a.crm("check").returncode == OCF_RUNNING_PROMOTED
    started = time.monotonic()
    wait_for_score(b, "promotion score 100 (broker ready)")
    print(f"backup ready {time.monotonic() - started:.1f} s after the promotion")

    # The primary dies: its instance is "failed promoted", the ready backup takes over.
    a_pid = a.pid()
    assert a_pid is not None
    os.kill(a_pid, signal.SIGKILL)
    poll_until(lambda: not pid_alive(a_pid), 10, "the killed primary is gone", interval=0.05)
    failed = a.crm("check")
    assert failed.returncode == OCF_FAILED_PROMOTED, failed.stdout
    assert "the primary's qpidd process is gone" in failed.stdout
    takeover = b.crm("promote")
    assert takeover.returncode == OCF_SUCCESS, takeover.stdout
    assert b.crm("check").returncode == OCF_RUNNING_PROMOTED

    # Pacemaker's recovery of a failed promoted instance: demote (a restart), it follows b.
    demote = a.crm("demote")
    assert demote.returncode == OCF_SUCCESS, demote.stdout
    wait_for_score(a, "promotion score 100 (broker ready)", before=demote.stdout)
    assert b.crm("check").returncode == OCF_RUNNING_PROMOTED
    for broker in (a, b):
        assert broker.crm("stop").returncode == OCF_SUCCESS
        assert broker.crm("check").returncode == OCF_NOT_RUNNING


@needs_root
@pytest.mark.timeout(300)
def test_a_joining_broker_is_not_promoted_while_another_is_beyond_joining(
    ocf_brokers: Callable[[str], OcfBroker],
) -> None:
    """Seed 001: only the first primary of a new cluster may come from joining.

    b cannot log in to the primary a (a wrong HA password), so it stays joining; Pacemaker
    may try it (score 5) and the broker refuses, naming the primary it saw.
    """
    a, b = ocf_brokers("p"), ocf_brokers("j")
    a.brokers_url = b.brokers_url = f"127.0.0.1:{a.port},127.0.0.1:{b.port}"
    b.extra_options = "--ha-password=wrong"
    assert a.crm("start").returncode == OCF_SUCCESS
    assert a.crm("promote").returncode == OCF_SUCCESS
    start = b.crm("start")
    assert start.returncode == OCF_SUCCESS, start.stdout
    assert "promotion score 5 (broker joining)" in start.stdout
    refused = b.crm("promote")
    assert refused.returncode == OCF_ERR_GENERIC, refused.stdout
    assert "promotion refused" in refused.stdout
    assert f"127.0.0.1:{a.port} (active) is beyond joining" in refused.stdout
    assert b.crm("check").returncode == OCF_SUCCESS  # still a backup, not "promoted"
    assert a.crm("check").returncode == OCF_RUNNING_PROMOTED
