"""Per-message objects from the C allocator: :func:`raw_allocated`.

A queued message's small objects (its ``Message``, its queue ``Entry``) came from Python's
object allocator, which takes memory in arenas of 1 MiB and gives an arena back only once
every object in it is freed: after a 300,000-message queue was deleted or drained, a few
long-lived small objects made during the fill kept 10-20 of those arenas (docs/memory-and-
disk.md, "Memory given back"). Taken from the C allocator instead, their memory goes back
with the bodies' on ``malloc_trim`` (:mod:`broker.core.heap_return`).

:func:`raw_allocated` is a class decorator: it gives a ``__slots__`` class its own pair of
allocation functions (broker/core/_raw_alloc.c: ``PyMem_RawMalloc`` and ``PyMem_RawFree``,
nothing swapped globally). Without the compiled module, or on a Python whose object layout
it does not know, the class keeps Python's allocator: the same objects, more memory kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_native_raw_allocated: Callable[[type], bool] | None
try:
    from broker.core._raw_alloc import raw_allocated as _native_raw_allocated
except ImportError:  # not built (no C compiler): Python's allocator
    _native_raw_allocated = None

#: True when the compiled allocator is here (whether a class can use it: :data:`RAW_CLASSES`).
NATIVE = _native_raw_allocated is not None

C = TypeVar("C", bound=type)

#: The classes whose objects come from the C allocator.
RAW_CLASSES: set[type] = set()


def raw_allocated(cls: C) -> C:
    """Decorate a ``__slots__`` class (before any instance exists) so that its objects come
    from the C allocator when the compiled module can do it; returns the class."""
    if _native_raw_allocated is not None and _native_raw_allocated(cls):
        RAW_CLASSES.add(cls)
    return cls
