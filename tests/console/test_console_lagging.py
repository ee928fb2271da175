"""A backup that is connected and lagging, as the primary's console shows it (Chromium,
a real 3-node agent cluster).

The backup's broker is stopped (SIGSTOP) for a moment while a client publishes persistent
messages without confirms (a confirm would wait for the in-sync backup): the primary's
replication credit runs out, the queue's messages wait for the backup, and its row says
LAGGING with the messages and bytes still to send. The backup runs again before the
primary gives it up (a backup silent for twice the link heartbeat: 10 s here, so that a
loaded machine still shows the lag first; the browser tests' cluster has 2 s), reads its
backlog, and the lag goes back to 0. Photographed as ``cluster-lagging-backup.png``
(``support.screenshot_dir``: ``docs/console/`` with ``CONSOLE_SCREENSHOTS=1``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from selenium.webdriver.common.by import By

from tests.agent.agent_cluster import AgentCluster
from tests.console.page import classes, log_in, seen, text
from tests.console.support import write_users
from tests.zookeeper import ZooKeeper

# the browser tests' group: the same worker, so the same browser
pytestmark = pytest.mark.xdist_group("console_browser")

QUEUE = "console-lagging"
MESSAGES = 3000
BODY = b"p" * 512

#: "QUEUE: MESSAGES msgs (BYTES)" in the lag column, e.g. "console-lagging: 2,871 msgs (1.4 MiB)".
LAG_TEXT = re.compile(r"^(?P<queue>\S+): (?P<messages>[\d,]+) msgs?(?: \((?P<bytes>[^)]+)\))?$")
#: The sparkline's scale beside it: "max MESSAGES msgs" over the last 60 s.
SCALE_TEXT = re.compile(r"^max (?P<messages>[\d,]+) msgs$")


#: The link heartbeat: the primary gives a backup up after twice this silent.
HEARTBEAT = 10


@pytest.fixture(scope="module")
def lagging_cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeper
) -> Iterator[AgentCluster]:
    """The browser tests' cluster (``conftest.lagging_cluster``), with a link heartbeat
    of :data:`HEARTBEAT` s; settled."""
    root = tmp_path_factory.mktemp("console-lagging")
    users = write_users(root / "users")
    cluster = AgentCluster(root, zookeeper.hosts, f"lagging-{uuid.uuid4().hex[:8]}", size=3)
    try:
        for node in cluster.nodes:
            node.broker_command = [
                *(a for a in node.broker_command if not a.startswith("--link-heartbeat")),
                f"--link-heartbeat-interval={HEARTBEAT}",
                # two 64 KiB batches in flight at most: what the stopped backup cannot take
                # stays on the primary as lag (with the default 1000 it could all go into
                # the kernel's socket buffers, lag 0: a CI run saw that)
                "--ha-flow-messages=2",
                f"--sasl-users={users}",
                f"--console-zk={zookeeper.hosts}",
                f"--console-cluster={cluster.cluster}",
                f"--console-agent-log={node.agent_log}",
            ]
        cluster.start("--watchdog-timeout=0")  # its agent leaves the stopped broker alone
        cluster.wait_settled(timeout=60)
        yield cluster
    finally:
        cluster.stop()


def lag_of(browser: Any, row: str) -> tuple[int, str]:
    """The messages and bytes the row shows as still to send to that backup for QUEUE."""
    shown = text(browser, f"{row} .lag[data-queue='{QUEUE}'] > span")
    match = LAG_TEXT.match(shown)
    assert match, f"lag shown as {shown!r}"
    return int(match["messages"].replace(",", "")), match["bytes"] or ""


def test_a_connected_lagging_backup_shows_its_lag(
    lagging_cluster: AgentCluster, browser: Any, shots: Path
) -> None:
    primary = lagging_cluster.wait_settled(timeout=30)
    backup = next(n for n in lagging_cluster.nodes if n is not primary)
    log_in(browser, primary, "guest", "cluster")
    row = f"#members tr[data-member='127.0.0.1:{backup.port}']"
    parameters = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{primary.port}/%2F")
    with pika.BlockingConnection(parameters) as connection:
        channel = connection.channel()  # no confirms: they would wait for the stopped backup
        channel.queue_declare(QUEUE, durable=True)
        seen(browser, lambda: lag_of(browser, row)[0] == 0, what="the queue replicated, no lag")
        backups = [n.name for n in lagging_cluster.nodes if n is not primary]
        seen(  # the agents' view read: the set is named by node (the page's first read is ~1 s)
            browser,
            lambda: all(name in text(browser, "#in-sync-summary") for name in backups),
            what="the in-sync set named by node",
        )
        pid = backup.broker_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            persistent = pika.BasicProperties(delivery_mode=2)
            for _ in range(MESSAGES):
                channel.basic_publish("", QUEUE, BODY, persistent)
            connection.process_data_events(0)  # written out

            # shown lagging while still linked: stopped well under the 20 s silence after
            # which the primary gives it up (LAGGING once its lag held 3 samples in a row)
            def behind() -> tuple[int, str] | None:
                shown = lag_of(browser, row)
                lagging = " msgs behind" in text(browser, f"{row} td:nth-child(3)")
                return shown if shown[0] > 0 and lagging else None

            lag, lag_bytes = seen(
                browser,
                behind,
                HEARTBEAT,
                "the stopped backup's lag on the page",
            )
            marks = classes(browser, row)
            role = text(browser, f"{row} td:nth-child(3)")
            in_sync = text(browser, f"{row} td.in-sync")
            summary = text(browser, "#in-sync-summary")
            scale = text(browser, f"{row} .lag[data-queue='{QUEUE}'] .spark-scale")
            browser.save_screenshot(str(shots / "cluster-lagging-backup.png"))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    # what a reader sees: the primary's row marked, the backup's row LAGGING with its lag
    assert text(browser, "#members tbody tr.is-primary td:nth-child(3)") == "PRIMARY"
    assert f"127.0.0.1:{primary.port}" in text(browser, "#members tbody tr.is-primary")
    assert "lagging" in marks and "down" not in marks, marks
    assert role.startswith("backup, LAGGING ("), role
    assert " msgs behind" in role, role
    # in the in-sync set and lagging at once, said without contradiction: the table and
    # the header read the same set (the primary's), and say what a member means
    assert in_sync == "member (confirms wait for it)", in_sync
    assert summary.startswith("In-sync set: "), summary
    assert backup.name in summary.split("(")[0], summary
    assert "confirms wait for" in summary, summary
    assert "none committed" not in text(browser, "#primary-card")
    assert "In-sync set" in text(browser, "#members-legend")
    # the sparkline's scale: its max, in messages, at least the lag shown now
    scale_match = SCALE_TEXT.match(scale)
    assert scale_match, f"scale shown as {scale!r}"
    assert int(scale_match["messages"].replace(",", "")) >= lag
    assert 0 < lag <= MESSAGES
    assert lag_bytes.endswith(("B", "KiB", "MiB", "+")) and lag_bytes[0] != "0", lag_bytes
    # running again, it reads its backlog: no lag, no mark, the same broker (not restarted)
    seen(browser, lambda: lag_of(browser, row)[0] == 0, 20, "the lag back to 0")
    seen(
        browser,
        lambda: (
            "lagging" not in str(browser.find_element(By.CSS_SELECTOR, row).get_attribute("class"))
        ),
        10,
        "the backup no longer marked",
    )
    assert text(browser, f"{row} td:nth-child(3)") == "backup"
    assert backup.broker_pid() == pid
    lagging_cluster.wait_settled(timeout=30)
