"""broker.ha.link_reach: a backup finds its primary's host cut off in under a heartbeat, and
never takes a slow primary for a cut one (issue 26, item 5: a partition's fail-over).

The rule without a clock or a socket first (hypothesis: any schedule of the backup's own
steps, any acknowledgement delay a live kernel has), then real processes in real network
namespaces: a primary and a backup broker on hosts of their own, at the default link
heartbeat (1 s, so a silent link dies by its heartbeat only after 2 s):

- the primary's broker SIGSTOPped for 1 s (longer than a probe's round, 0.75 s): its
  kernel acknowledges the probes, and the backup's link stays up;
- the primary's host cut off (nft drops everything between the two hosts): the backup's
  link goes down within the probe's 0.75 s and some slack, well before the 2 s of its
  heartbeat, saying the host acknowledged nothing; and its dials of the cut-off host fail
  within a quarter of a heartbeat instead of a whole one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from broker.ha.link_reach import CLOCK_SLACK, ReachProbe, ReachStep, ReachTimes, TcpAcks
from common.polling import poll_until
from tests.agent.agent_cluster import Node, read_events
from tests.ha.cluster import http
from tests.netns import Host, Lan, is_root

TIMES = ReachTimes.for_heartbeat(1.0)  # the default link heartbeat: 0.25 s, then 0.5 s
HORIZON = 10.0  # seconds of silence simulated


# -- the rule ----------------------------------------------------------------------------
def run_probe(
    steps: list[float], ack_delays: list[float], alive: bool, last_ack: float = -0.01
) -> float | None:
    """Drive a probe over a link whose last frame came at 0 (then silence), the backup's
    loop waking after each gap of ``steps`` (in turn, again and again, for
    :data:`HORIZON`). The primary's kernel acknowledges the n-th probe ``ack_delays[n]``
    after it left when ``alive``, never otherwise; it reports times in whole milliseconds
    (its jiffies). Returns when the link was found cut (None: never)."""
    probe = ReachProbe(TIMES)
    sent: list[float] = []  # the probes written
    now = 0.0
    for n in itertools.count():  # the gaps again and again, for 10 s
        now += steps[n % len(steps)]
        if now > HORIZON:
            return None
        step = probe.due(now, last_received=0.0)
        if step is ReachStep.PROBE:
            sent.append(now)
        elif step is ReachStep.ASK:
            acks_at = [t + ack_delays[i % len(ack_delays)] for i, t in enumerate(sent) if alive]
            came = [a for a in acks_at if a <= now]
            unacked = len(sent) - len(came)
            since = now - max([last_ack, *came])
            if probe.answered(now, TcpAcks(unacked, int(since * 1000) / 1000)):
                return now
    raise AssertionError("unreachable")


#: A live kernel's acknowledgement delays: at most its delayed-ACK time (200 ms on Linux),
#: here up to just under the probe's timeout.
live_delays = st.lists(
    st.floats(0.0, TIMES.ack_timeout - 0.002, allow_nan=False), min_size=1, max_size=8
)
#: The backup's own loop: woken on time, or late by up to 3 s (a starved machine).
loop_gaps = st.lists(st.floats(0.001, 3.0, allow_nan=False), min_size=1, max_size=60)


@given(loop_gaps, live_delays)
@example([0.25, 0.5], [TIMES.ack_timeout - 0.002])  # answered at the last moment
@example([0.25, 3.0, 0.001], [0.0])  # a stalled backup loop asks late
@example([3.0] * 5, [0.2])
def test_a_host_that_acknowledges_is_never_taken_for_cut(
    gaps: list[float], delays: list[float]
) -> None:
    """The primary's broker may say nothing for ever (stopped, starved): while its kernel
    acknowledges each probe within the timeout, the link is never found cut, whenever the
    backup's loop happens to look."""
    assert run_probe(gaps, delays, alive=True) is None


@given(st.lists(st.floats(0.001, 0.2, allow_nan=False), min_size=1, max_size=40))
@example([0.001])
@example([0.2])
@example([0.2, 0.001])
def test_a_host_that_acknowledges_nothing_is_found_cut_within_a_probes_round(
    gaps: list[float],
) -> None:
    """A host cut off just after its last frame: found cut at the first look after the
    probe's timeout, the probe itself sent at the first look after the silence; with a
    loop that looks at least every ``g`` seconds, within silence + timeout + 2 g."""
    found = run_probe(gaps, [0.0], alive=False)
    assert found is not None
    assert found <= TIMES.silence + TIMES.ack_timeout + 2 * max(gaps) + 1e-9


def test_a_frame_from_the_primary_ends_the_probe() -> None:
    probe = ReachProbe(TIMES)
    assert probe.due(0.3, last_received=0.0) is ReachStep.PROBE
    assert probe.due(0.5, last_received=0.0) is ReachStep.WAIT
    assert probe.next_in(0.5, last_received=0.0) == pytest.approx(0.3)
    # the primary spoke at 0.6: no probe outstanding, silent again only 0.25 s later
    assert probe.due(0.7, last_received=0.6) is ReachStep.WAIT
    assert probe.probed_at is None
    assert probe.next_in(0.7, last_received=0.6) == pytest.approx(0.15)


