"""The consumer ring chooses as the scanning chooser did, on any sequence (hypothesis).

Consumers are modelled as the 0-9-1 channel's: a consumer prefetch, a channel-wide
(``global``) prefetch, channel.flow, no-ack consumers, priorities; the ring is told of
credit as the channel tells its queues (``Deliveries.settle`` and ``resume_deliveries``).
Each publish asks both the ring and the reference model (``tests/core/reference_chooser.py``,
the chooser the broker had) and they must name the same consumer.
"""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.core.consumer_ring import ConsumerRing
from tests.core.reference_chooser import QueueConsumers

#: Examples of the state machine (``CONSUMER_RING_EXAMPLES=3000`` for a long run by hand).
EXAMPLES = int(os.environ.get("CONSUMER_RING_EXAMPLES", "150"))


class _Channel:
    def __init__(self) -> None:
        self.flow = True
        self.prefetch_global = 0
        self.unacked = 0
        self.consumers: list[_Consumer] = []


class _Consumer:
    """A channel consumer's credit rules (``ChannelConsumer.can_deliver``)."""

    def __init__(
        self, tag: str, channel: _Channel, prefetch: int, priority: int, no_ack: bool
    ) -> None:
        self.tag = tag
        self.exclusive = False
        self.channel = channel
        self.prefetch = prefetch
        self.priority = priority
        self.no_ack = no_ack
        self.unacked = 0
        self.asked = 0

    def can_deliver(self) -> bool:
        self.asked += 1
        channel = self.channel
        if not channel.flow:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        limit = channel.prefetch_global
        return not (limit and channel.unacked >= limit)

    def deliver(self, queue: object, entry: object) -> None:
        raise AssertionError("not delivered through here")

    def __repr__(self) -> str:
        return self.tag


class RingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ring: ConsumerRing[_Consumer] = ConsumerRing(False)
        self.reference: QueueConsumers[_Consumer] = QueueConsumers(False)
        self.channels = [_Channel() for _ in range(3)]
        self.consumers: list[_Consumer] = []
        self.count = 0
        self.chosen: list[str] = []

    @initialize(single_active=st.booleans())
    def start(self, single_active: bool) -> None:
        self.ring = ConsumerRing(single_active)
        self.reference = QueueConsumers(single_active)

    # -- consumes and cancels --------------------------------------------------------
    @rule(
        channel=st.integers(0, 2),
        prefetch=st.sampled_from([0, 1, 2, 3]),
        priority=st.sampled_from([0, 0, 0, 1, 5, -1]),
        no_ack=st.booleans(),
    )
    def consume(self, channel: int, prefetch: int, priority: int, no_ack: bool) -> None:
        self.count += 1
        owner = self.channels[channel]
        consumer = _Consumer(f"c{self.count}", owner, prefetch, priority, no_ack)
        owner.consumers.append(consumer)
        self.consumers.append(consumer)
        self.ring.add(consumer)
        self.reference.add(consumer)

    @rule(index=st.integers(0, 1000))
    def cancel(self, index: int) -> None:
        if not self.consumers:
            return
        consumer = self.consumers.pop(index % len(self.consumers))
        consumer.channel.consumers.remove(consumer)
        assert self.ring.remove(consumer) == self.reference.remove(consumer)
        assert not self.ring.remove(consumer)
        # Its unacknowledged deliveries stay booked on the channel until settled (as a
        # cancelled consumer's do): the channel's count keeps them.

    # -- credit ------------------------------------------------------------------------
    def _credit_back(self, consumers: list[_Consumer]) -> None:
        for consumer in consumers:
            self.ring.credit_returned(consumer)

    @rule(index=st.integers(0, 1000), many=st.booleans())
    def ack(self, index: int, many: bool) -> None:
        """A basic.ack of one delivery of a consumer (``many``: all of them)."""
        held = [c for c in self.consumers if c.unacked]
        if not held:
            return
        consumer = held[index % len(held)]
        count = consumer.unacked if many else 1
        consumer.unacked -= count
        channel = consumer.channel
        channel.unacked -= count
        credited = list(channel.consumers) if channel.prefetch_global else [consumer]
        self._credit_back(credited)

    @rule(channel=st.integers(0, 2), limit=st.sampled_from([0, 1, 2, 4]))
    def qos_global(self, channel: int, limit: int) -> None:
        owner = self.channels[channel]
        owner.prefetch_global = limit
        self._credit_back(owner.consumers)

    @rule(channel=st.integers(0, 2), active=st.booleans())
    def flow(self, channel: int, active: bool) -> None:
        owner = self.channels[channel]
        owner.flow = active
        if active:
            self._credit_back(owner.consumers)

    @rule()
    def all_credit_returned(self) -> None:
        self.ring.credit_returned()

    # -- publishes ---------------------------------------------------------------------
    @rule(count=st.integers(1, 4))
    def publish(self, count: int) -> None:
        for _ in range(count):
            if self.ring.all_parked:  # Queue.enqueue then makes no choice at all: right so
                asked = [c.asked for c in self.consumers]
                assert self.ring.next_with_credit() is None
                assert [c.asked for c in self.consumers] == asked  # nobody was asked
                assert self.reference.next_with_credit() is None
                return
            expected = self.reference.next_with_credit()
            chosen = self.ring.next_with_credit()
            assert chosen is expected, (chosen, expected, self.chosen[-8:])
            if chosen is None:
                return
            self.chosen.append(chosen.tag)
            if not chosen.no_ack:
                chosen.unacked += 1
                chosen.channel.unacked += 1

    @invariant()
    def same_members(self) -> None:
        assert self.ring.members == self.reference.members
        assert self.ring.parked <= len(self.ring.members)


RingMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=60, deadline=None
)
test_the_ring_chooses_as_the_scanning_chooser = RingMachine.TestCase


def test_a_choice_asks_only_the_consumer_it_returns_when_it_has_credit() -> None:
    """1,000 consumers with credit: each choice asks one consumer, round robin."""
    channel = _Channel()
    ring: ConsumerRing[_Consumer] = ConsumerRing(False)
    consumers = [_Consumer(f"c{i}", channel, 0, 0, False) for i in range(1000)]
    for consumer in consumers:
        ring.add(consumer)
    chosen = [ring.next_with_credit() for _ in range(2000)]
    assert chosen == consumers + consumers
    assert sum(c.asked for c in consumers) == 2000


def test_consumers_without_credit_are_asked_once_until_credit_comes_back() -> None:
    """999 of 1,000 consumers at their prefetch: an ack of one asks that one only."""
    channel = _Channel()
    ring: ConsumerRing[_Consumer] = ConsumerRing(False)
    consumers = [_Consumer(f"c{i}", channel, 1, 0, False) for i in range(1000)]
    for consumer in consumers:
        ring.add(consumer)
    for consumer in consumers:
        assert ring.next_with_credit() is consumer
        consumer.unacked = 1
    assert ring.next_with_credit() is None
    assert ring.parked == 1000
    for consumer in consumers:
        consumer.asked = 0
    for _round in range(3):
        for consumer in consumers[::7]:
            consumer.unacked = 0
            ring.credit_returned(consumer)
            assert ring.next_with_credit() is consumer
            consumer.unacked = 1
            assert ring.next_with_credit() is None
    # each turn: the acknowledging consumer asked twice (chosen, then found full)
    assert sum(c.asked for c in consumers) == 3 * 2 * len(consumers[::7])


def test_priorities_keep_their_own_turn_and_a_cancel_passes_it_on() -> None:
    channel = _Channel()
    ring: ConsumerRing[_Consumer] = ConsumerRing(False)
    a, b, c = (_Consumer(t, channel, 0, 0, True) for t in "abc")
    high = _Consumer("h", channel, 1, 5, False)
    for consumer in (a, b, c):
        ring.add(consumer)
    assert ring.next_with_credit() is a
    ring.add(high)
    assert ring.members == [high, a, b, c]
    assert ring.next_with_credit() is high
    high.unacked = 1
    assert ring.next_with_credit() is b  # priority 0 kept its turn: after a
    ring.remove(c)  # the next one leaves: the turn goes on to a
    assert ring.next_with_credit() is a
    ring.remove(a)  # the last served leaves: the turn goes on to b
    assert ring.next_with_credit() is b


def test_a_round_ends_with_the_latest_subscribed() -> None:
    """As the scanning chooser: after the latest subscribed is served the turn goes back to
    the first; one who subscribed meanwhile waits for the next round."""
    channel = _Channel()
    ring: ConsumerRing[_Consumer] = ConsumerRing(False)
    a, b = (_Consumer(t, channel, 0, 0, True) for t in "ab")
    ring.add(a)
    assert ring.next_with_credit() is a
    ring.add(b)
    assert [ring.next_with_credit() for _ in range(3)] == [a, b, a]
