"""A backup dialling a primary that answers slowly waits for it (issue 25, soak38).

soak38: after a fail-over 2,000 clients reconnected to the new primary at a load of 15-18
on 2 cores; the restarted backups' link dials gave up after 1 s ("no open connection within
1.0 s", 35 times), each begun again from the start, and never joined. A dial now holds up
its round only for :func:`~broker.ha.backup_dial.answer_bound` and then lingers, up to
:data:`~broker.ha.backup_dial.DIAL_PATIENCE`, never abandoned and begun again
(:func:`broker.ha.redial.dial_loop`; the rule is tested without sockets in test_redial).

Here with real processes: the primary's whole process held by SIGSTOP for 2.5 s (its
host's kernel accepts the TCP connection; nothing answers it) while its backup restarts at
a link heartbeat of 1 s, so a 1 s answer bound.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from broker.ha.backup_dial import answer_bound
from common.polling import poll_until
from tests.ha.cluster import Cluster

#: How long the primary is held: longer than the backup's answer bound at heartbeat 1.
HOLD = 2.5


def test_a_backup_waits_for_a_held_primary_instead_of_giving_up_its_dial(
    tmp_path: Path,
) -> None:
    assert answer_bound(1.0) + 1.0 < HOLD
    cluster = Cluster(tmp_path, 2, "--link-heartbeat-interval=1").start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        cluster.wait_state(1, "ready", timeout=30)
        primary, backup = cluster.brokers
        backup.stop()
        restarted_at = len(backup.events())
        assert primary.proc is not None
        os.kill(primary.proc.pid, signal.SIGSTOP)
        try:
            backup.start()
            # the backup's first dial is under way once it has started its HA role
            poll_until(
                lambda: any(e.get("event") == "ha_started" for e in backup.events()[restarted_at:]),
                15,
            )
            time.sleep(HOLD)  # the fault: the primary's process held (not a synchronisation)
        finally:
            os.kill(primary.proc.pid, signal.SIGCONT)
        cluster.wait_state(1, "ready", timeout=30)
        failed = [
            event
            for event in backup.events()[restarted_at:]
            if event.get("event") == "ha_link_dial_failed"
            and event.get("address") == f"127.0.0.1:{primary.port}"
        ]
        assert failed == [], "the dial of the held primary was given up"
    finally:
        cluster.stop()
