"""The cyclic garbage collector set for a broker's workload: :func:`tune_after_start`.

A broker's objects are of two kinds: those of its start (modules, classes, the management
API's, its configuration: hundreds of thousands, alive until it stops) and those of a
message (a ``Message``, an ``Entry``, a ``Delivery`` while unacknowledged, a confirm's
bookkeeping: alive for milliseconds, freed by reference counting). CPython's defaults suit
neither: a young collection every 700 net allocations examines in-flight messages that would
have been freed a moment later (16 producers keep thousands in flight), moves them to the
older generations, and so brings full collections that walk every object of the start
again (the issue 32 profile: 9 % of the loop's time in the collector at P = 16).

So, once the broker listens (``qpidd``'s :func:`broker.main.run`; never in a process that
embeds the broker, such as the tests):

- everything alive is moved to the permanent generation (``gc.freeze()``, after one full
  collection): later full collections never walk the start's objects;
- young collections wait for :data:`YOUNG_THRESHOLD` net allocations (about ten thousand
  messages' objects, well above what a broker keeps in flight between two turns), and the
  middle generation for :data:`MIDDLE_THRESHOLD` young collections, so that a message's
  objects are normally freed before any collection sees them. A young collection of that
  size takes about a millisecond; the loop-step watch still freezes the heap after a full
  collection of 25 ms (``broker.loop_steps``).

The price: a reference cycle among frozen objects is never collected (as after a store's
recovery, ``broker.server``); objects of the start that form cycles and die later are few.
"""

from __future__ import annotations

import gc

#: Net allocations of tracked objects between two young collections (CPython: 700).
YOUNG_THRESHOLD = 50_000
#: Young collections between two collections of the middle generation (CPython: 10).
MIDDLE_THRESHOLD = 20
#: Middle collections before a full one is considered (CPython: 10; a full collection also
#: waits until the objects to promote are 25 % of those already old).
OLD_THRESHOLD = 10


def tune_after_start() -> None:
    """Freeze what the start made and set the thresholds (see the module docstring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
