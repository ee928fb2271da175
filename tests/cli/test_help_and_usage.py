"""Issue 15, items 1 and 4: every command's --help lists each option with its default and is
never cut; every wrong use is one line and exit 2; every unreachable target one line and
exit 3; global options work after the verb, as in Qpid's qpid-ha. In process (CliRunner)
and, for one of each, as a subprocess."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from qpid_ha_cli.command_line import help_record, hoist_global_options
from qpid_ha_cli.main import app
from tests.broker_process import BrokerProcess, free_port
from tests.cli.conftest import address, qpid_ha

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))
ROOT = typer.main.get_command(app)
#: The verbs (groups of verbs, such as ``users``, have their own tests).
VERBS = sorted(
    name
    for name, command in ROOT.commands.items()  # type: ignore[attr-defined]
    if not hasattr(command, "commands")
)
#: The verbs of the groups: ``users add`` and so on (no global option).
GROUP_VERBS = sorted(
    f"{group} {name}"
    for group, command in ROOT.commands.items()  # type: ignore[attr-defined]
    for name in getattr(command, "commands", {})
)


def flat(text: str) -> str:
    """``text`` with its wrapping undone (click may break a line after a hyphen)."""
    return re.sub(r"-\s+", "-", " ".join(text.split()))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([QPID_HA, *args], capture_output=True, text=True, timeout=60)


def test_every_verb_is_known() -> None:
    assert set(VERBS) >= {
        "drill", "ping", "status", "query", "ready", "promote", "in-sync", "replicate",
        "connections", "disconnect", "stop-member",
    }  # fmt: skip


@pytest.mark.parametrize("verb", [None, *VERBS, *GROUP_VERBS])
def test_help_lists_every_option_with_its_default_uncut(verb: str | None) -> None:
    words = [] if verb is None else verb.split()
    result = qpid_ha(*words, "--help")
    assert (result.exit_code, result.stderr) == (0, "")
    text = flat(result.stdout)
    assert "…" not in text and "\\[" not in text  # not cut, no rich markup left
    command = ROOT
    for word in words:
        command = command.commands[word]  # type: ignore[attr-defined]
    ctx = command.make_context("qpid-ha", ["--help"], resilient_parsing=True)
    params = list(command.get_params(ctx))
    if verb is not None and verb in VERBS and verb != "drill":
        params += [p for p in ROOT.get_params(ctx) if p.name != "help"]
    for param in params:
        if param.param_type_name != "option" or param.name == "help":
            continue
        record = help_record(param, ctx)
        assert record is not None, param.name
        assert "default" in record[1].lower(), (verb, param.name, record)
        for name in param.opts:
            assert name in result.stdout, (verb, name)
        help_text = getattr(param, "help", None) or ""  # options (typer's or click's) have one
        assert flat(help_text) in text, (verb, param.name)


def test_help_is_not_cut_when_not_on_a_terminal() -> None:
    """Piped, as a subprocess: the drill's long help lines come whole."""
    result = run("drill", "--help")
    assert result.returncode == 0 and "…" not in result.stdout
    text = " ".join(result.stdout.split())
    assert "amqp:guest/guest@h1:5672,h2:5672 (or the AMQP URI form" in text
    assert "[user/password@]host[:port]; repeat for each" in text


@pytest.mark.parametrize("verb", [*VERBS, *GROUP_VERBS])
def test_a_wrong_option_is_one_line_and_exit_2(verb: str) -> None:
    result = qpid_ha(*verb.split(), "--no-such-option")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "No such option: --no-such-option" in result.stderr
    assert f"(see 'qpid-ha {verb} --help')" in result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["replicate", "q"], "Missing argument 'remote_broker'"),
        (["disconnect"], "Missing argument"),
        (["stop-member"], "Missing argument"),
        (["status", "--timeout", "soon"], "Invalid value for '--timeout'"),
        (["ping", "-b", "a:1,b:2"], "expected one broker address, got 2"),
        (["connections", "-b", "a:1,b:2"], "-b lists several brokers: add --all"),
        (["drill", "--url=h:1", "--rate=fast"], "--rate: expected a number, got 'fast'"),
        (["in-sync", "--members", "a"], "--members and --epoch go together"),
    ],
)
def test_wrong_use_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    result = qpid_ha(*args)
    assert (result.exit_code, result.stdout) == (2, ""), result.stderr
    assert said in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_wrong_use_as_a_subprocess() -> None:
    result = run("status", "--expect")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "qpid-ha: error: Option '--expect' requires an argument. (see 'qpid-ha status --help')\n"
    )


