"""The administrator's verbs against a live 3-broker cluster (issue 15): ``connections
[--all]``, ``disconnect ID`` and ``stop-member MEMBER``, and their management endpoints
(``DELETE /api/connections/{id}``, ``POST /api/admin/stop``).

The tests share one cluster and run in file order on one worker (``xdist_group``): the
last one stops a member."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.cli.conftest import address, qpid_ha
from tests.ha.cluster import Cluster, http

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))
PRODUCT = "qpid-ha-admin-test"


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A primary (broker 0, epoch 1) and two ready backups."""
    cluster = Cluster(tmp_path_factory.mktemp("trio"), 3)
    try:
        cluster.start()
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active", timeout=30)  # 30 s: two cores shared with the suite
        cluster.wait_state(1, "ready", timeout=30)
        cluster.wait_state(2, "ready", timeout=30)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def client(trio: Cluster) -> Iterator[pika.BlockingConnection]:
    """A pika client of the primary, recognisable by its product name."""
    params = pika.URLParameters(trio.brokers[0].url)
    params.client_properties = {"product": PRODUCT}
    connection = pika.BlockingConnection(params)
    try:
        yield connection
    finally:
        if connection.is_open:
            connection.close()


def every_member(trio: Cluster) -> str:
    """Every member's management address in one -b (credentials once, as in a URL)."""
    return "guest/guest@" + ",".join(address(b, "") for b in trio.brokers)


def ours(listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in listed if c.get("client_product") == PRODUCT]


def test_connections_lists_the_brokers_clients(
    trio: Cluster, client: pika.BlockingConnection
) -> None:
    result = qpid_ha("-b", address(trio.brokers[0]), "connections")
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["ID", "PEER", "USER", "STATE", "CHANNELS", "CLIENT"]
    mine = [row for row in rows if PRODUCT in row]
    assert len(mine) == 1 and mine[0].split()[2:4] == ["guest", "open"]
    listed = json.loads(qpid_ha("-b", address(trio.brokers[0]), "connections", "--json").stdout)
    assert len(ours(listed)) == 1


def test_connections_all_asks_every_member(trio: Cluster, client: pika.BlockingConnection) -> None:
    result = qpid_ha("-b", every_member(trio), "connections", "--all")
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    header, *rows, summary = result.stdout.splitlines()
    assert header.split()[:2] == ["MEMBER", "ID"]
    primary_url = trio.ha(0)["url"]
    assert [row.split()[0] for row in rows if PRODUCT in row] == [primary_url]
    assert summary.startswith("connections by member: ")
    for i, state in ((0, "active"), (1, "ready"), (2, "ready")):
        at = f"127.0.0.1:{trio.brokers[i].mgmt_port}"
        assert f"{trio.ha(i)['url']} ({state}) at {at}: " in summary
    listed = json.loads(qpid_ha("-b", every_member(trio), "connections", "--all", "--json").stdout)
    assert [c["member"] for c in ours(listed)] == [primary_url]


def test_connections_all_says_which_member_it_cannot_reach(trio: Cluster) -> None:
    """With one -b address the backups' management addresses are unknown (same host, other
    ports): the primary's connections, then one line naming the others, exit 1."""
    result = qpid_ha("-b", address(trio.brokers[0]), "connections", "--all")
    assert result.exit_code == 1
    assert "management address unknown" in result.stdout.splitlines()[-1]
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("qpid-ha: error: ")
    for i in (1, 2):
        assert trio.ha(i)["url"] in result.stderr


def test_disconnect_closes_the_connection_with_320(
    trio: Cluster, client: pika.BlockingConnection
) -> None:
    b = address(trio.brokers[0])
    (mine,) = ours(json.loads(qpid_ha("-b", b, "connections", "--json").stdout))
    result = qpid_ha("disconnect", str(mine["id"]), "-b", b)  # -b after the verb
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    assert result.stdout == f"closed connection {mine['id']} ({mine['peer']}, guest)\n"
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        poll_until(lambda: client.process_data_events(time_limit=0.05) or not client.is_open, 10)
    assert closed.value.reply_code == 320
    assert "closed by the administrator (guest)" in closed.value.reply_text
    events = [e for e in trio.brokers[0].events() if e["event"] == "connection_closed_by_admin"]
    assert events and events[-1]["user"] == "guest"


@pytest.mark.parametrize(
    ("connection_id", "code", "said"),
    [("999999", 1, "HTTP 404 for /api/connections/999999: no connection 999999"),
     ("abc", 2, "ID: a connection id is a positive integer, not 'abc'"),
     ("0", 2, "positive integer")],
)  # fmt: skip
def test_disconnect_a_wrong_id_is_one_line(
    trio: Cluster, connection_id: str, code: int, said: str
) -> None:
    result = qpid_ha("-b", address(trio.brokers[0]), "disconnect", connection_id)
    assert (result.exit_code, result.stdout) == (code, "")
    assert said in result.stderr and result.stderr.count("\n") == 1


def test_stop_endpoint_refuses_another_brokers_id(trio: Cluster) -> None:
    port = trio.brokers[2].mgmt_port
    answer = http("POST", port, "/api/admin/stop", {"broker_id": "not-this-one"})
    assert answer["http_status"] == 409 and "not stopped" in answer["reason"]
    assert http("POST", port, "/api/admin/stop", {"bogus": 1})["http_status"] == 400
    assert trio.brokers[2].alive()


def test_stop_member_of_an_unknown_member_is_exit_1(trio: Cluster) -> None:
    result = qpid_ha("-b", every_member(trio), "stop-member", "127.0.0.1:1")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith("qpid-ha: error: no member 127.0.0.1:1 in the cluster")


def test_stop_member_on_a_stand_alone_broker_names_it_stand_alone(solo: BrokerProcess) -> None:
    result = qpid_ha("-b", address(solo), "stop-member", "x")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"qpid-ha: error: no member x in the cluster (members: 127.0.0.1:{solo.mgmt_port}"
        " (stand-alone))\n"
    )
    assert solo.alive()


def test_stop_member_stops_a_backup_as_sigterm_does(trio: Cluster) -> None:
    """Run as a subprocess, global option after the verb: the member stops cleanly (exit
    0, broker_stopped logged) and the primary sees it gone."""
    victim = trio.ha(2)
    result = subprocess.run(
        [QPID_HA, "stop-member", victim["url"], "-b", every_member(trio)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"stopping {victim['url']} (ready, {victim['broker_id']})",
        f"stopped {victim['url']}",
    ]
    proc = trio.brokers[2].proc
    assert proc is not None and proc.wait(timeout=15) == 0
    events = [e["event"] for e in trio.brokers[2].events()]
    assert "broker_stop_requested" in events and events[-1] == "broker_stopped"
    # An in-sync backup that went away waits for the cluster manager's committed removal.
    poll_until(lambda: victim["broker_id"] in trio.ha(0)["in_sync"]["pending_removal"], 15)
