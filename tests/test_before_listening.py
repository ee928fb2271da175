"""``Broker.start``'s ``before_listening``: where ``qpidd`` runs the collector's full
collection (``broker.collector.tune_after_start``, 68-82 ms of CPU for a backup restarted
at load 16, logged as the longest steps of soak48 and soak49 once it ran after the start):
before any port of the broker is bound, so no client, link or management request waits
for it. A real ``Broker`` on real sockets."""

from __future__ import annotations

import asyncio
import socket

from broker.options import BrokerOptions
from broker.server import Broker
from common.polling import free_port


def _accepting(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_hook_runs_once_before_any_port_is_bound(tmp_path) -> None:
    amqp, mgmt = free_port(), free_port()
    options = BrokerOptions(
        port=amqp,
        interface="127.0.0.1",
        mgmt_port=mgmt,
        mgmt_interface="127.0.0.1",
        node_name="hook",
        data_dir=str(tmp_path / "data"),
    )
    seen: list[tuple[bool, bool, str]] = []

    async def main() -> None:
        broker = Broker(options)

        def before_listening() -> None:
            seen.append((_accepting(amqp), _accepting(mgmt), broker.store_status))

        await broker.start(before_listening=before_listening)
        try:
            assert _accepting(amqp) and _accepting(mgmt)
        finally:
            await broker.stop()

    asyncio.run(main())
    assert len(seen) == 1
    amqp_bound, mgmt_bound, store = seen[0]
    assert not amqp_bound and not mgmt_bound
    assert store != "none"  # the store was opened (and recovered) before it
