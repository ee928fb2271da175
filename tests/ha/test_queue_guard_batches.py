"""A backup's acknowledgement of a whole batch (``QueueGuard.acknowledged_all``, the confirm
path's one call a batch) releases what acknowledging each of its positions would: the same
confirms settled, the same count held and in the backup's tally, whatever the positions
(held, already released, never guarded, repeated). In process, no sockets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.confirms import ConfirmHandle, PublisherConfirms
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.ha.queue_guard import HeldTally, QueueGuard

MESSAGES = 8
NO_PROPERTIES = bytes(2)  # property flags: none


def _guarded() -> tuple[QueueGuard, HeldTally, list[ConfirmHandle]]:
    """A queue of MESSAGES published messages (positions 1..MESSAGES), each held by one
    backup's guard; their confirm handles."""
    vhost = VirtualHost()
    queue = vhost.declare_queue("q")
    tally = HeldTally()
    guard = QueueGuard(queue, "backup-1", tally)
    confirms = PublisherConfirms()
    handles = []
    for i in range(MESSAGES):
        handle = confirms.publish()
        vhost.publish(
            vhost.exchange(""), Message("", "q", NO_PROPERTIES, b"%d" % i, confirm=handle)
        )
        handle.release()  # routed, as the channel does: the guard's hold is left
        handles.append(handle)
    return guard, tally, handles


batches = st.lists(st.lists(st.integers(0, MESSAGES + 2), max_size=MESSAGES + 2), max_size=4)


@settings(deadline=None, max_examples=200)
@given(batches=batches)
def test_a_batch_releases_what_its_positions_one_by_one_would(
    batches: list[list[int]],
) -> None:
    one_by_one, tally_each, handles_each = _guarded()
    whole, tally_whole, handles_whole = _guarded()
    assert tally_each.count == tally_whole.count == whole.held == MESSAGES
    for batch in batches:
        for position in batch:
            one_by_one.acknowledged(position)
        whole.acknowledged_all(batch)
        assert whole.held_positions() == one_by_one.held_positions()
        assert tally_whole.count == tally_each.count == whole.held
        assert [h.settled for h in handles_whole] == [h.settled for h in handles_each]
    released = {p for batch in batches for p in batch if 1 <= p <= MESSAGES}
    assert [h.settled for h in handles_whole] == [i + 1 in released for i in range(MESSAGES)]


def test_a_cancelled_guard_is_told_of_a_batch_and_changes_nothing() -> None:
    guard, tally, handles = _guarded()
    guard.cancel()  # the backup dropped: every confirm released
    assert tally.count == 0 and all(h.settled for h in handles)
    guard.acknowledged_all(range(1, MESSAGES + 1))  # a late acknowledgement: no double release
    assert tally.count == 0 and guard.held == 0
