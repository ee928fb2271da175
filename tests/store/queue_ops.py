"""The queue operations the store's property tests draw (consume, deliver, purge, and
delete-and-declare-again), applied to a durable queue bound to the fanout exchange "fan"."""

from __future__ import annotations

from hypothesis import strategies as st

from broker.core.vhost import VirtualHost

#: One step of a random history on queues "a" and "b" and the fanout exchange "fan":
#: publishes (to one queue or fanned out), consumes, deliveries, purges, and queues deleted
#: and declared again.
history_step = st.one_of(
    st.tuples(st.just("publish"), st.sampled_from(["a", "b", "fan"])),
    st.tuples(st.just("consume"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("deliver"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("purge"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("recreate"), st.sampled_from(["a", "b"])),
)


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
