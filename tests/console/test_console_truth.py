"""The console says what is true now, through a cluster's troubles, in Chromium (issue 30,
items 1 and 4; issue 24's replication error on the page).

One cluster of two brokers and no agents (each stopped by its PID), whose first broker's
store holds what no replication format carries: a queue whose arguments nest 70 deep,
given to a stand-alone broker of release 0.1.0 before the declare contract refused them
(as ``tests/ha/test_replication_errors_cluster.py`` makes it). The states follow each other
as they do in a cluster's life, so one test walks them, a page of each member open in its
own tab:

0. **a backup refused for its replication format** (started speaking one no release
   speaks): the primary's page says REFUSED, why and the next step, never just NOT
   CONNECTED; restarted at this release, it links;
1. **a backup whose replication failed**: the primary cannot send its snapshot; its page
   names the backup, the object and why, and never shows it in sync (not a member, the
   in-sync set empty); the backup's page says the same of itself;
2. the object deleted, the backup catches up: the error goes, it is a member;
3. **a fenced broker**: the primary's lease runs out (granted by hand for a moment); its
   page says it stopped and why, its last state greyed, not shown as the present;
4. **no primary**: the backup's page says so, with its link's error and the next step; the
   dead primary's row is not a green PRIMARY; Promote is offered (no agent manages it);
   then an agent's record says it contends: the page says **electing**, with its reason;
5. **recovering**: promoted expecting the fenced broker, the new primary says whom it waits
   for (and holds confirms meanwhile);
6. **a paused primary**: the new primary SIGSTOPped, its page says NO UPDATE for N s;
7. **a dead primary**: then SIGKILLed, its page says UNREACHABLE.

Photographed (``support.screenshot_dir``: ``docs/console/`` with ``CONSOLE_SCREENSHOTS=1``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from common.polling import poll_until
from common.version import REPLICATION_FORMATS, TEST_REPLICATION_FORMATS_ENV
from tests.broker_process import BrokerProcess
from tests.console.page import classes, log_in, seen, text
from tests.console.support import write_users
from tests.ha.cluster import Cluster, http
from tests.ha.test_replication_errors_cluster import _nested
from tests.upgrade.releases import build, previous_release
from tests.zookeeper import ZooKeeper

pytestmark = pytest.mark.xdist_group("console_browser")  # the module's browser

#: What the primary cannot encode in its snapshot (every replication format stops at 67).
WHY = "nested more than 67 deep"
#: The agents' cluster the consoles read (no agent runs: step 4 writes one's record).
ZK_CLUSTER = "console-truth"


@pytest.fixture(scope="module")
def troubled(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeper) -> Iterator[Cluster]:
    """Two brokers, b0 primary at epoch 1 with the queue ``deep`` no backup can be sent;
    their consoles read the agents' records of cluster :data:`ZK_CLUSTER` (none runs)."""
    root = tmp_path_factory.mktemp("console-truth")
    alone = BrokerProcess(root / "alone", args=[f"--data-dir={root / 'b0' / 'data'}"])
    alone.program = str(build(previous_release(), root / "release") / "qpidd")
    alone.start()
    try:
        body = {"durable": True, "arguments": {"x": _nested(69)}}
        made = http("PUT", alone.mgmt_port, "/api/queues/%2F/deep", body)
        assert "http_status" not in made, made
    finally:
        alone.stop()
    users = write_users(root / "users")
    # relinks back off to 1 s at most; a promoted broker waits for its expected backups
    cluster = Cluster(
        root,
        2,
        f"--sasl-users={users}",
        "--link-maintenance-interval=1",
        "--ha-backup-timeout=10",  # at least until the page showed it recovering
        f"--console-zk={zookeeper.hosts}",  # an agent's record written by the test
        f"--console-cluster={ZK_CLUSTER}",
    )
    # b1 first speaks a replication format no release speaks: the primary refuses its link
    cluster.brokers[1].env = {TEST_REPLICATION_FORMATS_ENV: "99-99"}
    try:
        try:  # both at once
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda broker: broker.start(), cluster.brokers))
        except RuntimeError:  # a port taken meanwhile: Cluster.start moves to new ones
            cluster.stop()
            cluster.start()
        cluster.promote(0, epoch=1)
        yield cluster
    finally:
        cluster.stop()


def row(port: int) -> str:
    return f"#members tr[data-member='127.0.0.1:{port}']"


