"""The member lease end to end (issue 26 item 1): three real brokers, a real client.

One test, in steps, to keep ``make test`` short: a backup joining the set of a serving
primary never stops it serving (a client connecting in a loop through the join is always
admitted); a stopped (SIGSTOP) member of the
committed in-sync set stops the primary serving within the lease plus the drift bound (no
confirm, no new client), and one request interval later the primary closes its client
connections (320, so they go on to their URL list: issue 26, item 4); it serves again when
the member resumes or the set changes; a
backup whose primary is gone stops granting (``GET /grant`` on its liveness port lapses);
and a backup promoted right away waits for its own grant to the older epoch to lapse
before it serves (measured and logged).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pika
import pika.exceptions
import pytest

from common.polling import holds_for, poll_until
from tests.drill.log_schema import problems
from tests.ha.cluster import Cluster, http

pytestmark = pytest.mark.timeout(120)

LEASE = 1.5
DRIFT = 0.01
HELD = LEASE * (1 + DRIFT) / (1 - DRIFT)


def grant(cluster: Cluster, i: int, query: str = "") -> dict[str, Any]:
    port = cluster.ha(i)["liveness"]["port"]
    return dict(http("GET", port, "/grant" + query))


def connect(port: int) -> pika.BlockingConnection:
    params = pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
    return pika.BlockingConnection(params)


def refused(port: int) -> str | None:
    """The refusal text of a client connection to ``port`` (None: admitted)."""
    try:
        connect(port).close()
    except pika.exceptions.AMQPConnectionError as exc:  # 530 while tuning: "probable access"
        return str(exc)
    return None


def closed_by_broker(
    connection: pika.BlockingConnection, timeout: float
) -> pika.exceptions.ConnectionClosedByBroker:
    """The broker's connection.close of ``connection``, read within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection.process_data_events(time_limit=0.05)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            return exc
    raise AssertionError(f"the broker did not close the connection within {timeout} s")


def lease_of(cluster: Cluster, i: int) -> dict[str, Any]:
    return dict(cluster.ha(i)["member_lease"])


