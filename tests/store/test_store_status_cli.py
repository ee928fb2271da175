"""``qpid-ha status`` says how the broker found its store at start: empty, clean, then
dirty after a kill (``at start``: not the store's state now)."""

from __future__ import annotations

import signal

from tests.cli.conftest import address, qpid_ha
from tests.store.store_brokers import StoreBrokers


def test_qpid_ha_status_shows_the_store_status(brokers: StoreBrokers) -> None:
    broker = brokers.start()
    b = address(broker, "")
    assert qpid_ha("-b", b, "status").stdout == "standalone\nstore: empty at start\n"
    assert qpid_ha("-b", b, "status", "--expect=standalone").stdout == "standalone\n"
    assert broker.stop(signal.SIGTERM) == 0
    broker = brokers.start()
    status = qpid_ha("-b", address(broker, ""), "status").stdout
    assert status == "standalone\nstore: clean at start\n"
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
    broker = brokers.start()
    status = qpid_ha("-b", address(broker, ""), "status").stdout
    assert status == "standalone\nstore: dirty at start\n"
