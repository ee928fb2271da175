"""ha-queue-replication: a copy of one queue holds back nothing of the source's other queues.

A replica is guarded on the queues it copies only: publisher confirms and deliveries of
another queue on the source go on at once (before, every queue's confirms waited for a
replica that never subscribes to it); the copied queue's deliveries wait for the copy's
acknowledgement of the delivery watermark (docs/ha-design.md), and go on.
"""

from __future__ import annotations

from pathlib import Path

import pika

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.ha.cluster import http
from tests.ha.test_remote_queue_replication import ARGS, replicate


def test_other_queues_of_the_source_confirm_and_deliver_at_once(tmp_path: Path) -> None:
    source = BrokerProcess(tmp_path / "source", args=ARGS).start()
    copy = BrokerProcess(tmp_path / "copy", args=ARGS).start()
    try:
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", source.port, socket_timeout=5)
        )
        channel = connection.channel()
        channel.queue_declare("orders")
        channel.queue_declare("other")
        replicate(copy, "orders", source)
        poll_until(lambda: http("GET", copy.mgmt_port, "/api/ha/replications")[0]["caught_up"], 10)

        channel.confirm_delivery()  # a confirm held back would block basic_publish
        channel.basic_publish("", "other", b"x", mandatory=True)
        method, _props, body = channel.basic_get("other", auto_ack=True)
        assert method is not None and body == b"x"

        channel.basic_publish("", "orders", b"o", mandatory=True)  # confirmed: the copy has it
        method, _props, body = channel.basic_get("orders", auto_ack=True)
        assert method is not None and body == b"o" and not method.redelivered
        connection.close()
    finally:
        copy.stop()
        source.stop()
