"""The cyclic garbage collector set for a broker's workload: :func:`tune_after_start` and
:class:`FreezePolicy`.

A broker's objects are of two kinds: those of its start (modules, classes, the management
API's, its configuration: hundreds of thousands, alive until it stops) and those of a
message (a ``Message``, an ``Entry``, a ``Delivery`` while unacknowledged, a confirm's
bookkeeping: alive for milliseconds, freed by reference counting). CPython's defaults suit
neither: a young collection every 700 net allocations examines in-flight messages that would
have been freed a moment later (16 producers keep thousands in flight), moves them to the
older generations, and so brings full collections that walk every object of the start
again (the issue 32 profile: 9 % of the loop's time in the collector at P = 16).

So, once the broker's start has made everything but its ports, its management API and its
HA links, before any port is bound (``qpidd``'s :func:`broker.main.run`, through
``Broker.start``'s ``before_listening``: the full collection below took 68-82 ms of CPU for
a backup restarted at load 16, which no client or link waits for there; never in a process
that embeds the broker, such as the tests):

- everything alive is moved to the permanent generation (``gc.freeze()``, after one full
  collection): later full collections never walk the start's objects;
- young collections wait for :data:`YOUNG_THRESHOLD` net allocations (about two thousand
  messages' objects, above what a broker keeps in flight between two turns), so that a
  message's objects are normally freed before any collection sees them;
- the middle generation is collected after every two young collections
  (:data:`MIDDLE_THRESHOLD`), so that one walks at most about 30,000 objects (what two
  young collections moved there and the young generation with it): a collection of the
  middle generation walks all of it in one step of the loop, and while thousands of
  queues are declared or caught up, or clients come by the thousand, nearly everything
  survives. What that walk costs (history, docs/benchmarks.md): with 20, about a million
  objects, 90 ms of CPU on a quiet machine, 245-312 ms steps on a loaded one; with 2: up
  to 200,000, 52-63 ms at load 20-30; with 1 and young collections of 50,000: up to
  150,000, 44-47 ms at load 30 and 89 ms at load 46; of 25,000: up to 75,000, and the
  scale soak's steps (soak47, load 16) still held 54-87 ms collections. Young collections
  of 10,000 bound the middle walk to 30,000 objects (2-3 ms quiet); full collections are
  considered after 25 middle ones (:data:`OLD_THRESHOLD`), as often per allocation as
  before (docs/benchmarks.md, "Before/after: young collections every 10,000").

A full collection walks every object of the old generation that is not frozen, however
many; :class:`FreezePolicy` (fed by ``broker.loop_steps``) freezes the heap before that
walk would take :data:`FREEZE_AFTER` of CPU. The price: a reference cycle among frozen
objects that dies later is not collected (reference counting frees everything else, as
always); the broker's objects that die in numbers form no cycle: a deleted queue's, and a
closed connection's with its channels, sessions and HA streams (their owned parts hold them
through :func:`common.weakly.weakly`, or let go at their end: before, each connection open
at a freeze stayed for good, about 7 KiB; ``bench/connection_churn.py``), and a catch-up's
end unfreezes a heap small enough to walk at once
(``broker.ha.queue_replicator.CatchUpGc``).
"""

from __future__ import annotations

import gc

__all__ = [
    "FREEZE_AFTER",
    "MIDDLE_THRESHOLD",
    "OLD_THRESHOLD",
    "YOUNG_THRESHOLD",
    "FreezePolicy",
    "tune_after_start",
]

#: Net allocations of tracked objects between two young collections (CPython: 700; 50,000
#: until the scale soak's middle collections of 89 ms at load 46; 25,000 until soak47's
#: collections of 54-87 ms at load 16).
YOUNG_THRESHOLD = 10_000
#: The middle generation is collected once more young collections than this have run
#: since its last (CPython: 10). Each young collection moves at most about
#: :data:`YOUNG_THRESHOLD` survivors there.
MIDDLE_THRESHOLD = 1
#: Middle collections before a full one is considered (CPython: 10; a full collection also
#: waits until the objects to promote are 25 % of those already old). 25 with young
#: collections every 10,000: full ones come as often per allocation as with 10 and 25,000
#: (with 10, 2.5 times as often: 1-2 us more of the broker's CPU a message, pika's bench).
OLD_THRESHOLD = 25
#: The CPU a full collection may take (seconds): the heap is frozen before the next one
#: would take longer (:class:`FreezePolicy`).
FREEZE_AFTER = 0.025


def tune_after_start() -> None:
    """Freeze what the start made and set the thresholds (see the module docstring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)


class FreezePolicy:
    """When to freeze the heap (``gc.freeze()``, constant time): as soon as the next full
    collection could take :attr:`budget` of CPU or more.

    What a full collection walks is what the last one left (it took as long, less what
    died since; nothing once frozen) plus what the middle collections since moved to the
    old generation (at most what they walked: their CPU time bounds it). So the policy
    adds the last full collection's CPU time to the middle collections' since, and asks
    for a freeze when the sum reaches the budget: a heap that grows by thousands of
    queues (or a backlog, or a catch-up) is frozen in steps of about the budget, and no
    full collection walks much more than that (docs/reliability.md, "No long stalls").
    In steady work the middle collections walk a few in-flight messages each (a
    millisecond) and full collections come often enough to start the sum again: no freeze.

    Plain arithmetic, seconds passed in; one caller (the loop's tick).
    """

    def __init__(self, budget: float = FREEZE_AFTER) -> None:
        self.budget = budget
        #: CPU of the last full collection (0 after a freeze): what it left is walked again.
        self._left = 0.0
        #: CPU of the middle collections since: at most what they moved to the old generation.
        self._moved = 0.0

    def collected(self, generation: int, seconds: float) -> bool:
        """A collection of ``generation`` took ``seconds`` of CPU; whether to freeze now."""
        if generation >= 2:
            self._left, self._moved = seconds, 0.0
        elif generation == 1:
            self._moved += seconds
        return self.due()

    def due(self) -> bool:
        """Whether the next full collection could take the budget or more."""
        return self._left + self._moved >= self.budget

    def frozen(self) -> None:
        """The heap was frozen: the next full collection walks only what comes after."""
        self._left = self._moved = 0.0
