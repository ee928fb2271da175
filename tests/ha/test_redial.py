"""broker.ha.redial: the backoff policy without a clock, the dial loop without sockets.

The loop is checked against the two loops it replaced (the backup link's and the remote
queue replication's), written out here as reference models, on generated dial outcomes.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.backup import LINK_RETRY_MIN, refuse_before_login
from broker.ha.dial_failure import NotPrimary
from broker.ha.names import PROMOTING_PROPERTY, STATUS_PROPERTY
from broker.ha.redial import Backoff, DialRefused, dial_loop
from common.url import Address

A = Address("a", 1)
B = Address("b", 2)
C = Address("c", 3)

#: No deadline: each example runs event loops, and the suite shares two busy cores.
no_deadline = settings(deadline=None)
bounds = st.floats(min_value=0.0, max_value=1000.0, allow_nan=False, allow_infinity=False)
ops = st.lists(st.sampled_from(["next", "succeeded"]), max_size=60)


# -- Backoff: the rule ---------------------------------------------------------------------
@no_deadline
@given(bounds, bounds, ops)
def test_delays_stay_within_the_bounds_and_reset_after_success(
    low: float, high: float, script: list[str]
) -> None:
    minimum, maximum = min(low, high), max(low, high)
    backoff = Backoff(minimum, maximum)
    previous: float | None = None
    just_succeeded = False
    for op in script:
        if op == "succeeded":
            backoff.succeeded()
            just_succeeded = True
            previous = None
            continue
        delay = backoff.next_delay()
        assert minimum <= delay <= maximum
        if just_succeeded:
            assert delay == minimum
        elif previous is None:
            assert delay == maximum  # never succeeded yet
        else:
            assert delay == min(previous * 2, maximum)
        previous = delay
        just_succeeded = False


@no_deadline
@given(bounds, bounds, ops)
def test_the_cap_wins_when_it_is_below_the_minimum(
    low: float, high: float, script: list[str]
) -> None:
    minimum, maximum = max(low, high), min(low, high)
    backoff = Backoff(minimum, maximum)
    for op in script:
        if op == "succeeded":
            backoff.succeeded()
        else:
            assert backoff.next_delay() == maximum


def test_doubling_from_the_minimum_up_to_the_maximum() -> None:
    backoff = Backoff(0.01, 0.1)
    assert backoff.next_delay() == 0.1
    backoff.succeeded()
    assert [backoff.next_delay() for _ in range(6)] == [0.01, 0.02, 0.04, 0.08, 0.1, 0.1]


def test_equal_bounds_give_a_constant_pause() -> None:
    backoff = Backoff(2.0, 2.0)
    delays = [backoff.next_delay() for _ in range(3)]
    backoff.succeeded()
    delays += [backoff.next_delay() for _ in range(3)]
    assert delays == [2.0] * 6


@pytest.mark.parametrize(("minimum", "maximum"), [(-1.0, 1.0), (0.1, -1.0), (float("nan"), 1.0)])
def test_bounds_must_not_be_negative(minimum: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="backoff bounds"):
        Backoff(minimum, maximum)


# -- the steady window after a link's loss (issue 26 item 5) -------------------------------
def test_the_pause_is_the_minimum_for_the_steady_window_then_doubles() -> None:
    backoff = Backoff(0.01, 0.1, steady=2.0)
    assert backoff.next_delay(0.0) == 0.1  # no link yet: the maintenance interval
    backoff.succeeded(100.0)  # the link's session ended at 100 s: a fail-over is under way
    assert [backoff.next_delay(t) for t in (100.0, 100.5, 101.0, 101.999)] == [0.01] * 4
    assert [backoff.next_delay(t) for t in (102.0, 102.1, 102.2, 102.3, 102.4, 102.5)] == [
        0.01,
        0.02,
        0.04,
        0.08,
        0.1,
        0.1,
    ]
    backoff.succeeded(200.0)  # the next link's loss: a new window
    assert backoff.next_delay(201.0) == 0.01
    assert backoff.soon() == 0.01


def test_the_cap_wins_in_the_steady_window_too() -> None:
    backoff = Backoff(0.05, 0.02, steady=2.0)
    backoff.succeeded(0.0)
    assert backoff.next_delay(1.0) == 0.02


def test_the_steady_window_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="backoff bounds"):
        Backoff(0.01, 0.1, steady=-1.0)


steps = st.lists(
    st.tuples(
        st.sampled_from(["next", "succeeded"]),
        st.floats(min_value=0.0, max_value=5.0, allow_nan=False, allow_infinity=False),
    ),
    max_size=60,
)


@no_deadline
@given(bounds, bounds, st.floats(min_value=0.0, max_value=10.0, allow_nan=False), steps)
def test_in_the_window_the_minimum_after_it_the_doubling_and_always_the_bounds(
    low: float, high: float, steady: float, script: list[tuple[str, float]]
) -> None:
    """The rule on a clock that only moves forward: within ``steady`` seconds of the last
    success each pause is the minimum (capped); otherwise the pauses are as without a
    window (the doubling resumes from the minimum where the window ends)."""
    minimum, maximum = min(low, high), max(low, high)
    backoff = Backoff(minimum, maximum, steady=steady)
    plain = Backoff(minimum, maximum)  # the same rule without a window
    now = 0.0
    since: float | None = None
    for op, step in script:
        now += step
        if op == "succeeded":
            backoff.succeeded(now)
            plain.succeeded()
            since = now
            continue
        delay = backoff.next_delay(now)
        assert minimum <= delay <= maximum
        if since is not None and now < since + steady:
            assert delay == minimum
        else:
            assert delay == plain.next_delay()


def test_after_a_link_the_loop_redials_at_the_minimum_for_the_window() -> None:
    """A member whose primary's link dropped dials every ``minimum`` while the steady
    window lasts (the broker about to be promoted refusing it), then doubling."""
    now = [0.0]
    pauses: list[float] = []
    linked = [True]  # the first dial links; every later dial is refused

    async def dial(address: Address) -> str:
        if linked.pop(0) if linked else False:
            return "conn"
        raise NotPrimary("ready")

    async def session(connection: str, address: Address) -> None:
        now[0] += 4.0  # the link lasted 4 s, then dropped

    async def sleep(delay: float) -> None:
        pauses.append(delay)
        now[0] += 0.125  # each round, its pause and its dials, takes 125 ms
        if len(pauses) == 22:
            raise Stop

    run(
        dial_loop(
            [A], dial, session, Backoff(0.01, 0.1, steady=2.0), sleep=sleep, clock=lambda: now[0]
        )
    )
    # 2 s of rounds of 0.125 s each at the minimum, then the doubling up to the cap
    assert pauses[:16] == [0.01] * 16
    assert pauses[16:] == [0.01, 0.02, 0.04, 0.08, 0.1, 0.1]


# -- dial_loop with fakes ------------------------------------------------------------------
class Stop(Exception):
    """Raised by the fake sleep to end a loop after enough rounds."""


class Fake:
    """Scripted dials (True: the dial succeeds) and a trace of what the loop did."""

    def __init__(self, outcomes: Sequence[bool], rounds: int) -> None:
        self.outcomes = list(outcomes)
        self.rounds = rounds
        self.trace: list[tuple[str, object]] = []

    def next_outcome(self) -> bool:
        return self.outcomes.pop(0) if self.outcomes else False

    async def dial(self, address: Address) -> str:
        if self.next_outcome():
            return f"conn-{address.host}"
        raise OSError(f"{address.host} refused")

    async def dial_or_none(self, address: Address) -> str | None:
        return f"conn-{address.host}" if self.next_outcome() else None

    async def session(self, connection: str, address: Address) -> None:
        self.trace.append(("session", connection))

    def failed(self, address: Address, reason: Exception) -> None:
        self.trace.append(("failed", address.host))

    async def sleep(self, delay: float) -> None:
        self.trace.append(("sleep", delay))
        if sum(1 for kind, _ in self.trace if kind == "sleep") >= self.rounds:
            raise Stop


def run(coro: Awaitable[object]) -> None:
    async def main() -> None:
        with pytest.raises(Stop):
            await coro

    asyncio.run(main())


def test_a_round_dials_every_address_and_hands_each_failure_to_the_callback() -> None:
    fake = Fake([False, True, True, False], rounds=2)
    run(
        dial_loop(
            [A, B],
            fake.dial,
            fake.session,
            Backoff(0.01, 1.0),
            dial_errors=(OSError,),
            on_dial_failed=fake.failed,
            sleep=fake.sleep,
        )
    )
    assert fake.trace == [
        ("failed", "a"),
        ("session", "conn-b"),
        ("sleep", 0.01),
        ("session", "conn-a"),
        ("failed", "b"),
        ("sleep", 0.01),
    ]


def test_a_refusal_is_a_failed_dial_with_its_reason() -> None:
    reasons: list[tuple[Address, Exception]] = []

    async def refuse(address: Address) -> str:
        raise DialRefused("not an HA primary")

    async def never(connection: str, address: Address) -> None:
        raise AssertionError("no session without a link")

    async def stop(delay: float) -> None:
        raise Stop

    run(
        dial_loop(
            [A],
            refuse,
            never,
            Backoff(1.0, 1.0),
            on_dial_failed=lambda address, reason: reasons.append((address, reason)),
            sleep=stop,
        )
    )
    assert [(address, str(reason)) for address, reason in reasons] == [(A, "not an HA primary")]


def test_a_peer_promoted_during_the_dial_is_dialled_again_at_once_once() -> None:
    """A backup's state in connection.start yet the link admitted (issue 26): the peer was
    promoted during the handshake. It is dialled again before the next address, once."""
    dials: list[str] = []

    async def dial(address: Address) -> str:
        dials.append(address.host)
        promoted = NotPrimary("ready", promoted=True)
        if address is A and dials.count("a") in (1, 3, 4):
            raise promoted  # the 1st: at once again; the 3rd and 4th: once, not for ever
        if address is B:
            raise NotPrimary("ready")  # a plain backup: the round goes on
        return "conn-a"

    sessions: list[str] = []

    async def session(connection: str, address: Address) -> None:
        sessions.append(connection)

    pauses = 0

    async def sleep(delay: float) -> None:
        nonlocal pauses
        pauses += 1
        if pauses == 2:
            raise Stop

    run(dial_loop([A, B], dial, session, Backoff(0.01, 1.0), sleep=sleep))
    assert dials == ["a", "a", "b", "a", "a", "b"]
    assert sessions == ["conn-a"]  # the first round's second dial


def test_other_errors_end_the_loop() -> None:
    fake = Fake([], rounds=99)

    async def session_fails(connection: str, address: Address) -> None:
        raise RuntimeError("bug")

    async def main() -> None:
        with pytest.raises(OSError):
            await dial_loop([A], fake.dial, fake.session, Backoff(1, 1), sleep=fake.sleep)
        fake.outcomes = [True]
        with pytest.raises(RuntimeError, match="bug"):
            await dial_loop([A], fake.dial, session_fails, Backoff(1, 1), sleep=fake.sleep)

    asyncio.run(main())


def test_cancelling_the_task_stops_the_loop() -> None:
    async def main() -> None:
        fake = Fake([], rounds=10**9)

        async def dial(address: Address) -> str:
            raise OSError("down")

        task = asyncio.create_task(
            dial_loop([A], dial, fake.session, Backoff(0.0, 0.001), dial_errors=(OSError,))
        )
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


# -- the loops it replaced, as reference models --------------------------------------------
async def backup_link_loop_before(
    addresses: Sequence[Address],
    dial: Callable[[Address], Awaitable[str | None]],
    session: Callable[[str, Address], Awaitable[None]],
    maintenance_interval: float,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """BackupLink._run before broker.ha.redial (a failed dial returned None)."""
    delay = maintenance_interval
    while True:
        for address in addresses:
            client = await dial(address)
            if client is None:
                continue
            await session(client, address)
            delay = LINK_RETRY_MIN
        await sleep(min(delay, maintenance_interval))
        delay = min(delay * 2, maintenance_interval)


async def queue_replication_loop_before(
    address: Address,
    dial: Callable[[Address], Awaitable[str]],
    session: Callable[[str, Address], Awaitable[None]],
    on_down: Callable[[Address, Exception], None],
    maintenance_interval: float,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """QueueReplication._run before broker.ha.redial (dial and session in one try)."""
    while True:
        try:
            client = await dial(address)
            await session(client, address)
        except OSError as exc:
            on_down(address, exc)
        await sleep(maintenance_interval)


intervals = st.sampled_from([0.001, 0.005, 0.01, 0.1, 0.3, 2.0, 65535.0])
outcomes = st.lists(st.booleans(), max_size=40)


@no_deadline
@given(outcomes, intervals, st.integers(min_value=1, max_value=3))
def test_same_dials_sessions_and_pauses_as_the_backup_link_before(
    script: list[bool], interval: float, n_addresses: int
) -> None:
    addresses = [Address(f"h{i}", i + 1) for i in range(n_addresses)]
    before, after = Fake(script, rounds=15), Fake(script, rounds=15)
    run(
        backup_link_loop_before(
            addresses, before.dial_or_none, before.session, interval, before.sleep
        )
    )
    run(
        dial_loop(
            addresses,
            after.dial,
            after.session,
            Backoff(LINK_RETRY_MIN, interval),
            dial_errors=(OSError,),
            sleep=after.sleep,
        )
    )
    assert after.trace == before.trace


@no_deadline
@given(outcomes, intervals)
def test_same_dials_sessions_and_pauses_as_the_queue_replication_before(
    script: list[bool], interval: float
) -> None:
    before, after = Fake(script, rounds=15), Fake(script, rounds=15)
    run(
        queue_replication_loop_before(
            A, before.dial, before.session, before.failed, interval, before.sleep
        )
    )
    run(
        dial_loop(
            [A],
            after.dial,
            after.session,
            Backoff(interval, interval),
            dial_errors=(OSError,),
            on_dial_failed=after.failed,
            sleep=after.sleep,
        )
    )
    assert after.trace == before.trace


def test_a_session_that_gives_up_does_not_reset_the_backoff() -> None:
    """A link that comes up and fails at once (a replication error: the session returns
    False) is redialled ever more slowly, up to the cap; a session that ends otherwise
    (the link dropped) resets the pause to the minimum (issue 24)."""
    fake = Fake([True] * 12, rounds=9)
    results = [None, False, False, False, False, False, False, True, False]

    async def session(connection: str, address: Address) -> bool | None:
        fake.trace.append(("session", connection))
        return results.pop(0)

    run(dial_loop([A], fake.dial, session, Backoff(0.01, 0.08), sleep=fake.sleep))
    sleeps = [delay for kind, delay in fake.trace if kind == "sleep"]
    assert sleeps == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08, 0.08, 0.01, 0.02]
    # so a link failing at once for a second is redialled about 1 / cap times, not 100


# -- a peer whose promotion is under way ---------------------------------------------------
def test_soon_is_the_minimum_capped_and_leaves_the_doubling() -> None:
    backoff = Backoff(0.01, 1.0)
    backoff.succeeded()
    assert [backoff.next_delay(), backoff.next_delay()] == [0.01, 0.02]
    assert backoff.soon() == 0.01
    assert backoff.soon() == 0.01  # not doubled
    assert backoff.next_delay() == 0.04  # the doubling goes on where it was
    assert Backoff(0.5, 1.0).soon() == 0.5
    assert Backoff(0.05, 0.02).soon() == 0.02  # the cap wins


def test_a_round_refused_by_a_promoting_peer_pauses_soon_without_doubling() -> None:
    """A member dialling the backup being promoted (issue 25): each round refused by it
    (``qpid.ha-promoting``) pauses the shortest time, the others double as before."""
    answers = ["promoting", "promoting", "promoting", "ready", "ready"]
    pauses: list[float] = []

    async def dial(address: Address) -> str:
        state = answers.pop(0)
        raise NotPrimary("ready", promoting=state == "promoting")

    async def never(connection: str, address: Address) -> None:
        raise AssertionError("no session without a link")

    async def sleep(delay: float) -> None:
        pauses.append(delay)
        if not answers:
            raise Stop

    backoff = Backoff(0.01, 1.0)
    backoff.succeeded()  # a link was up: the doubling starts at the minimum
    run(dial_loop([A], dial, never, backoff, sleep=sleep))
    assert pauses == [0.01, 0.01, 0.01, 0.01, 0.02]


def test_soon_in_any_dial_of_a_round_makes_its_pause_soon() -> None:
    pauses: list[float] = []

    async def dial(address: Address) -> str:
        if address is A:
            raise NotPrimary("ready", promoting=True)
        raise OSError("b refused")

    async def sleep(delay: float) -> None:
        pauses.append(delay)
        if len(pauses) == 2:
            raise Stop

    run(
        dial_loop(
            [A, B],
            dial,
            lambda c, a: asyncio.sleep(0),
            Backoff(0.01, 1.0),
            dial_errors=(OSError,),
            sleep=sleep,
        )
    )
    assert pauses == [0.01, 0.01]


def test_the_round_after_a_promoting_peer_dials_it_first() -> None:
    """A dead primary's address and this broker's own come before the promoted backup in
    ``ha-brokers-url``: once it said its promotion is under way, the next round dials it
    first, the others after it, in their order."""
    dials: list[str] = []
    promoting = [True, True, False]  # B's answers: promoting twice, then the primary

    async def dial(address: Address) -> str:
        dials.append(address.host)
        if address is B:
            if promoting.pop(0):
                raise NotPrimary("ready", promoting=True)
            return "conn-b"
        raise OSError(f"{address.host} refused")

    sessions: list[str] = []

    async def session(connection: str, address: Address) -> None:
        sessions.append(connection)

    async def sleep(delay: float) -> None:
        if sessions:
            raise Stop

    run(
        dial_loop([A, B, C], dial, session, Backoff(0.01, 1.0), dial_errors=(OSError,), sleep=sleep)
    )
    # the third round links to B first; the round then goes on, as after any session
    assert dials == ["a", "b", "c", "b", "a", "c", "b", "a", "c"]
    assert sessions == ["conn-b"]


def test_a_promoting_peer_is_refused_at_connection_start_saying_soon() -> None:
    """connection.start says ``qpid.ha-promoting``: the dial ends there, before the login,
    saying ``soon`` (the next round comes after the shortest pause, that peer first); a
    backup not promoting is refused there too, not soon; a primary is logged into."""
    with pytest.raises(NotPrimary) as promoting:
        refuse_before_login({STATUS_PROPERTY: "ready", PROMOTING_PROPERTY: True})
    assert promoting.value.soon and not promoting.value.again
    assert str(promoting.value) == "not a primary (ready)"
    with pytest.raises(NotPrimary) as ready:
        refuse_before_login({STATUS_PROPERTY: "ready"})
    assert not ready.value.soon
    with pytest.raises(NotPrimary) as standalone:
        refuse_before_login({PROMOTING_PROPERTY: True})  # not an HA backup's state
    assert not standalone.value.soon
    refuse_before_login({STATUS_PROPERTY: "recovering"})  # returns: the login goes on
    refuse_before_login({STATUS_PROPERTY: "active", PROMOTING_PROPERTY: True})


# -- lingering dials (answer_within): a busy peer's handshake waited for, not begun again --
class Lingering:
    """Dials of A that end when the test says (or never), of B scripted; a trace."""

    def __init__(self) -> None:
        self.trace: list[str] = []
        self.a_ends = asyncio.Event()
        self.a_result: str | Exception = "conn-a"
        self.discarded: list[str] = []

    async def dial(self, address: Address) -> str:
        self.trace.append(f"dial {address.host}")
        if address is A:
            try:
                await self.a_ends.wait()
            except asyncio.CancelledError:
                self.trace.append("a cancelled")
                raise
            if isinstance(self.a_result, Exception):
                raise self.a_result
            return self.a_result
        return await self.dial_b()

    async def dial_b(self) -> str:
        raise DialRefused("a backup")

    async def session(self, connection: str, address: Address) -> None:
        self.trace.append(f"session {connection}")
        raise Stop

    def failed(self, address: Address, reason: Exception) -> None:
        self.trace.append(f"failed {address.host}: {reason}")

    async def discard(self, connection: str) -> None:
        self.discarded.append(connection)

    def loop(self) -> Awaitable[object]:
        return dial_loop(
            [A, B],
            self.dial,
            self.session,
            Backoff(0.01, 0.01),
            dial_errors=(OSError,),
            on_dial_failed=self.failed,
            answer_within=0.05,
            discard=self.discard,
        )


def test_a_slow_dial_lingers_and_its_link_is_taken_up_when_it_ends() -> None:
    """A dial of A unanswered after ``answer_within``: the rounds go on dialling B, A is
    not dialled again while its dial runs, and when it ends its session begins."""
    fake = Lingering()

    async def dial_b() -> str:
        if fake.trace.count("dial b") == 4:
            fake.a_ends.set()  # A's handshake answered at last
        raise DialRefused("a backup")

    fake.dial_b = dial_b  # type: ignore[method-assign]
    run(fake.loop())
    assert fake.trace.count("dial a") == 1
    assert fake.trace[-1] == "session conn-a"
    assert fake.trace.count("failed b: a backup") >= 4
    assert not any(line.startswith("failed a") for line in fake.trace)
    assert fake.discarded == []


def test_a_session_elsewhere_cancels_a_lingering_dial() -> None:
    fake = Lingering()

    async def dial_b() -> str:
        if fake.trace.count("dial b") == 2:
            return "conn-b"
        raise DialRefused("a backup")

    fake.dial_b = dial_b  # type: ignore[method-assign]
    run(fake.loop())
    assert fake.trace.count("dial a") == 1
    assert fake.trace[-2:] == ["a cancelled", "session conn-b"]


def test_a_connection_a_lingering_dial_opened_beside_a_session_is_discarded() -> None:
    """A's dial ends with a connection while B's dial runs, which also opens one: B's
    session begins and A's connection is closed, never left open beside the link."""
    fake = Lingering()

    async def dial_b() -> str:
        fake.a_ends.set()
        await asyncio.sleep(0)  # A's dial ends meanwhile
        await asyncio.sleep(0)
        return "conn-b"

    fake.dial_b = dial_b  # type: ignore[method-assign]
    run(fake.loop())
    assert fake.trace[-1] == "session conn-b"
    assert fake.discarded == ["conn-a"]


