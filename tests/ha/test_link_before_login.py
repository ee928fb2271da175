"""A backup reads a broker's HA status in connection.start and logs into none that is not
the primary (issue 25): its dial of a backup ends there, with neither the login nor the
530 refusal at connection.open a login later that it met before."""

from __future__ import annotations

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