class ClientLoop:
    """Clients connecting to ``port`` one after another on a thread, until stopped: the
    refusals the primary gave them (530, its reason), and how many it admitted."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.refusals: list[str] = []
        self.admitted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            text = refused(self.port)
            if text is None:
                self.admitted += 1
            elif "NOT_ALLOWED" in text:  # 530: not serving, or began serving meanwhile
                self.refusals.append(text)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def test_the_member_lease_stops_and_resumes_serving_and_a_promotion_waits(tmp_path: Any) -> None:
    cluster = Cluster(
        tmp_path,
        3,
        f"--ha-member-lease={LEASE}",
        f"--ha-member-lease-max={LEASE}",  # a fixed lease: its bounds are measured here
        f"--ha-clock-drift={DRIFT}",
    ).start()
    stopped: int | None = None
    try:
        ids = {i: cluster.ha(i)["broker_id"] for i in (1, 2)}
        body = {"cluster_manager": True, "epoch": 1, "in_sync": [ids[2]]}
        assert http("POST", cluster.brokers[0].mgmt_port, "/api/ha/promote", body)["state"]
        poll_until(
            lambda: (
                ids[1] in cluster.ha(0)["in_sync"]["wanted"]
                and None not in lease_of(cluster, 0)["members"].values()
            ),
            15,
            "broker 2 grants, broker 1 ready to join",
        )

        # 0. broker 1 joins the set of the serving primary: it never stops serving (the
        # request asking broker 1's promise counts from its sending, as its answer would)
        loop = ClientLoop(cluster.ports[0])
        try:
            poll_until(lambda: loop.admitted >= 3, 15, "clients admitted before the join")
            body = {"cluster_manager": True, "epoch": 1, "members": [ids[1], ids[2]]}
            http("POST", cluster.brokers[0].mgmt_port, "/api/ha/in-sync", body)
            joined = loop.admitted
            poll_until(
                lambda: (
                    (s := lease_of(cluster, 0))["serving"]
                    and set(s["members"]) == {ids[1], ids[2]}
                    and None not in s["members"].values()
                ),
                15,
                "both members grant",
            )
            poll_until(lambda: loop.admitted >= joined + 3, 15, "clients admitted after it")
        finally:
            loop.stop()
        events = cluster.brokers[0].events()
        if not [e for e in events if e["event"] == "member_lease_lapsed"]:  # no real stall:
            assert loop.refusals == [], loop.refusals  # never refused, never stopped serving
            assert not [e for e in events if e["event"] == "member_lease_serving"]
        status = lease_of(cluster, 0)
        assert status["enabled"] and set(status["members"]) == {ids[1], ids[2]}
        assert grant(cluster, 1)["epoch"] == 1 and not grant(cluster, 1)["lapsed"]
        assert grant(cluster, 1)["formats"] == "1-4"

        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q")
        channel.basic_publish("", "q", b"before")  # confirmed: returns

        # 1. a member stops: the primary stops serving within the lease plus the bound
        proc = cluster.brokers[1].proc
        assert proc is not None
        stopped = proc.pid
        os.kill(stopped, signal.SIGSTOP)
        began = time.monotonic()
        poll_until(lambda: not lease_of(cluster, 0)["serving"], 10, "the lease lapses")
        took = time.monotonic() - began
        assert took < LEASE + LEASE / 4 + 1.0, took  # the lease, one request's lag, polling
        lapsed = poll_until(
            lambda: [e for e in cluster.brokers[0].events() if e["event"] == "member_lease_lapsed"],
            5,
            "member_lease_lapsed",
        )
        assert [e["member"] for e in lapsed] == [ids[1]], lapsed
        assert lapsed[0]["level"] == "warning" and lapsed[0]["age_ms"] >= 0
        text = refused(cluster.ports[0])
        assert text is not None and "member lease" in text, text
        # ... and its client stays connected: the stopped member's link goes silent and it
        # is pending removal before the close grace (twice the link heartbeat and two
        # maintenance intervals) runs out, so the primary keeps its clients (losing a backup
        # never closes them; the commit of its removal is what resumes serving)
        poll_until(
            lambda: ids[1] in cluster.ha(0)["in_sync"]["pending_removal"],
            10,
            "the stopped member pending removal",
        )
        connection.process_data_events(time_limit=0.1)
        assert connection.is_open
        assert not [
            e for e in cluster.brokers[0].events() if e["event"] == "member_lease_clients_closed"
        ]
        held = connection  # closed once the primary serves again: its close-ok is held too

        # 2. the member resumes: grants again, the primary serves and confirms
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        poll_until(lambda: lease_of(cluster, 0)["serving"], 10, "the member grants again")
        held.close()
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("", "q", b"after")  # confirmed
        assert refused(cluster.ports[0]) is None
        served = poll_until(
            lambda: [
                e
                for e in cluster.brokers[0].events()
                if e["event"] == "member_lease_serving" and e["ts"] > lapsed[0]["ts"]
            ],
            5,
            "member_lease_serving after the lapse",
        )
        assert 0 < served[-1]["held_ms"] < 60_000

        # 3. the set changes: a member stopped no longer matters once it is out of the set
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = proc.pid
        poll_until(lambda: not lease_of(cluster, 0)["serving"], 10, "the lease lapses again")
        body = {"cluster_manager": True, "epoch": 1, "members": [ids[2]]}
        assert "released" in http("POST", cluster.brokers[0].mgmt_port, "/api/ha/in-sync", body)
        assert lease_of(cluster, 0)["serving"] and refused(cluster.ports[0]) is None
        connection.close()

        # 4. the primary dies: broker 2's grant lapses; promoted at once, it waits for it
        cluster.kill(0)
        before = grant(cluster, 2)
        assert before["epoch"] == 1
        promoted = http(
            "POST",
            cluster.brokers[2].mgmt_port,
            "/api/ha/promote",
            {"cluster_manager": True, "epoch": 2, "in_sync": []},
        )
        assert promoted["state"] in ("recovering", "active"), promoted
        waits = poll_until(
            lambda: [
                e
                for e in cluster.brokers[2].events()
                if e["event"] == "member_lease_promotion_wait"
            ],
            10,
        )
        wait_ms = waits[0]["wait_ms"]
        print(f"member lease: lapse seen after {took:.2f} s, promotion wait {wait_ms} ms")
        assert 0 < wait_ms <= HELD * 1000 + 1, waits
        assert lease_of(cluster, 2)["promotion_wait"] == pytest.approx(wait_ms / 1000, abs=0.01)
        poll_until(lambda: refused(cluster.ports[2]) is None, 10, "the new primary serves")
        assert grant(cluster, 2, "?epoch=2")["lapsed"]
        assert grant(cluster, 2, "?epoch=x").get("http_status") == 400
        for i in (0, 2):  # the new events follow the log schema
            for event in cluster.brokers[i].events():
                if str(event["event"]).startswith("member_lease"):
                    assert problems(event) == [], event
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.stop()


#: The cluster manager's lease in the cut-off test (seconds), renewed every 0.1 s.
MANAGER_LEASE = 4.0


class Renewer:
    """A cluster manager renewing broker ``i``'s lease every 0.1 s on a thread, until
    stopped; :attr:`last`: when it sent its last renewal (monotonic)."""

    def __init__(self, cluster: Cluster, i: int) -> None:
        self.port = cluster.brokers[i].mgmt_port
        self.last = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            body = {"cluster_manager": True, "lease": MANAGER_LEASE}
            if http("POST", self.port, "/api/ha/lease", body).get("lease") == MANAGER_LEASE:
                self.last = sent
            self._stop.wait(0.1)

    def stop(self) -> float:
        """Stop renewing; when the last renewal was sent."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()
        return self.last