def test_the_pages_follow_a_cluster_through_its_troubles(
    troubled: Cluster, browser: Any, shots: Path, zookeeper: ZooKeeper
) -> None:
    primary, backup = troubled.brokers
    primary_tab = browser.current_window_handle
    log_in(browser, primary, "manager")
    _refused_for_its_format(troubled, browser, shots)
    browser.switch_to.new_window("tab")
    backup_tab = browser.current_window_handle
    try:
        log_in(browser, backup, "manager")
        _replication_failed(troubled, browser, primary_tab, backup_tab, shots)
        _fenced_then_no_primary(troubled, browser, primary_tab, backup_tab, shots, zookeeper.hosts)
    finally:
        browser.close()  # the backup's tab; the first tab stays for the other tests
        browser.switch_to.window(primary_tab)


def _refused_for_its_format(cluster: Cluster, browser: Any, shots: Path) -> None:
    """The backup's link refused for its replication format: the primary's page says so,
    with why and the next step (not NOT CONNECTED); restarted at this release, it links."""
    backup = cluster.brokers[1]
    mine = row(backup.port)
    why = "no common replication format"
    role = "REFUSED: no replication format in common (it dials again)"
    seen(browser, lambda: text(browser, f"{mine} td:nth-child(3)") == role, 15, role)
    assert why in text(browser, f"{mine} .refused-link"), text(browser, mine)
    alert = text(browser, "#primary-card .refused-link")
    assert alert.startswith(f"Backup 127.0.0.1:{backup.port} refused: {why}"), alert
    formats = REPLICATION_FORMATS.text
    assert f"Next: this primary (replication formats {formats}) and that backup need" in alert
    browser.save_screenshot(str(shots / "cluster-refused-format.png"))
    backup.stop()
    backup.env = {}
    backup.start()


def _replication_failed(
    cluster: Cluster, browser: Any, primary_tab: str, backup_tab: str, shots: Path
) -> None:
    primary, backup = cluster.brokers
    # the backup's own page: which object, why, and not in sync
    own = seen(browser, lambda: text(browser, "#replication-error"), 15, "the backup's error")
    assert own.startswith("Replication failed: closed by the primary: replication error: "), own
    assert WHY in own and "not in sync" in own, own
    assert text(browser, "#role-banner").startswith("BACKUP b1")
    browser.switch_to.window(primary_tab)
    mine = row(backup.port)
    error = seen(browser, lambda: text(browser, f"{mine} .replication-error"), 10, "its row")
    assert error.startswith("replication error: primary: configuration stream"), error
    assert WHY in error, error
    assert "failed" in classes(browser, mine)
    assert text(browser, f"{mine} td.in-sync") in ("not a member (replication failed)",)
    role = text(browser, f"{mine} td:nth-child(3)")
    assert role.startswith(("REPLICATION FAILED", "backup, LAGGING (")), role
    assert text(browser, "#in-sync-summary") == "In-sync set: no backup (confirms wait for none)"
    alert = text(browser, "#primary-card .replication-failed")
    assert alert.startswith(f"Replication to 127.0.0.1:{backup.port} failed: ") and WHY in alert
    browser.save_screenshot(str(shots / "cluster-replication-error.png"))

    # the object gone, the backup catches up: the error goes, it is a member
    deleted = http("DELETE", primary.mgmt_port, "/api/queues/%2F/deep")
    assert "http_status" not in deleted, deleted
    member = "member (confirms wait for it)"
    seen(browser, lambda: text(browser, f"{mine} td.in-sync") == member, 15, "a member again")
    assert not browser.find_elements(By.CSS_SELECTOR, f"{mine} .replication-error")
    assert not browser.find_elements(By.CSS_SELECTOR, "#primary-card .replication-failed")
    assert text(browser, f"{mine} td:nth-child(3)") == "backup"
    browser.switch_to.window(backup_tab)
    seen(browser, lambda: not browser.find_elements(By.ID, "replication-error"), 10, "cleared")


def _electing_from_the_agents_record(zk_hosts: str, browser: Any) -> None:
    """4b. **electing**: an agent's status record (as ``ha_agent.agent_report`` writes it)
    says it contends: the page says the cluster is electing, with the agent's reason."""
    from kazoo.client import KazooClient

    from ha_agent.agent_report import AgentReport
    from ha_agent.zk_layout import ClusterLayout

    report = AgentReport("n1", broker_timeout=2.0)
    report.decided("a ready backup (no in-sync set recorded)")
    report.claim = "contending"
    path = f"{ClusterLayout(ZK_CLUSTER).agents}/n1"
    client = KazooClient(hosts=zk_hosts, timeout=10)
    client.start(timeout=10)
    try:
        client.create(path, report.status(0.0).to_json(), makepath=True)
        electing = "Electing: no primary yet; n1's agent contends (a ready backup (no in-sync"
        seen(browser, lambda: text(browser, "#next-step").startswith(electing), 10, electing)
        assert text(browser, "#primary-name") == "Electing: no primary yet (n1 contending)"
        client.delete(path)
        no_primary = "No primary. Next: no agent manages this broker"
        seen(browser, lambda: text(browser, "#next-step").startswith(no_primary), 10, no_primary)
    finally:
        client.stop()
        client.close()


