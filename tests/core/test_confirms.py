"""Publisher confirms: every tag answered exactly once, correctly, with the fewest replies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from broker.core.confirms import ConfirmHandle, ConfirmReply, PublisherConfirms


class ClientView:
    """What a publisher sees: outstanding tags, answered as the replies arrive.

    ``settled`` maps a tag the broker settled to whether it was an ack; a reply may
    answer only settled tags, each exactly once, with the matching ack/nack.
    """

    def __init__(self) -> None:
        self.outstanding: set[int] = set()
        self.settled: dict[int, bool] = {}
        self.answered: dict[int, bool] = {}

    def published(self, tag: int) -> None:
        self.outstanding.add(tag)

    def receive(self, replies: list[ConfirmReply]) -> None:
        for reply in replies:
            assert reply.delivery_tag in self.outstanding, f"{reply} answers no outstanding tag"
            if reply.multiple:
                covered = sorted(t for t in self.outstanding if t <= reply.delivery_tag)
                # a multiple reply is only used when it answers more than one tag
                assert len(covered) >= 2, f"{reply} covers only {covered}"
            else:
                covered = [reply.delivery_tag]
            for tag in covered:
                assert tag in self.settled, f"{reply} answers unsettled tag {tag}"
                assert self.settled[tag] == reply.ack, f"{reply} answers tag {tag} wrongly"
                assert tag not in self.answered
                self.answered[tag] = reply.ack
                self.outstanding.discard(tag)


def test_in_order_releases_give_one_multiple_ack() -> None:
    confirms = PublisherConfirms()
    handles = [confirms.publish() for _ in range(5)]
    assert [h.seq for h in handles] == [1, 2, 3, 4, 5]
    assert confirms.outstanding == 5
    for handle in handles:
        handle.release()
    assert confirms.outstanding == 0
    assert confirms.has_replies
    assert confirms.take_replies() == [ConfirmReply(5, True, True)]
    assert not confirms.has_replies
    assert confirms.take_replies() == []


def test_single_publish_gets_single_ack() -> None:
    confirms = PublisherConfirms()
    confirms.publish().release()
    assert confirms.take_replies() == [ConfirmReply(1, False, True)]


def test_runs_since_last_take_are_coalesced() -> None:
    confirms = PublisherConfirms()
    handles = [confirms.publish() for _ in range(6)]
    for handle in handles[:3]:
        handle.release()
    assert confirms.take_replies() == [ConfirmReply(3, True, True)]
    handles[3].release()
    assert confirms.take_replies() == [ConfirmReply(4, False, True)]
    handles[4].release()
    handles[5].release()
    assert confirms.take_replies() == [ConfirmReply(6, True, True)]


def test_out_of_order_release_answers_singly_then_never_again() -> None:
    confirms = PublisherConfirms()
    h1, h2, h3 = (confirms.publish() for _ in range(3))
    h2.release()
    assert confirms.take_replies() == [ConfirmReply(2, False, True)]
    h1.release()
    h3.release()
    replies = confirms.take_replies()
    assert sorted(r.delivery_tag for r in replies) == [1, 3]
    assert all(r.ack and not r.multiple for r in replies)


def test_nack_is_never_covered_by_a_multiple_ack() -> None:
    confirms = PublisherConfirms()
    handles = [confirms.publish() for _ in range(3)]
    handles[0].release()
    handles[1].release(ok=False)
    handles[2].release()
    assert confirms.take_replies() == [
        ConfirmReply(1, False, True),
        ConfirmReply(2, False, False),
        ConfirmReply(3, False, True),
    ]


def test_extra_hold_delays_the_confirm_and_any_nack_wins() -> None:
    confirms = PublisherConfirms()
    handle = confirms.publish()
    handle.hold()
    handle.release()
    assert not handle.settled
    assert confirms.take_replies() == []
    assert confirms.outstanding == 1
    handle.hold()
    handle.release(ok=False)
    handle.release()
    assert handle.settled
    assert confirms.take_replies() == [ConfirmReply(1, False, False)]


def test_misuse_raises() -> None:
    confirms = PublisherConfirms()
    handle = confirms.publish()
    handle.release()
    with pytest.raises(RuntimeError):
        handle.release()
    with pytest.raises(RuntimeError):
        handle.hold()


def test_on_settled_called_per_settlement() -> None:
    calls: list[int] = []
    confirms = PublisherConfirms(on_settled=lambda: calls.append(confirms.outstanding))
    h1, h2 = confirms.publish(), confirms.publish()
    h2.release()
    h1.release()
    assert calls == [1, 0]


def test_close_drops_later_settlements() -> None:
    confirms = PublisherConfirms()
    h1, h2 = confirms.publish(), confirms.publish()
    h1.release()
    confirms.close()
    h2.release()
    assert confirms.take_replies() == [ConfirmReply(1, False, True)]
    assert confirms.take_replies() == []


# One operation of a random schedule: (kind, index into the unsettled handles).
OPS = st.lists(
    st.tuples(
        st.sampled_from(["release", "release", "release", "release-lowest", "hold", "take"]),
        st.integers(min_value=0, max_value=1_000),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(count=st.integers(min_value=1, max_value=30), ops=OPS, nack_ratio=st.integers(0, 4))
def test_random_release_orders(count: int, ops: list[tuple[str, int]], nack_ratio: int) -> None:
    """Any release order, nacks (``nack_ratio`` in 5) and extra holds, takes at any point."""
    confirms = PublisherConfirms()
    client = ClientView()
    handles: list[ConfirmHandle] = []
    nacked: set[int] = set()
    for _ in range(count):
        handle = confirms.publish()
        handles.append(handle)
        client.published(handle.seq)

    def release(handle: ConfirmHandle, ok: bool) -> None:
        if not ok:
            nacked.add(handle.seq)
        handle.release(ok)
        if handle.settled:
            client.settled[handle.seq] = handle.seq not in nacked

    for kind, index in ops:
        pending = [h for h in handles if not h.settled]
        if kind == "take" or not pending:
            client.receive(confirms.take_replies())
            continue
        handle = pending[0] if kind == "release-lowest" else pending[index % len(pending)]
        if kind == "hold":
            handle.hold()
        else:
            release(handle, index % 5 >= nack_ratio)
        assert confirms.outstanding == sum(1 for h in handles if not h.settled)
    # Settle whatever is left, then everything must have been answered exactly once.
    for handle in handles:
        while not handle.settled:
            release(handle, True)
    client.receive(confirms.take_replies())
    assert not client.outstanding
    assert client.answered == {h.seq: h.seq not in nacked for h in handles}
    assert confirms.take_replies() == []


class ConfirmsMachine(RuleBasedStateMachine):
    """Publishes, holds, releases and takes in any interleaving."""

    def __init__(self) -> None:
        super().__init__()
        self.confirms = PublisherConfirms()
        self.client = ClientView()
        self.handles: list[ConfirmHandle] = []
        self.holds: dict[int, int] = {}
        self.nacked: set[int] = set()

    def _pending(self) -> list[ConfirmHandle]:
        return [h for h in self.handles if self.holds[h.seq] > 0]

    @rule(n=st.integers(min_value=1, max_value=4))
    def publish(self, n: int) -> None:
        for _ in range(n):
            handle = self.confirms.publish()
            assert handle.seq == len(self.handles) + 1
            self.handles.append(handle)
            self.holds[handle.seq] = 1
            self.client.published(handle.seq)

    @precondition(lambda self: self._pending())
    @rule(index=st.integers(min_value=0, max_value=1_000))
    def hold(self, index: int) -> None:
        pending = self._pending()
        handle = pending[index % len(pending)]
        handle.hold()
        self.holds[handle.seq] += 1

    @precondition(lambda self: self._pending())
    @rule(index=st.integers(min_value=0, max_value=1_000), ok=st.booleans(), low=st.booleans())
    def release(self, index: int, ok: bool, low: bool) -> None:
        pending = self._pending()
        # Bias towards the lowest pending tag so that contiguous runs form often.
        handle = pending[0] if low else pending[index % len(pending)]
        if not ok:
            self.nacked.add(handle.seq)
        handle.release(ok)
        self.holds[handle.seq] -= 1
        assert handle.settled == (self.holds[handle.seq] == 0)
        if handle.settled:
            self.client.settled[handle.seq] = handle.seq not in self.nacked

    @rule()
    def take(self) -> None:
        unanswered_settled = set(self.client.settled) - set(self.client.answered)
        assert self.confirms.has_replies == bool(unanswered_settled)
        self.client.receive(self.confirms.take_replies())
        # take_replies answers everything settled so far
        assert set(self.client.answered) == set(self.client.settled)
        assert not self.confirms.has_replies

    @invariant()
    def outstanding_counts_unsettled(self) -> None:
        assert self.confirms.outstanding == len(self._pending())

    def teardown(self) -> None:
        for handle in self.handles:
            while self.holds[handle.seq] > 0:
                handle.release()
                self.holds[handle.seq] -= 1
            self.client.settled.setdefault(handle.seq, handle.seq not in self.nacked)
        self.client.receive(self.confirms.take_replies())
        assert not self.client.outstanding
        assert self.client.answered == {h.seq: h.seq not in self.nacked for h in self.handles}


TestConfirmsMachine = ConfirmsMachine.TestCase
TestConfirmsMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


class _Message:
    confirm: ConfirmHandle | None = None


def test_a_message_keeps_its_handle_exactly_until_it_is_settled() -> None:
    confirms = PublisherConfirms()
    held, at_once = _Message(), _Message()
    first = confirms.publish(held)
    second = confirms.publish(at_once)
    assert held.confirm is first and at_once.confirm is second
    first.hold()  # the store's, or a guard's
    first.release()  # routing done
    second.release()  # routing done, nothing else held it
    assert held.confirm is first and at_once.confirm is None
    first.release(ok=False)
    assert held.confirm is None
    assert confirms.take_replies() == [ConfirmReply(1, False, False), ConfirmReply(2, False, True)]
