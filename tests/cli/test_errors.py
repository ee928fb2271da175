"""qpid-ha's error paths in process: an unreachable broker is one line and exit 3, bad
usage exit 2 and never a traceback; the output streams are the environment's."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from broker.security.roles import Role
from qpid_ha_cli.context import Environment
from tests.broker_process import BrokerProcess, free_port
from tests.cli.conftest import address, qpid_ha
from tests.security.users import write_users

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)


@pytest.mark.parametrize("verb", [["ping"], ["status"], ["query"], ["ready"], ["status", "--all"]])
def test_unreachable_broker_is_one_line_and_exit_3(verb: list[str]) -> None:
    port = free_port()
    result = qpid_ha("-b", f"127.0.0.1:{port}", "--timeout", "2", *verb)
    assert result.exit_code == 3  # ExitStatus.UNREACHABLE
    assert result.stdout == ""
    assert result.stderr.startswith(f"qpid-ha: error: cannot reach broker 127.0.0.1:{port}: ")
    assert result.stderr.count("\n") == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_unreachable_broker_for_promote_and_replicate() -> None:
    b = f"127.0.0.1:{free_port()}"
    for args in (["--cluster-manager", "promote"], ["replicate", "q", "127.0.0.1:1"]):
        result = qpid_ha("-b", b, *args)
        assert result.exit_code == 3 and result.stderr.count("\n") == 1, args


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["-b", "host:notaport", "ping"], "notaport"),
        (["-b", "a:1,b:2", "ping"], "expected one broker address, got 2"),
        (["--timeout", "0", "ping"], "--timeout"),
        (["--zk", "127.0.0.1:1", "status"], "with --zk, use status --all"),
        (["--cluster", "c", "status", "--all"], "--cluster needs --zk"),
        (["ping", "--bogus"], "--bogus"),
        (["status", "--expect"], "--expect"),
        (["replicate", "q"], "Missing argument"),
        (["bogus"], "bogus"),
    ],
)
def test_bad_usage_exits_2_naming_it(args: list[str], named: str) -> None:
    result = qpid_ha(*args)
    assert result.exit_code == 2, (result.stdout, result.stderr)  # ExitStatus.USAGE
    assert named in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_no_verb_prints_the_help_and_exits_2() -> None:
    result = qpid_ha()
    assert result.exit_code == 2 and "Usage:" in result.stdout
    for verb in ("drill", "ping", "status", "query", "ready", "promote", "replicate"):
        assert f" {verb} " in result.stdout


def test_output_goes_to_the_environments_streams(solo: BrokerProcess) -> None:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err)
    result = qpid_ha("-b", address(solo), "status", env=env)
    assert (result.exit_code, result.stdout, out.getvalue()) == (0, "", "standalone\n")
    result = qpid_ha("-b", address(solo), "query", env=env)
    assert (result.exit_code, result.stderr) == (1, "")
    assert err.getvalue().startswith("qpid-ha: error: ") and err.getvalue().count("\n") == 1


def test_the_management_client_comes_from_the_environment(solo: BrokerProcess) -> None:
    """The factory is called with the parsed -b address and --timeout, once per call."""
    from broker.management.client import ManagementClient
    from common.url import BrokerUrl

    made: list[tuple[str, float]] = []

    def factory(url: BrokerUrl, timeout: float) -> ManagementClient:
        made.append((str(url.addresses[0]), timeout))
        return ManagementClient(url, timeout)

    env = Environment(management_client=factory)
    result = qpid_ha("-b", address(solo, ""), "--timeout", "4", "status", env=env)
    assert result.exit_code == 0
    assert made == [(f"127.0.0.1:{solo.mgmt_port}", 4.0)]  # stand-alone: no /api/ha call


def test_a_refused_login_names_the_user_tried(tmp_path: Path) -> None:
    """The line "answered HTTP 401 for /api/connections: invalid credentials" did not say
    that qpid-ha had logged in as guest/guest, -b naming no user: an operator whose users
    file has no guest (docs/security.md) could not tell what was refused."""
    users = write_users(tmp_path / "users", {"ops": "secret"}, {"ops": {Role.ADMINISTRATOR}})
    broker = BrokerProcess(tmp_path / "b", args=[f"--sasl-users={users}"]).start()
    try:
        for credentials, user in (("", "guest"), ("ops/wrong", "ops")):
            result = qpid_ha("-b", address(broker, credentials), "connections")
            assert (result.exit_code, result.stdout) == (1, "")
            assert result.stderr == (
                f"qpid-ha: error: 127.0.0.1:{broker.mgmt_port} answered HTTP 401 for"
                f" /api/connections: invalid credentials (user '{user}')\n"
            )
        assert qpid_ha("-b", address(broker, "ops/secret"), "connections").exit_code == 0
    finally:
        broker.stop()
