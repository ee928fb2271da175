"""``qpid-ha-agent``'s wrong uses are one line and exit 2, as docs/agent.md says ("A bad
value ends the command with one line naming it and exit code 2") and as ``qpid-ha`` does:
click's errors (a missing option, an unknown one, a value of the wrong type, an extra
argument) were a six-line box drawn by rich. Its help is plain text, every option with its
metavar (not ``<bool>`` for a flag). The real program, as a subprocess; no ZooKeeper needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

AGENT = str(Path(sys.executable).with_name("qpid-ha-agent"))
REQUIRED = ["--zk", "127.0.0.1:1", "--cluster", "c", "--node", "n"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENT, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Missing option '--zk'."),
        (REQUIRED, "Missing option '--broker'."),
        ([*REQUIRED, "--broker", "h:1", "--bogus"], "No such option: --bogus"),
        (
            [*REQUIRED, "--broker", "h:1", "--session-timeout", "abc"],
            "Invalid value for '--session-timeout':",
        ),
        ([*REQUIRED, "--broker", "h:1", "--zk-ssl", "yes"], "Got unexpected extra argument"),
    ],
)
def test_a_wrong_use_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run(*args)
    assert (result.returncode, result.stdout) == (2, "")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"qpid-ha-agent: error: {message}"), result.stderr
    assert result.stderr.endswith(" (see 'qpid-ha-agent --help')\n"), result.stderr


def test_help_is_plain_text() -> None:
    result = run("--help")
    assert (result.returncode, result.stderr) == (0, "")
    assert "╭" not in result.stdout and "│" not in result.stdout
    assert "<bool>" not in result.stdout and "\\[" not in result.stdout
    assert "--designated-primary" in result.stdout and "--zk-ssl" in result.stdout