def test_a_lingering_dial_that_fails_is_reported_then_dialled_again() -> None:
    fake = Lingering()
    fake.a_result = OSError("no open connection within 30 s")

    async def dial_b() -> str:
        if fake.trace.count("dial b") == 3:
            fake.a_ends.set()
        raise DialRefused("a backup")

    def failed(address: Address, reason: Exception) -> None:
        Lingering.failed(fake, address, reason)
        if address is A:
            fake.a_result = "conn-a"  # the next dial of A opens a link

    fake.dial_b = dial_b  # type: ignore[method-assign]
    fake.failed = failed  # type: ignore[method-assign]
    run(fake.loop())
    assert fake.trace.count("failed a: no open connection within 30 s") == 1
    assert fake.trace.count("dial a") == 2
    assert fake.trace[-1] == "session conn-a"


def test_cancelling_the_loop_cancels_a_lingering_dial() -> None:
    async def main() -> None:
        fake = Lingering()
        task = asyncio.ensure_future(fake.loop())
        await poll_async(lambda: fake.trace.count("dial b") >= 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await poll_async(lambda: "a cancelled" in fake.trace)

    asyncio.run(main())


def test_a_connection_a_lingering_dial_opened_is_closed_when_the_loop_ends() -> None:
    async def main() -> None:
        fake = Lingering()
        task = asyncio.ensure_future(fake.loop())
        await poll_async(lambda: fake.trace.count("dial b") >= 2)
        fake.a_ends.set()
        await asyncio.sleep(0)  # A's dial ends with its connection, not yet taken up
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fake.discarded == ["conn-a"]

    asyncio.run(main())


def test_lingering_needs_a_discard() -> None:
    async def main() -> None:
        fake = Lingering()
        with pytest.raises(ValueError, match="discard"):
            await dial_loop([A], fake.dial, fake.session, Backoff(0, 0), answer_within=1.0)

    asyncio.run(main())


async def poll_async(ready: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not ready():
        assert loop.time() < deadline, "not within the deadline"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("answer_within", [None, 5.0])
def test_a_failed_dial_leaves_no_reference_cycle(
    no_cyclic_collector: None, answer_within: float | None
) -> None:
    """A failed dial's exception is handed over, then kept without its traceback: the
    dial's frames (its socket, its login) and the loop's own (the dial's task) are freed by
    reference counting, not left in a cycle with the exception (about 40 objects a failed
    dial while a primary is down; kept for good in a frozen heap, broker.collector)."""

    class Socket:
        pass

    opened: list[weakref.ref[Socket]] = []
    failures: list[Exception] = []

    async def dial(address: Address) -> str:
        sock = Socket()  # what a dial's frame holds when it fails
        opened.append(weakref.ref(sock))
        try:
            raise OSError("connection refused")
        except OSError as exc:
            raise ConnectionError(f"{address}: {exc}") from exc

    async def session(conn: str, address: Address) -> None:
        raise AssertionError("no dial succeeds")

    async def discard(conn: str) -> None:
        raise AssertionError("no dial succeeds")

    rounds = 0

    async def sleep(delay: float) -> None:
        nonlocal rounds
        rounds += 1
        if rounds == 2:
            raise Stop()

    run(
        dial_loop(
            [A, B],
            dial,
            session,
            Backoff(0.01, 1.0),
            dial_errors=(OSError,),
            on_dial_failed=lambda address, exc: failures.append(exc),
            sleep=sleep,
            answer_within=answer_within,
            discard=None if answer_within is None else discard,
        )
    )
    assert len(failures) == 4 and len(opened) == 4
    assert all(exc.__traceback__ is None for exc in failures)
    assert all(exc.__cause__ is not None for exc in failures)  # the cause still said
    assert [ref() for ref in opened] == [None] * 4
