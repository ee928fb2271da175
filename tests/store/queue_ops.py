"""The queue operations the store's property tests draw (consume, deliver, purge, and
delete-and-declare-again), applied to a durable queue bound to the fanout exchange "fan"."""

from __future__ import annotations

from broker.core.vhost import VirtualHost


def apply_queue_op(vhost: VirtualHost, op: str, name: str) -> None:
    """``consume`` takes the head with no-ack, ``deliver`` takes it unacked, ``purge``
    empties the queue, and anything else deletes it and declares and binds it again."""
    queue = vhost.queues[name]
    if op in ("consume", "deliver"):
        entry = queue.get()
        if entry is not None:
            queue.delivered(entry, no_ack=op == "consume")
    elif op == "purge":
        vhost.purge_queue(name)
    else:
        vhost.delete_queue(name)
        vhost.declare_queue(name, durable=True)
        vhost.bind(name, "fan", "")
