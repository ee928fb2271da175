"""A backup that cannot open its link says why (issue 10, item 6), with real brokers.

- ``--auth no`` on every broker and no link credentials (a common first try): the link logs
  in with ANONYMOUS and the backup reaches ``ready``; the start-up refusals ("not a
  primary") are logged at debug level only.
- A wrong ``--ha-password``: the backup stays ``joining``; its log has one
  ``ha_link_dial_failed`` line naming the login failure (rate-limited), ``GET /api/ha``
  shows ``link_error`` and ``qpid-ha status`` prints it on a second line.

The logic without I/O is tested in tests/ha/test_dial_failures.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from common.polling import poll_until
from qpid_ha_cli.main import app
from tests.drill.log_schema import problems
from tests.ha.cluster import Cluster


def cluster_of_two(root: Path, *extra: str, link_credentials: bool = True) -> Cluster:
    cluster = Cluster(root, 2, *extra)
    if not link_credentials:  # Cluster always passes them; this test's brokers go without
        for broker in cluster.brokers:
            broker.args = [
                arg for arg in broker.args if not arg.startswith(("--ha-username", "--ha-password"))
            ]
    return cluster


@pytest.fixture
def stopped_after(request: pytest.FixtureRequest) -> Iterator[list[Cluster]]:
    clusters: list[Cluster] = []
    try:
        yield clusters
    finally:
        for cluster in clusters:
            cluster.stop()


def dial_failures(cluster: Cluster, i: int) -> list[dict[str, Any]]:
    return [e for e in cluster.brokers[i].events() if e.get("event") == "ha_link_dial_failed"]


def qpid_ha_status(cluster: Cluster, i: int) -> str:
    address = f"guest/guest@127.0.0.1:{cluster.brokers[i].mgmt_port}"
    result = CliRunner().invoke(app, ["-b", address, "status"], prog_name="qpid-ha")
    return result.stdout


def test_auth_no_everywhere_needs_no_link_credentials(
    tmp_path: Path, stopped_after: list[Cluster]
) -> None:
    cluster = cluster_of_two(tmp_path, "--auth=no", link_credentials=False)
    stopped_after.append(cluster)
    assert not any(arg.startswith("--ha-username") for arg in cluster.brokers[1].args)
    cluster.start()
    cluster.promote(0, epoch=1)
    cluster.wait_state(0, "active")
    cluster.wait_state(1, "ready")
    assert cluster.ha(1)["link_error"] is None
    assert cluster.ha(0)["link_error"] is None
    assert qpid_ha_status(cluster, 1) == "ready\nstore: empty at start\n"  # no link: line
    links = [
        e
        for e in cluster.brokers[0].events()
        if e.get("event") == "connection_opened" and "HA backup link" in str(e.get("client"))
    ]
    assert links and {e["user"] for e in links} == {"anonymous"}
    # before the promotion broker 1 was refused by joining brokers: routine, debug only
    for event in dial_failures(cluster, 1):
        assert event["level"] == "debug" and event["reason"] == "not a primary (joining)", event


def test_a_wrong_ha_password_is_logged_and_shown(
    tmp_path: Path, stopped_after: list[Cluster]
) -> None:
    cluster = cluster_of_two(tmp_path, "--ha-password=wrong")
    stopped_after.append(cluster)
    cluster.start()
    cluster.promote(0, epoch=1)
    cluster.wait_state(0, "active")
    primary = f"127.0.0.1:{cluster.ports[0]}"

    def refused_again() -> dict[str, Any] | None:
        error = cluster.ha(1)["link_error"]
        if not error or error["address"] != primary or error["count"] < 3:
            return None
        # the primary's refusals, not the dials before the promotion (their
        # connection.start said "not a primary (joining)")
        return None if "not a primary" in error["reason"] else dict(error)

    error = poll_until(refused_again, 15, f"broker 1's link_error naming {primary}")
    assert error["reason"].startswith("login refused: ACCESS_REFUSED - "), error
    assert error["since"].endswith("Z")
    assert cluster.state(1) == "joining"

    lines = [e for e in dial_failures(cluster, 1) if e["address"] == primary]
    login = [e for e in lines if e["reason"].startswith("login refused")]
    # several dials refused, one line (at most one a minute for the same reason)
    assert len(login) == 1, lines
    assert login[0]["level"] == "warning" and login[0]["component"] == "ha"
    assert login[0]["reason"] == error["reason"] and login[0]["repeated"] == 0
    assert problems(login[0]) == []
    assert "wrong" not in str(lines)  # the password is never logged

    state, link, *rest = qpid_ha_status(cluster, 1).splitlines()
    assert state == "joining" and rest == ["store: empty at start"]
    assert link.startswith(f"link: {primary}: login refused: ACCESS_REFUSED - "), link
