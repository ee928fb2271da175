"""``qpid-ha drill --nemesis``: the short matrix of ``make test`` (root: network namespaces).

One run of ``kill,partition,stale-backup`` at the default settings (session timeout 4 s,
link heartbeat 1 s), one cycle each, as a user runs it: the command builds its cluster in
namespaces, runs the faults under the drill's clients and removes everything. Asserted:
exit 0, nothing confirmed lost, no time with two primaries, the stale backup never
promoted, nothing left behind (namespaces, processes), well under 90 s. Plus the refusals
that need no root: a bad nemesis name is one usage line, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qpid_ha_cli.main import app
from qpid_ha_cli.nemesis.command import missing_requirements

QPID_HA = str(Path(sys.executable).parent / "qpid-ha")


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in out.stdout.splitlines() if line.startswith("qnm-")}


def test_an_unknown_nemesis_is_one_usage_line() -> None:
    result = CliRunner().invoke(app, ["drill", "--nemesis", "kill,bogus"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "qpid-ha drill: error: --nemesis: unknown nemesis 'bogus': expected some of "
        "kill,kill-node,pause,pause-node,partition,stale-backup,zk-loss,zk-server,zk-ensemble"
    ]


#: The run's own bound, then the time its clean-up after a SIGTERM may take: both inside
#: the test's timeout (pytest-timeout's would leave the cluster and its namespaces behind).
RUN_TIMEOUT = 115
CLEANUP_TIMEOUT = 30


@pytest.mark.timeout(RUN_TIMEOUT + CLEANUP_TIMEOUT + 5)
@pytest.mark.skipif(
    bool(missing_requirements(os.geteuid(), shutil.which, os.path.exists)),
    reason="the nemesis drill needs root, ip, nft, java, ZooKeeper (CI runs as root)",
)
def test_kill_partition_and_stale_backup_lose_nothing_and_never_two_primaries(
    tmp_path: Path,
) -> None:
    began = time.monotonic()
    drill = subprocess.Popen(
        [
            QPID_HA,
            "drill",
            "--nemesis=kill,partition,stale-backup",
            "--cycles=1",
            f"--work-dir={tmp_path}",
            "--amqp10",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        try:
            out, err = drill.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            # SIGTERM, not subprocess.run's SIGKILL: the command stops its agents, brokers
            # and ZooKeeper and removes its namespaces (exit 130) before the test fails
            drill.send_signal(signal.SIGTERM)
            out, err = drill.communicate(timeout=CLEANUP_TIMEOUT)
            pytest.fail(f"still running after {RUN_TIMEOUT} s, stopped: {out}{err[-3000:]}")
    finally:
        if drill.poll() is None:
            drill.kill()
            drill.wait()
    done = subprocess.CompletedProcess(drill.args, drill.returncode, out, err)
    took = time.monotonic() - began
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    cycles = results["cycles"]
    assert [c["nemesis"] for c in cycles] == ["kill", "partition", "stale-backup"]
    for cycle in cycles:
        assert cycle["lost"] == 0, cycle
        assert cycle["two_primaries_s"] == 0 and cycle["two_primaries_seen"] == 0, cycle
        assert cycle["confirmed"] > 0 and cycle["new_primary"] not in ("", cycle["old_primary"])
        amqp10 = cycle["notes"]["amqp10"]  # the 1.0 pair (Proton) beside the 0-9-1 one
        assert amqp10["lost"] == 0 and amqp10["confirmed"] > 0, cycle
        assert amqp10["received"] >= amqp10["confirmed"], cycle
    stale = cycles[2]["notes"]
    assert stale["stale_promoted"] is False, stale
    prefix = results["namespace_prefix"]
    assert not {n for n in namespaces() if n.startswith(prefix + "-")}  # all gone
    assert took < 90, f"the short matrix took {took:.0f} s"
