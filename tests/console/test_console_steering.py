"""A cluster manager's promote and shutdown, confirmed for real in Chromium, on a cluster of
its own: three brokers and no agents (an agent would start a stopped broker again, and
promotes by itself), each stopped by its PID at the end.

Shut down a backup from its console: the broker exits 0 and the primary's console shows it
gone (pending removal from the in-sync set: no agent commits it here). Then the primary
dies (SIGKILL) and the manager promotes the backup left from its console: its banner says
PRIMARY with the next epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from common.polling import poll_until
from tests.console.page import classes, confirm_says, log_in, seen, text
from tests.console.support import write_users
from tests.ha.cluster import Cluster

pytestmark = pytest.mark.xdist_group("console_browser")  # the module's browser


@pytest.fixture
def steered(tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers with the console's users, the first one primary, two ready backups."""
    users = write_users(tmp_path / "users")
    cluster = Cluster(tmp_path, 3, f"--sasl-users={users}")
    try:
        try:  # the three at once: 2 s here, 6.5 s one after the other
            with ThreadPoolExecutor(3) as pool:
                list(pool.map(lambda broker: broker.start(), cluster.brokers))
        except RuntimeError:  # a port taken meanwhile: Cluster.start moves to new ones
            cluster.stop()
            cluster.start()
        cluster.promote(0)
        for i in (1, 2):
            cluster.wait_state(i, "ready", timeout=30)
        yield cluster
    finally:
        cluster.stop()  # each broker by its PID


def row_of(port: int) -> str:
    return f"#members tr[data-member='127.0.0.1:{port}']"


def test_a_cluster_manager_shuts_down_a_backup_then_promotes_one(
    steered: Cluster, browser: Any, shots: Path
) -> None:
    primary, stays, leaving = steered.brokers
    assert leaving.proc is not None
    pid = leaving.proc.pid
    log_in(browser, leaving, "manager")
    seen(browser, lambda: browser.find_element(By.ID, "shutdown")).click()
    confirm_says(browser, lambda q: f"Shut down {'b2'}?" in q)
    browser.find_element(By.ID, "confirm-ok").click()
    seen(browser, lambda: f"b2 is stopping (pid {pid})" in text(browser, "#toast"), what="toast")
    poll_until(lambda: leaving.proc is not None and leaving.proc.poll() is not None, 15)
    assert leaving.proc.returncode == 0  # an orderly stop, as on SIGTERM
    stop = [e for e in leaving.events() if e["event"] == "broker_stop_requested"]
    assert [e["user"] for e in stop] == ["manager"]

    # the primary's console: no member answers at the stopped backup's address
    log_in(browser, primary, "manager")
    gone = row_of(leaving.port)
    role = f"{gone} td:nth-child(3)"
    pending = "GONE, pending removal from the in-sync set"  # no agent commits it here
    seen(browser, lambda: text(browser, role) == pending, 15, "the backup gone")
    assert "down" in classes(browser, gone)
    # still a member of the in-sync set until its removal is committed: card and table agree
    assert text(browser, f"{gone} td.in-sync") == "member, gone: confirms held"
    members = sorted(f"127.0.0.1:{b.port}" for b in (stays, leaving))
    summary = text(browser, "#in-sync-summary")
    assert summary == (
        f"In-sync set: {', '.join(members)} (confirms wait for both) · 127.0.0.1:{leaving.port}"
        " gone, pending removal from the set (its confirms held until then)"
    ), summary
    browser.save_screenshot(str(shots / "cluster-shut-down.png"))

    # the primary fails; the cluster manager promotes the backup left, after confirming
    steered.kill(0)
    log_in(browser, stays, "manager")
    seen(browser, lambda: browser.find_element(By.ID, "promote"), 15, "Promote").click()
    confirm_says(browser, lambda q: "Promote b1 to primary?" in q)
    browser.find_element(By.ID, "confirm-ok").click()
    toast = ("promoted b1: recovering, epoch 2", "promoted b1: active, epoch 2")
    seen(browser, lambda: text(browser, "#toast") in toast, what="the promote's answer")
    banner = "PRIMARY: b1"
    seen(browser, lambda: text(browser, "#role-banner").startswith(banner), 15, banner)
    assert steered.state(1) in ("recovering", "active")
    promoted = [e for e in stays.events() if e["event"] == "ha_promote_requested"]
    assert [(e["user"], e["epoch"]) for e in promoted] == [("manager", 2)]
