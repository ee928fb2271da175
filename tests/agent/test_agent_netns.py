"""End to end in network namespaces: hosts of their own for the agents, their brokers,
ZooKeeper and a client, on one bridge (``10.77.0.0/24``, nothing routed outside). Root only.

- The virtual IP is on the primary's host only; a client on a third host publishes to it
  with confirms; the primary's broker is SIGKILLed; the virtual IP moves to the new
  primary's host (gone from the old one) and the same client reaches the new primary
  through the same address, no confirmed message lost.
- The primary's host cut off (its ``eth0`` down): its agent loses ZooKeeper and its session
  guard fences (kills the broker, drops the virtual IP) before the session expires; another
  broker is promoted only after that kill; healed, the old host comes back as a ready backup.
  (Its brokers' link heartbeat is 4 s, so that their links are found cut, by the probe of
  ``broker.ha.link_reach`` after 0.75 heartbeats, only after the session's expiry: this is
  the fence's path. The faster one, a takeover by the lapsed grant once every member's
  link is found cut, is the drill's ``partition`` and ``tests/ha/test_link_reach.py``.)

Both check from the logs that the virtual IP never had two holders and no two brokers were
primary at once.

- (The first test, continued, to share its cluster.) The link between the new primary and
  one member of its in-sync set cut (nft in the primary's namespace, both ways): the
  primary stops serving once that member's grant lapses (the member lease, issue 26), a
  primary serves again after the lapse (once the member's link to the old primary timed
  out: by its lapsed grant, or the old record gone; or the old primary once its agent
  removed the member), and no confirmed message is lost.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from common.polling import poll_until
from tests.agent.agent_cluster import Node
from tests.netns import Host, Lan, is_root
from tests.zookeeper import ZooKeeperProcess

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not is_root(), reason="network namespaces need root (ip netns add); CI runs as root"
    ),
]

AMQP_PORT = 5672
MGMT_PORT = 8672
ZK_PORT = 2181
VIP = "10.77.0.100"
SESSION_TIMEOUT = 2.0
CLIENT = str(Path(__file__).with_name("netns_client.py"))
NFT = shutil.which("nft") or "/usr/sbin/nft"
PRIMARY_STATES = ("active", "recovering")


class NetnsCluster:
    """ZooKeeper, three nodes (agent + broker) and a client, each on a host of its own."""

    def __init__(self, root: Path, cluster: str) -> None:
        self.root = root
        self.cluster = cluster
        self.lan = Lan()
        self.zookeeper: ZooKeeperProcess | None = None
        self.nodes: list[Node] = []
        self.client_host: Host | None = None
        self.clients: list[subprocess.Popen[str]] = []

    def start(self) -> NetnsCluster:
        lan = self.lan.start()
        zk_host = lan.add_host("zk", 250)
        hosts = [lan.add_host(f"n{i}", i) for i in (1, 2, 3)]
        self.client_host = lan.add_host("c", 200)
        self.zookeeper = ZooKeeperProcess(
            self.root / "zookeeper",
            client_port=ZK_PORT,
            command_prefix=zk_host.exec_argv([]),
            client_address=zk_host.address,
            probe_in=zk_host.call,
        ).start()
        url = ",".join(f"{h.address}:{AMQP_PORT}" for h in hosts)
        self.nodes = [Node(self.root, h.name, AMQP_PORT, MGMT_PORT, url, host=h) for h in hosts]
        return self

    def start_agents(self, *extra: str) -> None:
        assert self.zookeeper is not None
        for node in self.nodes:
            node.start_agent(
                self.zookeeper.hosts,
                self.cluster,
                "--cluster-size=3",
                f"--session-timeout={SESSION_TIMEOUT}",
                "--check-interval=0.1",
                *extra,
            )

    def host(self, node: Node) -> Host:
        assert node.host is not None
        return node.host

    def states(self) -> list[str]:
        return [node.state() for node in self.nodes]

    def wait_settled(self, timeout: float = 40.0) -> Node:
        """One active primary, the two others ready backups in the in-sync set its agent
        wrote last (only then may a backup be promoted); returns the primary."""

        def settled() -> bool:
            if sorted(self.states()) != ["active", "ready", "ready"]:
                return False
            (primary,) = [n for n in self.nodes if n.state() in PRIMARY_STATES]
            backups = sorted(n.name for n in self.nodes if n is not primary)
            return primary.in_sync_written() == backups

        poll_until(settled, timeout)
        (primary,) = [n for n in self.nodes if n.state() in PRIMARY_STATES]
        return primary

    def broker_id(self, node: Node) -> str:
        """The broker's HA id (``/api/ha``), as clients see it in ``qpid.ha-broker-id``."""
        return str(self.ha(node)["broker_id"])

    def ha(self, node: Node) -> Any:
        """The broker's ``GET /api/ha``."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{MGMT_PORT}/api/ha",
            headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
        )

        def fetch() -> Any:
            with urllib.request.urlopen(request, timeout=2) as answer:
                return json.load(answer)

        return self.host(node).call(fetch)

    def cut(self, node: Node, peer: Node, cut: bool = True) -> None:
        """Drop every packet between ``node`` and ``peer`` (nft in ``node``'s namespace,
        both ways), or remove that rule."""
        address = self.host(peer).address
        rules = (
            "table inet qha_cut {\n"
            f"  chain i {{ type filter hook input priority 0; ip saddr {address} drop; }}\n"
            f"  chain o {{ type filter hook output priority 0; ip daddr {address} drop; }}\n"
            "}\n"
            if cut
            else "delete table inet qha_cut\n"
        )
        argv = self.host(node).exec_argv([NFT, "-f", "-"])
        subprocess.run(argv, input=rules, text=True, check=True, timeout=10)

    def vip_holders(self) -> list[str]:
        return [n.name for n in self.nodes if VIP in self.host(n).addresses()]

    def client(self, queue: str, address: str = VIP) -> Client:
        assert self.client_host is not None
        argv = self.client_host.exec_argv([sys.executable, CLIENT, address, queue])
        with open(self.root / f"client-{queue}.err", "w") as err:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
            )
        self.clients.append(proc)
        return Client(proc, self.root / f"client-{queue}.err")

    def stop(self) -> None:
        for proc in self.clients:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        for node in self.nodes:
            with contextlib.suppress(RuntimeError):
                self.host(node).link(True)  # a cut-off agent stops quicker with ZooKeeper
            node.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        self.lan.delete()


class Client:
    """The AMQP client process on the client's host (tests/agent/netns_client.py)."""

    def __init__(self, proc: subprocess.Popen[str], err: Path) -> None:
        self.proc = proc
        self.err = err

    def ask(self, command: str) -> dict[str, Any]:
        """Send one command, read its answer: within the command's TIMEOUT and 30 s more
        (a publish waiting for a confirm that never comes fails here, not in pytest-timeout)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        wait = float(command.split()[-1]) + 30.0
        readable, _, _ = select.select([self.proc.stdout], [], [], wait)
        if not readable:
            raise AssertionError(f"the client did not answer {command!r} within {wait} s")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the client exited: {self.err.read_text()[-2000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer


@pytest.fixture
def netns_cluster(tmp_path: Path, cluster: str) -> Iterator[NetnsCluster]:
    agents = NetnsCluster(tmp_path, cluster)
    try:
        yield agents.start()
    finally:
        agents.stop()


def events(node: Node, name: str) -> list[dict[str, Any]]:
    return [e for e in node.agent_events() if e["event"] == name]


def vip_overlaps(nodes: list[Node]) -> list[tuple[str, str, str]]:
    """Times two nodes held the virtual IP at once, from their agents' vip_added and
    vip_removed events: (node, node, the later one's vip_added ts)."""
    held: list[tuple[str, str, str]] = []  # node, from, until ("~": still held)
    for node in nodes:
        start: str | None = None
        for e in node.agent_events():
            if e["event"] == "vip_added" and start is None:
                start = str(e["ts"])
            elif e["event"] == "vip_removed" and start is not None:
                held.append((node.name, start, str(e["ts"])))
                start = None
        if start is not None:
            held.append((node.name, start, "~"))
    return [
        (a, b, max(a_from, b_from))
        for i, (a, a_from, a_until) in enumerate(held)
        for (b, b_from, b_until) in held[i + 1 :]
        if a != b and a_from < b_until and b_from < a_until
    ]


def primary_overlaps(nodes: list[Node]) -> list[tuple[str, str, str, str]]:
    """Times two brokers were in a primary state at once, from the brokers' logs
    (ha_state_changed) and their agents' (broker_killed, broker_process_exited):
    (node, node, from, until)."""
    spans: list[tuple[str, str, str]] = []  # node, from, until ("~": still primary)
    for node in nodes:
        ends = sorted(
            str(e["ts"])
            for e in node.agent_events()
            if e["event"] in ("broker_killed", "broker_process_exited")
        )
        start: str | None = None
        for e in node.broker_events():
            ts, event = str(e["ts"]), e["event"]
            primary = event == "ha_state_changed" and e.get("new") in PRIMARY_STATES
            if start is None and primary:
                start = ts
            elif (
                start is not None
                and not primary
                and event in ("ha_state_changed", "broker_started", "broker_stopped")
            ):
                spans.append((node.name, start, min([ts] + [t for t in ends if t > start])))
                start = None
        if start is not None:
            spans.append((node.name, start, min(["~"] + [t for t in ends if t > start])))
    return [
        (a, b, max(a_from, b_from), min(a_until, b_until))
        for i, (a, a_from, a_until) in enumerate(spans)
        for (b, b_from, b_until) in spans[i + 1 :]
        if a != b and a_from < b_until and b_from < a_until
    ]


def test_virtual_ip_moves_to_the_new_primary_and_a_client_on_a_third_host_follows_it(
    netns_cluster: NetnsCluster,
) -> None:
    agents = netns_cluster
    agents.start_agents(f"--vip={VIP}/24", "--vip-interface=eth0")
    old = agents.wait_settled()
    poll_until(lambda: agents.vip_holders() == [old.name], 10)

    client = agents.client("orders")
    first = client.ask("publish 200 30")
    assert len(first["confirmed"]) == 200
    assert first["broker"] == agents.broker_id(old)  # the VIP led to the primary

    old_pid = old.broker_pid()
    killed_at = time.monotonic()
    os.kill(old_pid, signal.SIGKILL)
    second = client.ask("publish 200 60")  # through the same address, to the new primary
    resumed_after = time.monotonic() - killed_at
    assert len(second["confirmed"]) == 400
    assert second["reconnects"] >= 1

    new = next(n for n in agents.nodes if n.state() in PRIMARY_STATES)
    assert new is not old
    assert second["broker"] == agents.broker_id(new)
    assert agents.vip_holders() == [new.name]
    # the old primary's agent dropped the address before the new one added it
    removed = events(old, "vip_removed")
    added = events(new, "vip_added")
    assert removed and added
    assert removed[-1]["ts"] < added[-1]["ts"]
    assert not vip_overlaps(agents.nodes)
    assert not primary_overlaps(agents.nodes)
    # the killed broker is restarted by its agent and comes back as a backup
    poll_until(lambda: old.state() == "ready", 30)
    assert agents.wait_settled() is new
    assert agents.vip_holders() == [new.name]

    received = client.ask("drain 30")["received"]
    lost = set(second["confirmed"]) - set(received)
    assert not lost, f"confirmed messages lost: {sorted(lost)[:10]}"
    assert resumed_after < 30
    print(f"\nvirtual IP fail-over: client resumed {resumed_after:.2f} s after the SIGKILL")
    _cut_the_primary_from_a_member(agents, new)


def _cut_the_primary_from_a_member(agents: NetnsCluster, primary: Node) -> None:
    """The link between the primary and one member cut: the member's grant lapses, the
    primary stops serving, and a primary serves again after the lapse, nothing lost.
    Clients by address (the virtual IP's move is the first part's)."""

    def counted() -> bool:  # the primary counts both members' grants
        lease = agents.ha(primary)["member_lease"]
        members = lease["members"]
        return bool(lease["serving"]) and len(members) == 2 and None not in members.values()

    poll_until(counted, 20, "both members grant the primary")
    before = agents.client("lease", agents.host(primary).address).ask("publish 100 30")
    assert len(before["confirmed"]) == 100
    member = next(n for n in agents.nodes if n is not primary)
    agents.cut(primary, member)
    cut_at = time.monotonic()
    try:
        poll_until(
            lambda: not agents.ha(primary)["member_lease"]["serving"], 10, "the lease lapses"
        )
        stopped_after = time.monotonic() - cut_at

        def serves() -> Node | None:
            for node in agents.nodes:
                with contextlib.suppress(Exception):
                    lease = agents.ha(node)
                    if lease["state"] in PRIMARY_STATES and lease["member_lease"]["serving"]:
                        return node
            return None

        serving = poll_until(serves, 30, "a primary serves again")
        resumed_after = time.monotonic() - cut_at
        after = agents.client("lease", agents.host(serving).address)
        third = after.ask("publish 100 30")
        received = sorted(after.ask("drain 30")["received"])
    finally:
        agents.cut(primary, member, cut=False)
    assert len(third["confirmed"]) == 100
    lapsed = [e for e in primary.broker_events() if e["event"] == "member_lease_lapsed"]
    assert lapsed and lapsed[0]["member"] == agents.broker_id(member)
    if serving is not primary:  # promoted by its lapsed grant: only after the old one stopped
        promoted = events(serving, "agent_promoted")[-1]
        assert lapsed[0]["ts"] < promoted["ts"], (lapsed[0], promoted)
    # both clients number from 0: every number twice, none lost, none twice more
    assert received == sorted(before["confirmed"] + third["confirmed"]), received
    taken = [e["reason"] for e in events(serving, "epoch_taken")][-1:]
    print(
        f"link cut: not serving {stopped_after:.2f} s after the cut, {serving.name} serving"
        f" {resumed_after:.2f} s after it ({taken})"
    )


def test_primary_host_cut_off_is_fenced_before_another_broker_is_promoted(
    netns_cluster: NetnsCluster,
) -> None:
    agents = netns_cluster
    for node in agents.nodes:  # the links found cut after the session's expiry (above)
        node.broker_command = [
            "--link-heartbeat-interval=4" if a.startswith("--link-heartbeat-interval=") else a
            for a in node.broker_command
        ]
    agents.start_agents(f"--vip={VIP}/24", "--vip-interface=eth0")
    old = agents.wait_settled()
    poll_until(lambda: agents.vip_holders() == [old.name], 10)
    client = agents.client("orders")
    assert len(client.ask("publish 100 30")["confirmed"]) == 100

    old_pid = old.broker_pid()
    others = [n for n in agents.nodes if n is not old]
    cut_at, cut_ts = time.monotonic(), datetime.now(UTC).strftime("%H:%M:%S.%f")
    agents.host(old).link(False)
    overlaps: list[list[str]] = []

    def replaced() -> Node | None:
        # the others first: an old primary still active after a new one was seen is an overlap
        serving = [n for n in others if n.state() in PRIMARY_STATES]
        if serving and old.state() in PRIMARY_STATES:
            overlaps.append([old.name] + [n.name for n in serving])
        elif len(serving) > 1:
            overlaps.append([n.name for n in serving])
        return serving[0] if serving else None

    new: Node = poll_until(replaced, 30)
    replaced_after = time.monotonic() - cut_at
    assert not overlaps
    assert old.name not in agents.vip_holders()  # dropped while still cut off
    poll_until(lambda: agents.vip_holders() == [new.name], 10)

    fences = events(old, "zookeeper_session_fence")
    assert fences
    # The old broker stopped serving before the new promotion: killed by its agent's fence,
    # or fenced by its own lease (the agent could not renew it), whichever came first.
    stops = [e["ts"] for e in events(old, "broker_killed") if e["pid"] == old_pid]
    stops += [e["ts"] for e in old.broker_events() if e["event"] == "ha_fenced"]
    assert stops
    promoted = events(new, "agent_promoted")[-1]
    assert min(stops) < promoted["ts"]
    assert events(old, "vip_removed")[-1]["ts"] < promoted["ts"]
    assert not vip_overlaps(agents.nodes)
    # ZooKeeper gave up on the cut-off agent only after its session timed out
    # ZooKeeper expires a session T after the last request it heard, which may precede
    # the cut (or the freeze) by up to the agent's heartbeat (0.4 T)
    assert replaced_after >= SESSION_TIMEOUT * 0.6

    agents.host(old).link(True)
    poll_until(lambda: old.state() == "ready", 40)
    assert agents.wait_settled() is new
    answer = client.ask("publish 100 60")
    assert len(answer["confirmed"]) == 200
    received = client.ask("drain 30")["received"]
    lost = set(answer["confirmed"]) - set(received)
    assert not lost, f"confirmed messages lost: {sorted(lost)[:10]}"
    overlaps_in_logs = primary_overlaps(agents.nodes)
    print(
        f"\npartition: cut at {cut_ts}, fenced {fences[0]['ts']}, "
        f"broker stopped {min(stops)}, "
        f"promoted {promoted['ts']}; replaced {replaced_after:.2f} s after the cut"
    )
    assert not overlaps_in_logs, f"two brokers primary at once: {overlaps_in_logs}"
