"""The test cluster starts on new ports when one of its ports was taken before qpidd bound
it (another xdist worker's process can take a port ``free_port`` handed out)."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.ha.cluster import Cluster


def test_a_cluster_whose_port_was_taken_starts_on_new_ports(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, "--ha-backup-timeout=3")
    taken = cluster.ports[1]
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            cluster.start()
            assert taken not in cluster.ports
            url = ",".join(f"127.0.0.1:{port}" for port in cluster.ports)
            for broker in cluster.brokers:
                assert f"--ha-brokers-url={url}" in broker.args
                assert "--ha-backup-timeout=3" in broker.args
            cluster.promote(0, epoch=1)
            cluster.wait_state(0, "active")
            cluster.wait_state(1, "ready")
        finally:
            cluster.stop()
