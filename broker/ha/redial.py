"""Backup and stand-alone side, asyncio shell over a sans-I/O policy: dial, replicate, redial.

The loop that keeps a backup's link to its primary (:class:`~broker.ha.backup.BackupLink`,
seed 001's link checked every ``link-maintenance-interval``) and a stand-alone broker's copy
of a remote queue (:class:`~broker.ha.remote_queue_replication.QueueReplication`, seed 001
section 1.13's ``ha-queue-replication``) alive: :func:`dial_loop` (asyncio) pauses between
rounds as the plain :class:`Backoff` object says, and the plain :class:`DialFailures` says
which failed dials are worth a log line.

One *round* dials each address in turn. A dial that succeeds runs the session (replicating
until the link drops) and then the round goes on with the next address; a dial that fails
hands its reason to ``on_dial_failed`` (the one place a failed dial is seen) and the round
goes on (a refusal that says ``again``, a peer promoted during the handshake, dials that
address once more at once). After the round the loop sleeps for :meth:`Backoff.next_delay`
(after a link's loss the shortest pause for a steady window, as a fail-over is under way,
then a doubling one) and starts again; or for :meth:`Backoff.soon` when a peer refused
saying it becomes the primary shortly (a backup whose promotion is under way: ``soon``),
and the next round dials that peer first, so that a backup left in the cluster links to
the new primary as its promotion ends, not up to a doubled pause and a dead address's
dial later (issue 25: the pause had doubled from 10 ms to 640 ms, 858 ms once, while a
loaded broker's promotion of 10,000 queues ran).
With ``answer_within`` (the backup link) a dial not answered within that bound lingers
instead of holding up the round (soak38: a busy primary's handshake given up after 1 s and
begun again, 35 times; the backups never joined): see :func:`dial_loop`.
A session that ends by giving up (it returns False: a replication error, issue 24) does not
reset the backoff: a link that comes up and fails at once is redialled ever more slowly
(exponential, capped by the maintenance interval), never dozens of times a second.

Who calls whom: the owner starts :func:`dial_loop` as its task and cancels it to stop; the
loop calls the owner's ``dial``, ``session`` and ``on_dial_failed``, never the reverse. The
session handles its own errors (and closes its connection): an exception it lets through
ends the loop.

THREAD UNSAFE: :func:`dial_loop` runs on the broker's event loop; :class:`Backoff` and
:class:`DialFailures` belong to one loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, NoReturn, TypeVar

from common.url import Address

__all__ = [
    "Backoff",
    "DialFailure",
    "DialFailures",
    "DialRefused",
    "FailureLine",
    "dial_loop",
]

C = TypeVar("C")


class Backoff:
    """How long to wait between dialling rounds: no clock of its own, no I/O, no loop.

    - Until a link has come up the pause is ``maximum`` (a broker that never reached its
      peer polls every link-maintenance-interval).
    - :meth:`succeeded` (a link came up; called when its session ends, i.e. at the link's
      loss) makes the pauses ``minimum`` for ``steady`` seconds from then (the caller's
      clock, ``now``): a fail-over is under way, and the broker about to be promoted is
      dialled every ``minimum``, not a doubling pause later (issue 26: a member refused by
      a broker just before its promotion ended waited up to the doubled pause, ~35 ms of a
      163 ms broker kill). After the ``steady`` seconds each pause doubles, from
      ``minimum`` up to ``maximum``.
    - No pause is above ``maximum``, and none is below ``minimum`` unless ``maximum`` is
      (then ``maximum`` wins: the cap is the configured interval).

    ``Backoff(m, m)`` pauses ``m`` every time; ``steady=0`` (the default) doubles from the
    first pause after a success.
    """

    def __init__(self, minimum: float, maximum: float, steady: float = 0.0) -> None:
        if not minimum >= 0 or not maximum >= 0 or not steady >= 0:
            raise ValueError(
                f"backoff bounds must be >= 0, got {minimum!r}, {maximum!r} and {steady!r}"
            )
        self.minimum = minimum
        self.maximum = maximum
        self.steady = steady
        self._delay = maximum
        self._steady_until: float | None = None

    def next_delay(self, now: float = 0.0) -> float:
        """The pause before the next round (``now``: the caller's clock, read only within
        ``steady`` seconds of a success); after the steady window, each is twice the one
        before (capped)."""
        if self._steady_until is not None:
            if now < self._steady_until:
                return min(self.minimum, self.maximum)
            self._steady_until = None
        delay = min(self._delay, self.maximum)
        self._delay = min(self._delay * 2, self.maximum)
        return delay

    def succeeded(self, now: float = 0.0) -> None:
        """A link came up (its session ended at ``now``): the pauses are ``minimum`` for
        ``steady`` seconds, then double from ``minimum`` (capped by ``maximum``)."""
        self._delay = self.minimum
        self._steady_until = now + self.steady if self.steady > 0 else None

    def soon(self) -> float:
        """The pause before the next round when a peer said it becomes the primary shortly
        (its promotion under way): ``minimum`` (capped by ``maximum``; each such dial is a
        whole handshake with that peer, which paces them); the doubling pause is left where
        it was, for the rounds after."""
        return min(self.minimum, self.maximum)


@dataclass(frozen=True)
class DialFailure:
    """The failure one address has been answering with: the same ``reason`` ``count`` dials
    in a row since ``since`` (the clock of :meth:`DialFailures.failed`).

    ``routine``: a refusal that is normal while a cluster starts or fails over (the broker
    dialled is not, or not yet, the primary)."""

    address: str
    reason: str
    routine: bool
    since: float
    count: int


@dataclass(frozen=True)
class FailureLine:
    """One log line to write for a failed dial.

    ``repeated``: how many times the dial failed for this reason since the last line about
    it, this failure included; 0 on the first line of a reason."""

    failure: DialFailure
    repeated: int


@dataclass
class _Record:
    reason: str
    routine: bool
    since: float
    count: int
    logged_at: float
    unlogged: int
    order: int


class DialFailures:
    """Which failed dials to log, and the failure to show: no clock, no I/O, no loop.

    Per address it keeps the current reason. :meth:`failed` returns a :class:`FailureLine`

    - when the reason at that address is new (the first failure, or a different reason
      from the dial before), and otherwise
    - at most once per ``interval`` (seconds of the caller's clock) per address, counting
      in ``repeated`` the failures not logged since.

    So an address never gets more than one line per ``interval`` unless its reason changed,
    and every failure is counted in some line or is still waiting for one.
    :meth:`succeeded` (a link came up) forgets every address: the next failure is news.
    :meth:`current` is the failure to show an operator.
    """

    def __init__(self, interval: float = 60.0) -> None:
        if not interval >= 0:
            raise ValueError(f"interval must be >= 0, got {interval!r}")
        self.interval = interval
        self._records: dict[str, _Record] = {}
        self._order = 0

    def failed(
        self, address: str, reason: str, now: float, *, routine: bool = False
    ) -> FailureLine | None:
        """A dial of ``address`` failed at ``now`` for ``reason``: the line to log, if any."""
        self._order += 1
        record = self._records.get(address)
        if record is None or record.reason != reason:
            record = _Record(reason, routine, now, 1, now, 0, self._order)
            self._records[address] = record
            return FailureLine(self._failure(address, record), 0)
        record.count += 1
        record.unlogged += 1
        record.order = self._order
        if now - record.logged_at < self.interval:
            return None
        repeated, record.unlogged, record.logged_at = record.unlogged, 0, now
        return FailureLine(self._failure(address, record), repeated)

    def succeeded(self) -> None:
        """A link came up: forget every failure."""
        self._records.clear()

    def current(self) -> DialFailure | None:
        """The failure to show: the latest one that is not routine, else the latest one;
        None when no dial has failed since the last link came up."""
        if not self._records:
            return None
        address, record = max(
            self._records.items(), key=lambda item: (not item[1].routine, item[1].order)
        )
        return self._failure(address, record)

    def unlogged(self, address: str) -> int:
        """Failures at ``address`` not yet counted in a line."""
        record = self._records.get(address)
        return 0 if record is None else record.unlogged

    @staticmethod
    def _failure(address: str, record: _Record) -> DialFailure:
        return DialFailure(address, record.reason, record.routine, record.since, record.count)


class DialRefused(Exception):
    """Raised by a dial that reached a peer but will not use it; the message says why.

    E.g. the peer is not (yet) an HA primary, or its epoch is too old. The dial closes the
    connection it opened before raising.
    """

    #: The peer changed during this dial (promoted during the handshake): dial it again at
    #: once, once, instead of going on round the list and pausing.
    again = False
    #: The peer becomes the primary shortly (its promotion is under way): the round's pause
    #: is the shortest (:meth:`Backoff.soon`), not the doubling one.
    soon = False


def _ignore(address: Address, reason: Exception) -> None:
    """The default ``on_dial_failed``: a failed dial is retried, nothing more."""


async def dial_loop(
    addresses: Sequence[Address],
    dial: Callable[[Address], Awaitable[C]],
    session: Callable[[C, Address], Awaitable[bool | None]],
    backoff: Backoff,
    *,
    dial_errors: tuple[type[Exception], ...] = (),
    on_dial_failed: Callable[[Address, Exception], None] = _ignore,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    answer_within: float | None = None,
    discard: Callable[[C], Awaitable[object]] | None = None,
) -> NoReturn:
    """Dial ``addresses`` in rounds, run ``session`` on each link, back off between rounds.

    :param addresses: read afresh each round (a list the owner mutates is followed).
    :param dial: opens a connection to one address, or raises :class:`DialRefused` or one
        of ``dial_errors``; anything else it raises ends the loop.
    :param session: replicates over one connection until the link drops, handles its own
        errors and closes the connection; afterwards :meth:`Backoff.succeeded` is called,
        unless it returned False (it gave up: a replication error).
    :param backoff: the pause after each round (:meth:`Backoff.next_delay`).
    :param on_dial_failed: called with the address and the exception of each failed dial.
    :param sleep: ``asyncio.sleep``; tests pass a fake.
    :param clock: the clock handed to the backoff (its steady window after a link's loss).
    :param answer_within: None: each dial is awaited to its end (its own bound). Else a
        dial not ended within that many seconds *lingers*: the round goes on without it,
        its address is not dialled again while it runs, and it is taken up when it ends
        (at that address's next turn, or at once during a round's pause, which it ends):
        a busy peer's handshake is waited for to the dial's own bound, never abandoned and
        begun again, while a frozen one costs the rounds only ``answer_within`` once.
    :param discard: closes a connection a lingering dial opened but the loop will not use
        (another address's session began first); required with ``answer_within``.
    """
    if answer_within is not None and discard is None:
        raise ValueError("answer_within needs discard (a lingering dial's unused connection)")
    dials = _Dials(dial, (DialRefused, *dial_errors), on_dial_failed, answer_within, discard)
    soon: Address | None = None  # the peer of the last round that becomes the primary shortly
    try:
        while True:
            ahead = soon
            soon = None
            for address in _first(ahead, addresses):
                for _attempt in range(2):  # a refusal that says ``again``: once more at once
                    outcome = await dials.take(address)
                    if isinstance(outcome, DialRefused) and outcome.again:
                        continue
                    if isinstance(outcome, (BaseException, _Lingering)):
                        if soon is None and isinstance(outcome, DialRefused) and outcome.soon:
                            soon = address
                        break
                    await dials.end_lingering()
                    if await session(outcome, address) is not False:
                        backoff.succeeded(clock())
                    break
            delay = backoff.soon() if soon is not None else backoff.next_delay(clock())
            ended = await dials.pause(delay, sleep)
            if ended is not None:  # a lingering dial opened a link during the pause
                address, connection = ended
                await dials.end_lingering()
                if await session(connection, address) is not False:
                    backoff.succeeded(clock())
    finally:  # a connection a lingering dial opened is closed, never left to the primary
        await dials.end_lingering()


class _Lingering:
    """The marker :meth:`_Dials.take` returns for a dial that goes on in the background."""


_LINGERING = _Lingering()


class _Dials(Generic[C]):
    """The dials of one :func:`dial_loop`, and those of them that linger (asyncio shell)."""

    def __init__(
        self,
        dial: Callable[[Address], Awaitable[C]],
        failures: tuple[type[Exception], ...],
        on_dial_failed: Callable[[Address, Exception], None],
        answer_within: float | None,
        discard: Callable[[C], Awaitable[object]] | None,
    ) -> None:
        self._dial = dial
        self._failures = failures
        self._on_dial_failed = on_dial_failed
        self._answer_within = answer_within
        self._discard = discard
        self._lingering: dict[Address, asyncio.Task[C]] = {}

    async def take(self, address: Address) -> C | Exception | _Lingering:
        """Dial ``address`` (or take up its lingering dial): the connection, the failure
        (already handed to ``on_dial_failed``), or :data:`_LINGERING`."""
        if self._answer_within is None:
            try:
                return await self._dial(address)
            except self._failures as exc:
                return self._failed(address, exc)
        task = self._lingering.pop(address, None)
        if task is None:
            task = asyncio.ensure_future(self._dial(address))
            try:
                await asyncio.wait({task}, timeout=self._answer_within)
            except BaseException:
                self._lingering[address] = task  # the loop's end closes what it opened
                raise
        if not task.done():
            self._lingering[address] = task
            return _LINGERING
        return self._outcome(address, task)

    def _outcome(self, address: Address, task: asyncio.Task[C]) -> C | Exception:
        try:
            return task.result()
        except self._failures as exc:
            return self._failed(address, exc)

    def _failed(self, address: Address, exc: Exception) -> Exception:
        """A failed dial, reported, kept without its traceback: its frames (this one, which
        names the dial's task, and the dial's own, with its socket) held the exception in a
        reference cycle, about 40 objects a failed dial that only the cyclic collector
        frees (never, if the heap is frozen meanwhile: broker.collector)."""
        self._on_dial_failed(address, exc)
        failure: BaseException | None = exc
        seen: set[int] = set()
        while failure is not None and id(failure) not in seen:  # its causes too, once each
            seen.add(id(failure))
            failure.__traceback__ = None
            failure = failure.__cause__ or failure.__context__
        return exc

    async def pause(
        self, delay: float, sleep: Callable[[float], Awaitable[object]]
    ) -> tuple[Address, C] | None:
        """The pause between rounds; with dials lingering, ended early by the first of them
        that opens a connection (returned; a failed one is reported, the pause goes on)."""
        if not self._lingering:
            await sleep(delay)
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        while self._lingering:
            left = deadline - loop.time()
            if left <= 0:
                return None
            done, _ = await asyncio.wait(
                set(self._lingering.values()), timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            for address, task in list(self._lingering.items()):
                if task in done:
                    del self._lingering[address]
                    outcome = self._outcome(address, task)
                    if not isinstance(outcome, BaseException):
                        return address, outcome
        left = deadline - loop.time()
        if left > 0:
            await sleep(left)
        return None

    async def end_lingering(self) -> None:
        """A session begins, or the loop ends: every lingering dial is cancelled, and a
        connection one of them opened meanwhile is discarded (closed), never left open
        beside the link or after the loop."""
        tasks = list(self._lingering.values())
        self._lingering.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # (this coroutine's own cancellation goes through)
        for task in tasks:
            if task.cancelled() or task.exception() is not None:
                continue  # a failed dial nobody waits for any more
            if self._discard is not None:
                await self._discard(task.result())


def _first(ahead: Address | None, addresses: Sequence[Address]) -> list[Address]:
    """``addresses`` in their order, ``ahead`` first when it is one of them (the peer that
    said it becomes the primary shortly: dialled before a dead address's time-out or
    refusal, and this broker's own address, in the next round)."""
    if ahead is None or ahead not in addresses:
        return list(addresses)
    return [ahead, *(address for address in addresses if address != ahead)]