def test_nothing_unacknowledged_is_no_verdict() -> None:
    """A probe that never left (the primary's receive window full: a stalled broker that
    reads nothing) proves nothing, however long the host has been quiet."""
    probe = ReachProbe(TIMES)
    assert probe.due(0.25, last_received=0.0) is ReachStep.PROBE
    assert probe.due(0.75, last_received=0.0) is ReachStep.ASK
    assert not probe.answered(0.75, TcpAcks(unacked=0, since_ack=10.0))
    assert probe.probed_at is None  # done: the next probe follows
    assert probe.due(0.76, last_received=0.0) is ReachStep.PROBE
    assert probe.due(1.26, last_received=0.0) is ReachStep.ASK
    # an acknowledgement within the clock's slack of the probe counts as an answer
    assert not probe.answered(1.26, TcpAcks(1, 0.5 + CLOCK_SLACK - 0.001))


@pytest.mark.parametrize("bad", [(0.0, 1.0), (1.0, -1.0)])
def test_reach_times_must_be_positive(bad: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="above 0"):
        ReachTimes(*bad)


# -- real processes in network namespaces --------------------------------------------------
NFT = shutil.which("nft") or "/usr/sbin/nft"
AMQP_PORT = 5672
MGMT_PORT = 8672


class Pair:
    """A primary (p) and a backup (b) broker on hosts of their own, at the default link
    heartbeat; each process stopped by its PID, the namespaces deleted."""

    def __init__(self, root: Path, cluster: str) -> None:
        self.lan = Lan()
        self.root = root
        self.cluster = cluster
        self.nodes: dict[str, Node] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> Pair:
        lan = self.lan.start()
        hosts = [lan.add_host(name, i) for i, name in enumerate(("p", "b"), start=1)]
        url = ",".join(f"{h.address}:{AMQP_PORT}" for h in hosts)
        for host in hosts:
            node = Node(self.root, host.name, AMQP_PORT, MGMT_PORT, url, host=host)
            argv = [a for a in node.broker_argv(self.cluster) if "heartbeat" not in a]
            with open(node.dir / "qpidd.out", "ab") as out:
                proc = subprocess.Popen(host.exec_argv(argv), stdout=out, stderr=out)
            self.nodes[host.name], self.procs[host.name] = node, proc
        return self

    def host(self, name: str) -> Host:
        host = self.nodes[name].host
        assert host is not None
        return host

    def promote_p(self) -> None:
        body = {"cluster_manager": True}
        poll_until(lambda: self.nodes["p"].state() == "joining", 30, "p's broker up")
        answer = self.host("p").call(lambda: http("POST", MGMT_PORT, "/api/ha/promote", body))
        assert "http_status" not in answer, answer
        poll_until(lambda: self.nodes["b"].state() == "ready", 30, "b ready, linked to p")

    def cut(self) -> None:
        """nft in p's namespace drops every packet between p and b, both ways."""
        peer = self.host("b").address
        rules = (
            "table inet qha_reach {\n"
            f"  chain i {{ type filter hook input priority 0; ip saddr {peer} drop; }}\n"
            f"  chain o {{ type filter hook output priority 0; ip daddr {peer} drop; }}\n"
            "}\n"
        )
        argv = self.host("p").exec_argv([NFT, "-f", "-"])
        subprocess.run(argv, input=rules, text=True, check=True, timeout=10)

    def backup_events(self, name: str, after: float) -> list[dict[str, Any]]:
        return [
            e
            for e in read_events(self.nodes["b"].broker_log)
            if e["event"] == name and stamp(e) >= after
        ]

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        self.lan.delete()


def stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()


@pytest.fixture
def pair(tmp_path: Path, cluster: str) -> Iterator[Pair]:
    brokers = Pair(tmp_path, cluster)
    try:
        yield brokers.start()
    finally:
        brokers.stop()


@pytest.mark.timeout(120)
@pytest.mark.skipif(not is_root(), reason="network namespaces need root; CI runs as root")
def test_a_cut_off_primary_is_found_within_a_probe_and_a_stopped_one_is_not(pair: Pair) -> None:
    pair.promote_p()
    (linked,) = pair.backup_events("ha_link_up", 0.0)

    # slow is not dead: the primary's broker stopped for longer than a probe's round
    paused_at = time.time()
    os.kill(pair.procs["p"].pid, signal.SIGSTOP)
    time.sleep(1.0)  # the fault's length, on purpose: more than 0.75 s, less than 2 s
    os.kill(pair.procs["p"].pid, signal.SIGCONT)
    poll_until(lambda: pair.nodes["p"].state() == "active", 30, "p answering again")
    assert paused_at > stamp(linked)
    assert not pair.backup_events("ha_link_down", stamp(linked)), "a stopped primary's link dropped"

    # cut off: found by the probe, long before the heartbeat's 2 s
    cut_at = time.time()
    pair.cut()
    (down,) = poll_until(lambda: pair.backup_events("ha_link_down", cut_at), 30, "link down")
    found_after = stamp(down) - cut_at
    assert "acknowledged nothing" in down["reason"], down
    assert found_after < 1.6, f"found {found_after:.2f} s after the cut: {down}"
    # and a dial of the cut-off host fails within a quarter heartbeat, not a whole one
    failed = poll_until(
        lambda: [
            e
            for e in pair.backup_events("ha_link_dial_failed", cut_at)
            if "no answer to connecting within 0.25 s" in e["reason"]
        ],
        30,
        "a dial of the cut-off primary timed out",
    )
    print(f"\nprobe: link down {found_after:.3f} s after the cut: {down['reason']}; {failed[0]}")
