"""basic.deliver's ``redelivered`` across a fail-over (issue 14, item 2).

AMQP: ``redelivered`` means "this message may have been delivered before"; consumers use it
to decide whether to check for a duplicate, so a message the old primary delivered must come
back from the new primary with ``redelivered=true`` (a false negative breaks that promise).
A real pika consumer on the fail-over URL list takes messages without acknowledging them,
the primary is killed with SIGKILL, and the consumer gets them again from the new primary.
Messages published past the primary's delivery watermark and never delivered come back
unmarked (``broker/ha/delivery_watermark.py``).
"""

from __future__ import annotations

from pathlib import Path

import pika
import pika.exceptions

from broker.ha.delivery_watermark import WINDOW
from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect, connect_failover, publish, wait_members


def _take(channel: pika.adapters.blocking_connection.BlockingChannel, count: int) -> list[bytes]:
    """``count`` deliveries of queue ``work``, not acknowledged."""
    taken: list[bytes] = []
    for method, _props, body in channel.consume("work", inactivity_timeout=10):
        assert method is not None, f"only {len(taken)} of {count} deliveries"
        assert not method.redelivered
        taken.append(body)
        if len(taken) == count:
            return taken
    raise AssertionError("unreachable")


def test_unacknowledged_deliveries_come_back_redelivered(tmp_path: Path) -> None:
    total, prefetch = 40, 10
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("work", durable=True)
        connection.close()
        publish(cluster.ports[0], "work", [str(i).encode() for i in range(total)])
        poll_until(lambda: cluster.queue_messages(1, "work") == total, 10)

        # the consumer follows the fail-over URL list, as clients of a cluster do
        consumer = connect_failover(cluster.ports)
        channel = consumer.channel()
        channel.basic_qos(prefetch_count=prefetch)
        delivered = _take(channel, prefetch)  # received, never acknowledged
        assert delivered == [str(i).encode() for i in range(prefetch)]

        cluster.kill(0)
        try:  # the consumer sees its broker die
            consumer.process_data_events(time_limit=5)
            consumer.close()
        except (pika.exceptions.AMQPError, OSError):
            pass
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")

        again = connect_failover(cluster.ports)
        try:
            channel = again.channel()
            channel.basic_qos(prefetch_count=total)
            flags: dict[bytes, bool] = {}
            for method, _props, body in channel.consume("work", inactivity_timeout=10):
                assert method is not None, f"only {len(flags)} of {total} came back"
                flags[body] = bool(method.redelivered)
                channel.basic_ack(method.delivery_tag)
                if len(flags) == total:
                    break
            channel.cancel()
        finally:
            again.close()
        assert sorted(flags, key=int) == [str(i).encode() for i in range(total)]
        # every message the old primary delivered may have been delivered: marked so
        assert [body for body in delivered if not flags[body]] == []
    finally:
        cluster.stop()


def test_messages_past_the_delivery_watermark_come_back_unmarked(tmp_path: Path) -> None:
    prefetch, past = 10, 300
    total = WINDOW + past  # the primary announced one window: the last ones are past it
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("work")
        for i in range(total):
            channel.basic_publish("", "work", str(i).encode())
        connection.close()
        poll_until(lambda: cluster.queue_messages(1, "work") == total, 30)

        consumer = connect_failover(cluster.ports)
        channel = consumer.channel()
        channel.basic_qos(prefetch_count=prefetch)
        delivered = _take(channel, prefetch)
        cluster.kill(0)
        try:
            consumer.process_data_events(time_limit=5)
            consumer.close()
        except (pika.exceptions.AMQPError, OSError):
            pass
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")

        again = connect_failover(cluster.ports)
        try:
            channel = again.channel()
            channel.basic_qos(prefetch_count=1000)
            flags: list[bool] = []
            for method, _props, body in channel.consume(
                "work", auto_ack=True, inactivity_timeout=10
            ):
                assert method is not None, f"only {len(flags)} of {total} came back"
                assert int(body) == len(flags)  # in order
                flags.append(bool(method.redelivered))
                if len(flags) == total:
                    break
            channel.cancel()
        finally:
            again.close()
        assert delivered == [str(i).encode() for i in range(prefetch)]
        assert all(flags[:prefetch])  # delivered before the kill: marked
        # never delivered and past every announcement the old primary made: not marked
        assert not any(flags[WINDOW + prefetch :])
    finally:
        cluster.stop()


def test_a_second_failover_keeps_the_promise(tmp_path: Path) -> None:
    """A (primary) delivers some, dies; B, promoted, delivers more (C, expected, joined
    it); B dies; C, promoted, sends everything either of them delivered marked."""
    total, prefetch = 60, 10
    cluster = Cluster(tmp_path, 3).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        wait_members(cluster, 1, ready=2)  # broker 1 will expect broker 2
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("work", durable=True)
        connection.close()
        publish(cluster.ports[0], "work", [str(i).encode() for i in range(total)])
        poll_until(lambda: cluster.queue_messages(2, "work") == total, 10)

        first = connect_failover(cluster.ports)
        channel = first.channel()
        channel.basic_qos(prefetch_count=prefetch)
        delivered = _take(channel, prefetch)
        cluster.kill(0)
        _lose(first)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")  # broker 2 came back: nothing held for it any more

        second = connect_failover(cluster.ports)
        channel = second.channel()
        channel.basic_qos(prefetch_count=2 * prefetch)
        # the first ten again (redelivered), then ten more, never delivered before
        taken = _take_flagged(channel, 2 * prefetch)
        again = [body for body, _flag in taken]
        assert again[:prefetch] == delivered
        assert [flag for _body, flag in taken[:prefetch]] == [True] * prefetch
        delivered += again[prefetch:]
        cluster.kill(1)
        _lose(second)
        cluster.promote(2, epoch=3)
        cluster.wait_state(2, "active")

        flags = dict(drain_flags(cluster.ports, total))
        assert [body for body in delivered if not flags[body]] == []
    finally:
        cluster.stop()


def _lose(connection: pika.BlockingConnection) -> None:
    """The client sees its broker die."""
    try:
        connection.process_data_events(time_limit=5)
        connection.close()
    except (pika.exceptions.AMQPError, OSError):
        pass


def _take_flagged(
    channel: pika.adapters.blocking_connection.BlockingChannel, count: int
) -> list[tuple[bytes, bool]]:
    """``count`` deliveries of queue ``work`` with their redelivered flags, not acknowledged."""
    taken: list[tuple[bytes, bool]] = []
    for method, _props, body in channel.consume("work", inactivity_timeout=10):
        assert method is not None, f"only {len(taken)} of {count} deliveries"
        taken.append((body, bool(method.redelivered)))
        if len(taken) == count:
            return taken
    raise AssertionError("unreachable")


def drain_flags(ports: list[int], total: int) -> list[tuple[bytes, bool]]:
    """All ``total`` messages of ``work`` from the primary, with their redelivered flags."""
    connection = connect_failover(ports)
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=total)
        taken: list[tuple[bytes, bool]] = []
        for method, _props, body in channel.consume("work", auto_ack=True, inactivity_timeout=10):
            assert method is not None, f"only {len(taken)} of {total} came back"
            taken.append((body, bool(method.redelivered)))
            if len(taken) == total:
                break
        channel.cancel()
        return taken
    finally:
        connection.close()
