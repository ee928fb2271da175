"""The primary serves replication links only to ``ha-username`` (issue 13, item 5): a
backup that logs in as another (valid) user is refused with 403 and stays joining, and
says why (log and ``/api/ha``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.security.users import write_users


def test_a_link_from_another_user_is_refused(tmp_path: Path) -> None:
    users = write_users(tmp_path / "users", {"guest": "guest", "other": "other-pw"})
    cluster = Cluster(tmp_path / "c", 2, f"--sasl-users={users}")
    backup = cluster.brokers[1]
    backup.args = [
        arg for arg in backup.args if not arg.startswith(("--ha-username", "--ha-password"))
    ] + ["--ha-username=other", "--ha-password=other-pw"]
    try:
        cluster.start()
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")

        def refusal() -> dict[str, Any] | None:
            for event in cluster.brokers[1].events():
                if event.get("event") in ("ha_link_error", "ha_link_dial_failed") and (
                    "ha-username" in str(event.get("reason"))
                ):
                    return event
            return None

        event = poll_until(refusal, 20, "the backup to log the refusal")
        assert "replication links are served to user 'guest' only" in event["reason"]
        assert event["level"] == "warning"
        error = poll_until(lambda: cluster.ha(1)["link_error"], 10, "link_error in /api/ha")
        assert "ha-username" in error["reason"] and "ACCESS_REFUSED" in error["reason"], error
        assert cluster.state(1) == "joining"
        ups = [e for e in cluster.brokers[1].events() if e.get("event") == "ha_link_up"]
        assert ups == []  # refused at connection.open, never half up
        assert "other-pw" not in (cluster.brokers[1].log_file.read_text())
    finally:
        cluster.stop()
