"""A backup reads a broker's HA status in connection.start and logs into none that is not
the primary (issue 25): its dial of a backup ends there, with neither the login nor the
530 refusal at connection.open a login later that it met before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.polling import poll_until
from tests.ha.cluster import Cluster


def _dials_ended_at_start(cluster: Cluster) -> list[dict[str, Any]] | None:
    """Broker 0's log once it holds three dials ended after connection.start, else None."""
    events = cluster.brokers[0].events()
    ended = [
        e
        for e in events
        if e.get("event") == "handshake_abandoned" and e.get("state") == "await-start-ok"
    ]
    return events if len(ended) >= 3 else None


def test_a_backup_ends_its_dial_of_a_backup_before_the_login(pair: Cluster) -> None:
    # Neither broker is promoted: each dials both addresses (the other's and its own)
    # every link-maintenance-interval and meets a joining broker each time.
    events = poll_until(
        lambda: _dials_ended_at_start(pair), 60, "dials of broker 0 ended at connection.start"
    )
    refusals = [
        e for e in events if e.get("event") == "protocol_error" and e.get("reply_code") == 530
    ]
    assert refusals == []  # no dial reached connection.open, none logged in
    assert not [e for e in events if e.get("event") == "connection_opened"]
    error = poll_until(lambda: pair.ha(1).get("link_error"), 30, "broker 1's link error")
    assert "not a primary (joining)" in str(error)


def test_a_backup_does_not_dial_its_own_address(pair: Cluster) -> None:
    """Issue 25: ``ha-brokers-url`` names each broker too; a backup dials only the others
    (each of broker 0's rounds: one dial, broker 1's, not two)."""
    events = poll_until(
        lambda: _dials_ended_at_start(pair), 60, "dials of broker 0 ended at connection.start"
    )
    own = f"127.0.0.1:{pair.ports[0]}"
    failed = [e for e in events if e.get("event") == "ha_link_dial_failed"]
    assert failed and all(e["address"] != own for e in failed)
    assert {e["address"] for e in failed} == {f"127.0.0.1:{pair.ports[1]}"}


def test_a_backup_knows_its_own_address_by_its_id_in_connection_start(tmp_path: Path) -> None:
    """A broker whose URL is not the address ``ha-brokers-url`` names it by (here it
    listens on ``localhost``, the list says ``127.0.0.1``; in the drill it listens on
    ``0.0.0.0`` under its node name): its first dial of that address ends at
    connection.start, which names its own broker id, and it never dials it again. Only
    broker 0 runs: broker 1's address is refused each round, and counted."""
    cluster = Cluster(tmp_path, 2, "--interface=localhost")
    broker = cluster.brokers[0]
    try:
        broker.start()
        assert cluster.state(0) == "joining"
        poll_until(
            lambda: (cluster.ha(0).get("link_error") or {}).get("count", 0) >= 10,
            60,
            "ten rounds of broker 0's dials (broker 1's address refused)",
        )
        events = broker.events()
        own_dials = [
            e
            for e in events
            if e.get("event") == "handshake_abandoned" and e.get("state") == "await-start-ok"
        ]
        assert len(own_dials) == 1  # its own address, dialled once, not ten times
        assert not [e for e in events if e.get("event") == "protocol_error"]  # no login
        failed = [e for e in events if e.get("event") == "ha_link_dial_failed"]
        assert {e["address"] for e in failed} == {f"127.0.0.1:{cluster.ports[1]}"}
    finally:
        cluster.stop()
