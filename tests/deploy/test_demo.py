"""``make demo``'s console and hold (issue 31): it printed every member's console URL before
the fail-over, the first being the old primary (a backup by the time one read it), and the
cluster was gone by then; ``DEMO_HOLD`` was documented in docs/console.md only. Now it says
which broker is the primary, before and after the fail-over, with that broker's console,
and ``make demo HOLD=1`` keeps the cluster up until ctrl-C.

(The whole demo, with its Spark job, takes a minute or more on 2 cores: ``make demo`` is run
by hand; these tests cover what changed: the lines, the hold and the make variable.)
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from common.polling import poll_until

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "deploy" / "demo.py"


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_under_test", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo = load_demo()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, None), ("", None), ("0", None), ("600", 600.0), ("2.5", 2.5),
     ("forever", float("inf"))],
)  # fmt: skip
def test_hold_seconds(value: str | None, seconds: float | None) -> None:
    assert demo.hold_seconds(value) == seconds


@pytest.mark.parametrize("value", ["soon", "-5"])
def test_a_bad_hold_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        demo.hold_seconds(value)


def test_the_console_line_names_the_primary_and_its_console() -> None:
    line = demo.console_line("node2", {"node1": 8001, "node2": 8002}, "after the fail-over")
    assert line.startswith("primary after the fail-over: node2;")
    assert "http://127.0.0.1:8002/console/" in line and "8001" not in line
    assert "make demo HOLD=1" in line


@pytest.mark.parametrize(
    ("hold", "env"), [("1", "DEMO_HOLD=forever "), ("yes", "DEMO_HOLD=forever "),
                      ("600", "DEMO_HOLD=600 "), (None, "")],
)  # fmt: skip
def test_make_demo_hold(hold: str | None, env: str) -> None:
    """The Makefile's HOLD variable, as make expands it (dry run: nothing is started)."""
    argv = ["make", "-n", "--no-print-directory", "demo", *([f"HOLD={hold}"] if hold else [])]
    # Under make test this make is a sub-make: without its parent's flags, it prints only
    # the commands (no "make[1]: Entering directory" lines).
    outside = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(
        argv, cwd=REPO, env=outside, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.splitlines()[-1] == f"{env}.venv/bin/python deploy/demo.py"


def test_hold_forever_goes_on_at_ctrl_c(tmp_path: Path) -> None:
    """DEMO_HOLD=forever waits for ctrl-C (a real SIGINT), then the demo goes on to stop
    the cluster."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('demo', {str(DEMO)!r})\n"
        "demo = importlib.util.module_from_spec(spec); spec.loader.exec_module(demo)\n"
        "demo.hold('http://127.0.0.1:1/console/')\n"
        "print('went on', flush=True)\n"
    )
    env = {**os.environ, "DEMO_HOLD": "forever", "PYTHONPATH": str(REPO)}
    out = tmp_path / "out"
    with open(out, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=sink,
            cwd=REPO,
            # as from a terminal: ctrl-C's default action (a pytest-xdist worker ignores
            # SIGINT, and a child that starts with SIGINT ignored gets no KeyboardInterrupt)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        poll_until(lambda: "until ctrl-C" in out.read_text(), 30, "the demo to hold")
        assert proc.poll() is None  # still holding
        proc.send_signal(signal.SIGINT)
        poll_until(lambda: proc.poll() is not None, 30, "the demo to go on after ctrl-C")
        assert proc.returncode == 0
        assert out.read_text().splitlines()[-1] == "went on"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
