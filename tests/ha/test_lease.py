"""The cluster manager's lease on a primary: a primary whose lease runs out stops serving.

Real broker processes; the lease is granted through the management API as the agent does.
"""

from __future__ import annotations

import signal
import time

import pika
import pika.exceptions
import pytest

from common.polling import holds_for, poll_until
from tests.ha.cluster import Cluster, http

pytestmark = pytest.mark.timeout(120)


def lease(cluster: Cluster, i: int, body: dict[str, object]) -> dict[str, object]:
    return dict(http("POST", cluster.brokers[i].mgmt_port, "/api/ha/lease", body))


def test_lease_api_is_for_the_cluster_manager_and_a_primary_only(pair: Cluster) -> None:
    refused = lease(pair, 0, {"cluster_manager": True, "lease": 5})
    assert refused["http_status"] == 409 and "joining" in str(refused["reason"])
    assert pair.promote(0, epoch=1)["state"] in ("recovering", "active")
    assert lease(pair, 0, {"lease": 5})["http_status"] == 403
    for bad in (0, -1, "5", True, 1e9, None):
        answer = lease(pair, 0, {"cluster_manager": True, "lease": bad})
        assert answer["http_status"] == 400, bad
        assert "lease" in str(answer["reason"])
    assert lease(pair, 0, {"cluster_manager": True, "lease": 5, "x": 1})["http_status"] == 400
    granted = lease(pair, 0, {"cluster_manager": True, "lease": 5})
    assert granted["lease"] == 5.0
    remaining = pair.ha(0)["lease_remaining"]
    assert 4.0 < remaining <= 5.0
    assert pair.ha(1)["lease_remaining"] is None  # a backup has none


def test_a_primary_whose_lease_runs_out_fences_itself_and_confirms_nothing(
    pair: Cluster,
) -> None:
    promoted = pair.promote(0, epoch=1)
    assert promoted["state"] in ("recovering", "active")
    pair.wait_state(1, "ready")
    broker = pair.brokers[0]
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare("leased")
    channel.confirm_delivery()
    assert lease(pair, 0, {"cluster_manager": True, "lease": 1.5})["lease"] == 1.5
    channel.basic_publish("", "leased", b"within the lease")  # confirmed
    # Freeze the primary past its lease, as a paused node would be: when it runs again it
    # must fence itself before it confirms anything.
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGSTOP)
    time.sleep(2.0)  # the condition under test is the passing of time itself
    broker.proc.send_signal(signal.SIGCONT)
    with pytest.raises(pika.exceptions.AMQPError):
        channel.basic_publish("", "leased", b"after the lease")
    poll_until(lambda: not broker.alive(), 10)
    assert broker.proc.returncode == 3
    fenced = [e for e in broker.events() if e["event"] == "ha_fenced"]
    assert fenced and "lease ran out" in fenced[0]["reason"]


def test_a_primary_without_a_lease_is_not_fenced_by_time(pair: Cluster) -> None:
    """No cluster manager granted a lease (qpid-ha promote by hand): nothing expires."""
    pair.promote(0, epoch=1)
    pair.wait_state(1, "ready")

    def serving() -> bool:
        assert pair.state(0) in ("recovering", "active")
        return True

    holds_for(serving, 1.0, interval=0.1)
    assert pair.ha(0)["lease_remaining"] is None
