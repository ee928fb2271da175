"""When to hand freed heap memory back to the kernel: :class:`HeapReturn`.

Freed message bodies go back to the C allocator (glibc), not to the kernel: a queue of
300,000 x 1 KiB deleted or drained left the broker at 411 of its 488 MB (43 MB before the
fill), because glibc gives memory back by itself only from the top of its heap, and the
freed bodies lie under live allocations. ``malloc_trim`` hands every free page of the heap
back; its cost grows with what it gives back (about 0.2 ms per MB here, well under a
millisecond when there is nothing to give). So it is called when the bytes of the messages
the broker holds have fallen by :data:`RELEASE_STEP` or more since the last call (or since
their highest level after it): while a queue drains, once per 32 MiB (a few milliseconds
each), never while queues only grow. Below 64 MiB held the step is half of that highest
level (never under :data:`SMALLEST_STEP`): the end of a drain, whose last 32 MiB would
otherwise stay with the process (a 300,000 x 1 KiB queue drained to empty kept 35 MB of
freed heap), is handed back in a few halving trims, each cheaper than the one before.

The held bytes count ready messages only: what is freed after the last of those trims (the
messages still unacknowledged when the queue ran empty, their objects, the consumers'
buffers) stayed (a drain to empty kept 7 MB of freed heap). So after a trim one more
follows once the held bytes have stayed within :data:`QUIET_BYTES` for
:data:`SETTLE_SAMPLES` samples (the settled trim: one per release, when the broker is quiet,
never while the held bytes move).

Pure: the shell (:class:`~broker.store.resource_monitor.ResourceMonitor`, on the broker's
tick) reads the bytes held and calls ``malloc_trim`` when :meth:`HeapReturn.sample` says so.
"""

from __future__ import annotations

#: Bytes of messages released (since the last trim) that make a trim worth it.
RELEASE_STEP = 32 * 1024 * 1024
#: The least fall that makes a trim (bytes held that only wobble below it cost nothing).
SMALLEST_STEP = 4 * 1024 * 1024
#: Samples (of the broker's 0.25 s tick) the held bytes stay still before the settled trim.
SETTLE_SAMPLES = 8
#: How far the held bytes may move between two samples and still be still.
QUIET_BYTES = 1024 * 1024


class HeapReturn:
    """See the module docstring."""

    __slots__ = (
        "_high",
        "_last",
        "_quiet",
        "_settle",
        "release_step",
        "settle_samples",
        "settled_trims",
        "smallest_step",
        "trims",
    )

    def __init__(
        self,
        release_step: int = RELEASE_STEP,
        smallest_step: int = SMALLEST_STEP,
        settle_samples: int = SETTLE_SAMPLES,
    ) -> None:
        self.release_step = release_step
        self.smallest_step = smallest_step
        self.settle_samples = settle_samples
        #: The highest bytes held since the last trim.
        self._high = 0
        #: The bytes held at the last sample, and how many samples in a row stayed near them.
        self._last = 0
        self._quiet = 0
        #: A trim was made since the last settled trim.
        self._settle = False
        self.trims = 0
        self.settled_trims = 0

    def sample(self, held: int) -> bool:
        """``held``: bytes of the messages the broker holds now. True: trim now."""
        if abs(held - self._last) < QUIET_BYTES:
            self._quiet += 1
        else:
            self._quiet = 0
        self._last = held
        if held >= self._high:
            self._high = held
            return self._settled()
        step = min(self.release_step, max(self.smallest_step, self._high // 2))
        if self._high - held < step:
            return self._settled()
        self._high = held
        self.trims += 1
        self._settle = True
        self._quiet = 0
        return True

    def _settled(self) -> bool:
        if not self._settle or self._quiet < self.settle_samples:
            return False
        self._settle = False
        self.settled_trims += 1
        return True