def _fenced_then_no_primary(
    cluster: Cluster, browser: Any, primary_tab: str, backup_tab: str, shots: Path, zk_hosts: str
) -> None:
    primary, backup = cluster.brokers
    old_id = cluster.ha(0)["broker_id"]
    # the cluster manager's lease, granted for a moment and never renewed: the primary
    # fences itself when it runs out (a timer at the lease's end) and stops
    lease = {"cluster_manager": True, "lease": 0.2}
    granted = http("POST", primary.mgmt_port, "/api/ha/lease", lease)
    assert granted.get("lease") == 0.2, granted
    assert primary.proc is not None
    poll_until(lambda: primary.proc is not None and primary.proc.poll() is not None, 15)
    browser.switch_to.window(primary_tab)
    stopped = "STOPPED: b0: fenced: the cluster manager's lease ran out"
    seen(browser, lambda: text(browser, "#role-banner").startswith(stopped), 10, stopped)
    assert "not the present" in text(browser, "#role-banner")
    assert "stale" in classes(browser, "body")
    assert not browser.find_element(By.ID, "shutdown").is_displayed()  # no action offered
    browser.save_screenshot(str(shots / "fenced.png"))

    # the backup: no primary, why, and what to do; the dead primary not shown as serving
    browser.switch_to.window(backup_tab)
    banner = f"BACKUP b1 (ready): NO PRIMARY reachable (127.0.0.1:{primary.port}: "
    seen(browser, lambda: text(browser, "#role-banner").startswith(banner), 10, banner)
    assert text(browser, "#primary-name") == "No primary reachable from this backup"
    step = text(browser, "#next-step")
    assert step.startswith("No primary. Next: no agent manages this broker"), step
    old = row(primary.port)
    assert text(browser, f"{old} td:nth-child(3)") == "PRIMARY when last heard; NOT REACHABLE now"
    assert "down" in classes(browser, old) and "is-primary" not in classes(browser, old)
    assert browser.find_element(By.ID, "promote").text == "Promote this broker"
    browser.save_screenshot(str(shots / "cluster-no-primary.png"))
    _electing_from_the_agents_record(zk_hosts, browser)

    # promoted expecting the fenced broker: recovering, and it says whom it waits for
    body = {"cluster_manager": True, "epoch": 2, "in_sync": [old_id]}
    promoted = http("POST", backup.mgmt_port, "/api/ha/promote", body)
    assert promoted.get("state") == "recovering", promoted

    def recovering() -> str | None:
        step = text(browser, "#next-step")
        return step if step.startswith("Recovering: promoted, this primary waits for") else None

    step = seen(browser, recovering, 8, "recovering, and whom it waits for")
    # the expected backup named by its address, or its id while it is not known by one
    assert f"(127.0.0.1:{primary.port})" in step or f"({old_id})" in step, step
    assert "holds publisher confirms" in step, step
    assert not browser.find_elements(By.ID, "promote")
    # (active after ha-backup-timeout: not waited for here, to keep make test short)

    # the new primary paused (SIGSTOP: its socket open, nothing said): after 3.5 s of
    # silence its page says so, its last state greyed; then killed: it does not answer
    assert backup.proc is not None
    pid = backup.proc.pid
    os.kill(pid, signal.SIGSTOP)
    silent = "NO UPDATE from b1 for "
    seen(browser, lambda: text(browser, "#role-banner").startswith(silent), 10, silent)
    assert "(paused, too busy or cut off)" in text(browser, "#role-banner")
    assert "stale" in classes(browser, "body")
    assert not browser.find_element(By.ID, "shutdown").is_displayed()  # no action offered
    os.kill(pid, signal.SIGKILL)
    gone = "UNREACHABLE: b1 has not answered since "
    seen(browser, lambda: text(browser, "#role-banner").startswith(gone), 10, gone)
    assert "stale" in classes(browser, "body")
    browser.save_screenshot(str(shots / "unreachable.png"))