@pytest.mark.parametrize(
    "verb",
    [
        ["in-sync"],
        ["connections"],
        ["connections", "--all"],
        ["disconnect", "1"],
        ["stop-member", "127.0.0.1:5672"],
    ],
)
def test_an_unreachable_broker_is_one_line_and_exit_3(verb: list[str]) -> None:
    port = free_port()
    result = qpid_ha(*verb, "-b", f"127.0.0.1:{port}", "--timeout", "2")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == (
        f"qpid-ha: error: cannot reach broker 127.0.0.1:{port}: [Errno 111] Connection refused\n"
    )


def test_an_amqp_port_for_a_management_port_is_one_line_and_exit_3(solo: BrokerProcess) -> None:
    """Issue 15: ``-b HOST:AMQP_PORT status`` printed a 135-line BadStatusLine traceback."""
    expected = (
        f"qpid-ha: error: 127.0.0.1:{solo.port} is not a management port: it does not answer"
        " HTTP (an AMQP port? qpidd's management API listens on --mgmt-port, 8672 by"
        " default)\n"
    )
    result = qpid_ha("-b", f"127.0.0.1:{solo.port}", "status")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "", expected)
    process = run("-b", f"127.0.0.1:{solo.port}", "status")
    assert (process.returncode, process.stdout, process.stderr) == (3, "", expected)


def test_global_options_after_the_verb(solo: BrokerProcess) -> None:
    """Issue 15: ``qpid-ha status -b HOST:PORT`` said "No such option: -b"."""
    b = address(solo, "")
    for args in (
        ["status", "-b", b],
        ["status", f"--broker={b}", "--timeout", "5"],
        ["status", f"-b{b}"],
        ["status", "--expect=standalone", "-b", b],
    ):
        result = qpid_ha(*args)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "standalone\n", ""), args
    process = run("ready", "-b", b)
    assert (process.returncode, process.stdout) == (1, "standalone\n")


@pytest.mark.parametrize(
    ("given", "read"),
    [
        (["status", "-b", "h:1"], ["-b", "h:1", "status"]),
        (["--timeout", "2", "status", "--all", "--zk=z:1", "--cluster", "c"],
         ["--timeout", "2", "--zk=z:1", "--cluster", "c", "status", "--all"]),
        (["promote", "--epoch", "3", "--cluster-manager"],
         ["--cluster-manager", "promote", "--epoch", "3"]),
        (["status", "-bh:1"], ["-bh:1", "status"]),
        (["replicate", "q", "--", "-b"], ["replicate", "q", "--", "-b"]),
        (["drill", "--broker", "h:1", "--cluster", "c"],
         ["drill", "--broker", "h:1", "--cluster", "c"]),  # the drill's own options
        (["bogus", "-b", "h:1"], ["bogus", "-b", "h:1"]),
        (["--help"], ["--help"]),
    ],
)  # fmt: skip
def test_hoisting_global_options(given: list[str], read: list[str]) -> None:
    assert hoist_global_options(given, VERBS) == read


def test_version_as_qpidd_says_it() -> None:
    """`qpidd --version` printed its version; `qpid-ha --version` and `qpid-ha-agent
    --version` were unknown options (exit 2): an operator checking that every node runs
    the same release (rabbitmqctl version, qpid-ha --version in Qpid) had to ask pip."""
    from common.version import version_line

    result = qpid_ha("--version")
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        version_line("qpid-ha") + "\n",
        "",
    )
    agent = str(Path(sys.executable).with_name("qpid-ha-agent"))
    done = subprocess.run([agent, "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        version_line("qpid-ha-agent") + "\n",
        "",
    )
    assert "--version" in qpid_ha("--help").stdout
