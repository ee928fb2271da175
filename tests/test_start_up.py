"""What a process of ours pays at start-up: qpidd, the agent and qpid-ha each import
structlog through ``common.log``, which keeps rich (installed with typer) out of structlog's
import: its rich renderers are never used here (plain tracebacks, no locals), and importing
rich was a fifth of a start-up's CPU, paid at every broker, agent and qpid-ha start (the
test suite starts many hundreds). rich itself still imports afterwards (typer's
help)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import importlib, sys
importlib.import_module(sys.argv[1])
import structlog.dev, structlog.tracebacks
assert structlog.dev.rich is None and structlog.tracebacks.rich is None, "rich imported"
assert "rich" not in sys.modules, "rich imported"
import rich
print("ok", rich.__name__)
"""


@pytest.mark.parametrize("entry", ["broker.main", "ha_agent.main", "qpid_ha_cli.main"])
def test_the_entry_points_import_structlog_without_rich(entry: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, entry], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "ok rich\n"), done.stderr


def test_qpid_ha_starts_without_the_http_server() -> None:
    """Every qpid-ha command (each OCF monitor runs one or two) imported aiohttp's server
    through the definitions command's import of the broker's definitions: 1.0 s -> 0.24 s of
    imports on a loaded machine. It is imported by that command alone."""
    probe = (
        "import qpid_ha_cli.main, sys; print(sorted(m for m in sys.modules if m == 'aiohttp.web'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


#: What a qpid-ha start never imports: the broker's core, store and security, the agent's
#: ZooKeeper modules (kazoo), the drill's clients (pika, Proton). The verbs that need them
#: import them when they run (status --zk, users, backup and restore, vhost names, the drill).
NOT_AT_START = ("broker.core", "broker.store", "broker.security", "ha_agent", "kazoo", "pika",
                "proton")  # fmt: skip


def test_qpid_ha_starts_without_the_broker_core_the_store_or_zookeeper() -> None:
    """An OCF monitor runs ``qpid-ha status`` (a primary's also ``in-sync --ids``): each
    imported the broker's core (vhost names), the store (backup and restore), the security
    modules (users) and kazoo with the agent's records (status --zk): 0.24 s of imports on
    an idle machine, 0.12 s without them."""
    probe = "import json, sys, qpid_ha_cli.main; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stdout)
    early = [m for m in imported if any(m == n or m.startswith(n + ".") for n in NOT_AT_START)]
    assert early == [], early