def test_a_cut_off_primary_closes_its_clients_once_its_manager_is_silent(tmp_path: Any) -> None:
    """Issue 26, item 4: both members gone (SIGKILLed: their links closed, so they are
    pending removal), the primary stops serving once their grants lapse. While its cluster
    manager renews its lease, it keeps its clients (the manager's commit of their removal
    is what resumes serving); once the manager stops renewing (as an agent that lost
    ZooKeeper does: the primary is cut off), it closes them (320, the member lease's
    reason, ``cut_off``) as soon as less than half its lease is left, before the lease runs
    out and it fences (until then its clients stayed on it)."""
    cluster = Cluster(
        tmp_path,
        3,
        f"--ha-member-lease={LEASE}",
        f"--ha-member-lease-max={LEASE}",  # a fixed lease: its bounds are measured here
        f"--ha-clock-drift={DRIFT}",
    ).start()
    renewer: Renewer | None = None
    try:
        ids = {i: cluster.ha(i)["broker_id"] for i in (1, 2)}
        mgmt = cluster.brokers[0].mgmt_port
        body = {"cluster_manager": True, "epoch": 1, "in_sync": [ids[2]]}
        assert http("POST", mgmt, "/api/ha/promote", body)["state"]
        poll_until(lambda: ids[1] in cluster.ha(0)["in_sync"]["wanted"], 15, "broker 1 ready")
        body = {"cluster_manager": True, "epoch": 1, "members": [ids[1], ids[2]]}
        http("POST", mgmt, "/api/ha/in-sync", body)
        poll_until(
            lambda: (
                (s := lease_of(cluster, 0))["serving"]
                and set(s["members"]) == {ids[1], ids[2]}
                and None not in s["members"].values()
            ),
            15,
            "both members grant",
        )
        renewer = Renewer(cluster, 0)
        poll_until(lambda: renewer is not None and renewer.last > 0, 10, "a renewal")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q")
        channel.basic_publish("", "q", b"before")  # confirmed: returns
        cluster.kill(1)
        cluster.kill(2)
        poll_until(
            lambda: set(cluster.ha(0)["in_sync"]["pending_removal"]) == {ids[1], ids[2]},
            10,
            "both members pending removal",
        )
        poll_until(lambda: not lease_of(cluster, 0)["serving"], 10, "the lease lapses")

        def kept() -> bool:
            connection.process_data_events(time_limit=0.05)
            return bool(connection.is_open)

        holds_for(kept, 1.0)  # the manager vouches: its commit would resume serving
        last = renewer.stop()
        renewer = None
        exc = closed_by_broker(connection, MANAGER_LEASE + 5)
        took = time.monotonic() - last
        assert exc.reply_code == 320 and "member lease" in exc.reply_text, exc
        # the broker logs the close after it wrote the close frames: poll for the line
        (closed,) = poll_until(
            lambda: [
                e
                for e in cluster.brokers[0].events()
                if e["event"] == "member_lease_clients_closed"
            ],
            5,
            "member_lease_clients_closed logged",
        )
        assert closed["cut_off"] is True and closed["connections"] == 1, closed
        print(f"cut-off primary: its client closed {took:.2f} s after the last renewal")
        assert took >= MANAGER_LEASE / 2 - 0.2  # half its lease without a word from it
    finally:
        if renewer is not None:
            renewer.stop()
        cluster.stop()
