"""The fail-over's quiet (issue 25): housekeeping over every queue waits while a backup is
promoted and a moment after, never for longer than LONGEST; the console's sampler waits
for it. Sans-I/O for the rule; a real HaBroker's promotion and a real sampler task."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from broker.ha.promotion_quiet import AFTER, LONGEST, PromotionQuiet
from broker.ha.role_events import CaughtUp, LinkDown
from broker.management.console.live import LiveFeed
from common.log import get_logger
from common.polling import poll_until
from common.slices import SLICE
from tests.ha.test_refusal_before_login import ha_broker
from tests.management.support import FakeBroker


@given(st.floats(0, 1e6), st.floats(0, 100))
def test_the_quiet_lasts_the_promotion_and_a_moment_never_longer(start: float, took: float) -> None:
    quiet = PromotionQuiet()
    assert not quiet.holds(start)
    quiet.began(start)
    assert quiet.holds(start) and quiet.holds(start + min(took, LONGEST) * 0.999)
    quiet.ended(start + took)
    end = min(start + took + AFTER, start + LONGEST)  # a moment after, never past LONGEST
    assert quiet.holds(end - 1e-3) and not quiet.holds(end)
    assert not quiet.holds(start + LONGEST)


def test_a_backups_promotion_holds_the_quiet_an_active_brokers_does_not(tmp_path: Path) -> None:
    ha, clock, _ = ha_broker(tmp_path)
    assert not ha.quiet.holds(ha.now())
    asyncio.run(ha.promote(epoch=1))
    assert ha.quiet.holds(ha.now())
    clock.now += AFTER
    assert not ha.quiet.holds(ha.now())
    asyncio.run(ha.promote(epoch=1))  # already primary: nothing to wait for
    assert not ha.quiet.holds(ha.now())


def test_a_backups_lost_link_holds_the_quiet_until_it_caught_up(tmp_path: Path) -> None:
    """A member's side of a fail-over: from its link's loss (it links to the new primary,
    whose confirms on busy queues wait for its streams) until it caught up, at most
    LONGEST."""
    ha, clock, _ = ha_broker(tmp_path)
    assert ha.state.is_backup and not ha.quiet.holds(ha.now())
    ha.handle(LinkDown("connection lost"))
    assert ha.quiet.holds(ha.now())
    clock.now += LONGEST
    assert not ha.quiet.holds(ha.now())  # a catch-up that takes long: never longer
    ha.handle(LinkDown("connection lost"))
    ha.handle(CaughtUp())
    clock.now += AFTER
    assert not ha.quiet.holds(ha.now())
    ha.handle(CaughtUp())  # caught up without a lost link (its first): no quiet
    assert not ha.quiet.holds(ha.now())


class QuietHa:
    """What the sampler reads of an HA role: the quiet, and a status with no backups."""

    def __init__(self) -> None:
        self.quiet = PromotionQuiet()
        self.addresses: list[str] = []
        self.replicate_default = None

    def now(self) -> float:
        return time.monotonic()

    def status(self) -> dict[str, object]:
        return {"state": "active", "backups": []}


def test_the_console_sampler_waits_for_the_quiet() -> None:
    broker = FakeBroker()
    broker.vhost.declare_queue("q")
    ha = QuietHa()
    broker.ha = ha  # type: ignore[attr-defined]
    feed = LiveFeed(broker, get_logger("management"))

    async def main() -> None:
        ha.quiet.began(ha.now())  # a promotion in progress: no sample
        await feed.start(None)  # type: ignore[arg-type]
        try:
            await asyncio.sleep(0.3)
            assert feed.queue_history == {}
            ha.quiet.ended(ha.now() - LONGEST)  # over: the sampler goes on at once
            await asyncio.to_thread(poll_until, lambda: "q" in feed.queue_history, 10)
        finally:
            await feed.stop(None)  # type: ignore[arg-type]

    asyncio.run(main())


class BeginsAfterTheFirstLook(PromotionQuiet):
    """A promotion that begins just after the sampler looked (its sample under way)."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0
        self.over = False

    def holds(self, now: float) -> bool:
        self.looks += 1
        return self.looks > 1 and not self.over


def test_a_sample_begun_before_a_promotion_waits_it_out_between_slices() -> None:
    """At 10,000 queues a sample is ~20 slices; one under way when a promotion began went on
    slice after slice inside it (40-45 ms of CPU on the promotion's path, issue 25)."""
    broker = FakeBroker()
    for i in range(2 * SLICE + 1):
        broker.vhost.declare_queue(f"q{i}")
    ha = QuietHa()
    ha.quiet = quiet = BeginsAfterTheFirstLook()
    broker.ha = ha  # type: ignore[attr-defined]
    feed = LiveFeed(broker, get_logger("management"))

    async def main() -> None:
        await feed.start(None)  # type: ignore[arg-type]
        try:
            await asyncio.to_thread(poll_until, lambda: feed.queue_history, 10)
            await asyncio.sleep(0.3)  # the quiet holds: no slice after the first
            assert len(feed.queue_history) == SLICE
            quiet.over = True
            await asyncio.to_thread(
                poll_until, lambda: len(feed.queue_history) == 2 * SLICE + 1, 10
            )
        finally:
            await feed.stop(None)  # type: ignore[arg-type]

    asyncio.run(main())
