"""An AMQP 1.0 transaction's discharge keeps the HA promise, with a real Qpid Proton client
against a real two-broker cluster (``tests/ha/cluster.py``, stores on disk):

- with the backup stopped (SIGSTOP), a discharge (commit) of three durable messages is
  applied on the primary (they are in its queue) but not answered: its ``accepted``
  waits for the in-sync backup, exactly as a 0-9-1 commit-ok;
- once the backup runs again (SIGCONT) the discharge is accepted;
- the primary is then SIGKILLed and the backup promoted: the committed messages are on the
  new primary.

The brokers' link outlasts the stopped backup (``--link-heartbeat-interval=30``,
``--ha-backup-timeout=60``, as ``tests/ha/test_tx_confirm_durable.py``)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect, queue_names

pytestmark = pytest.mark.timeout(90)


class TxCommit(MessagingHandler, TransactionHandler):
    """Declares a transaction, posts three durable messages in it, commits; ``posted``
    and ``committed`` are set as those happen (closes after the commit, or after 60 s)."""

    def __init__(self, port: int, queue: str) -> None:
        super().__init__()
        self.url = f"amqp://guest:guest@127.0.0.1:{port}"
        self.queue = queue
        self.posted = threading.Event()
        self.committed = threading.Event()
        self.outcome: str | None = None
        self.txn: Any = None
        self.sent = 0

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url, allowed_mechs="PLAIN")
        self.sender = event.container.create_sender(self.connection, self.queue)
        event.container.declare_transaction(self.connection, handler=self)
        self.timer = event.container.schedule(60, self)

    def on_timer_task(self, event: Any) -> None:
        self.connection.close()

    def on_transaction_declared(self, event: Any) -> None:
        self.txn = event.transaction
        self._send()

    def on_sendable(self, event: Any) -> None:
        self._send()

    def _send(self) -> None:
        while self.txn is not None and self.sender.credit and self.sent < 3:
            body = f"tx{self.sent}".encode()
            self.txn.send(self.sender, Message(body=body, durable=True, inferred=True))
            self.sent += 1
        if self.txn is not None and self.sent == 3:
            txn, self.txn = self.txn, None
            self.posted.set()
            txn.commit()

    def on_transaction_committed(self, event: Any) -> None:
        self.outcome = "committed"
        self.committed.set()
        self.timer.cancel()
        self.connection.close()

    def on_transaction_commit_failed(self, event: Any) -> None:
        self.outcome = "failed"
        self.committed.set()
        self.connection.close()


def test_a_discharge_is_accepted_only_once_the_backup_has_the_messages(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, "--link-heartbeat-interval=30", "--ha-backup-timeout=60").start(
        timeout=40
    )
    backup = cluster.brokers[1]
    stopped = False
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("txq", durable=True)
        connection.close()
        poll_until(lambda: "txq" in queue_names(cluster, 1), 15, "txq on the backup")
        assert backup.proc is not None
        os.kill(backup.proc.pid, signal.SIGSTOP)
        stopped = True
        handler = TxCommit(cluster.ports[0], "txq")
        client = threading.Thread(target=Container(handler).run, daemon=True)
        client.start()
        poll_until(lambda: cluster.queue_messages(0, "txq") == 3, 30, "the commit applied")
        assert handler.posted.is_set()
        # applied on the primary, not yet on the stopped backup: no answer
        assert not handler.committed.wait(1.0)
        os.kill(backup.proc.pid, signal.SIGCONT)
        stopped = False
        assert handler.committed.wait(30) and handler.outcome == "committed"
        client.join(10)
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        assert cluster.queue_messages(1, "txq") == 3
    finally:
        if stopped and backup.proc is not None:
            os.kill(backup.proc.pid, signal.SIGCONT)
        cluster.stop()
