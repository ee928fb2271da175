"""Sets of replication ids stored as ranges (Qpid's ``ReplicationIdSet``), and their encoding.

Contract
--------
A replication id is the queue position the primary stamped on a message (docs/ha-design.md,
"Replication ids"): a non-negative int no greater than :data:`MAX_ID` (``2**63 - 1``).
:class:`IdSet` holds a set of them as sorted, disjoint, inclusive ``(first, last)`` ranges,
always kept canonical: two ranges never overlap and never touch (a gap of at least one missing
id separates them). So a backup holding ids 1..1_000_000 holds one range, equal sets have equal
range lists, and memory and the encoding grow with the number of gaps, not of ids.

Costs: appending the next id (``add(max() + 1)``) and adding past the end are O(1); other
adds and discards are O(log r) to find the place plus a list insert/delete (r = ranges);
``len`` is O(1); union, intersection and difference are linear merges of the range lists.
(``len`` of the one set holding all 2**63 ids raises OverflowError: Python's limit.)

Encoding (:meth:`IdSet.encode` / :meth:`IdSet.decode`), used for the ``qpid.ha-ids`` consume
argument and inside ``DEQUEUE`` events (:mod:`broker.ha.wire`). All integers are unsigned
LEB128 varints (7 bits a byte, least significant group first, high bit = more bytes follow),
minimal (no redundant trailing zero groups) and at most 9 bytes (63 bits)::

    count                       number of ranges
    then per range:
      gap                       first - previous_end, where previous_end = previous last + 2
                                (0 before the first range)
      span                      last - first

Gaps and spans are never negative, so unsorted, overlapping or touching ranges cannot be
written at all; an empty set is the single byte ``00``; one id below 128 takes 3 bytes.
:meth:`IdSet.decode` accepts exactly the output of :meth:`IdSet.encode` (``encode(decode(b))
== b`` for every accepted ``b``) and raises :class:`ValueError` naming the problem for
anything else: truncation, an over-long or non-minimal varint, an id above :data:`MAX_ID`, a
count larger than the data can hold, trailing bytes.

No I/O; not thread-safe (owned by one replicator at a time).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from operator import lt
from typing import TypeVar

__all__ = ["MAX_ID", "IdSet"]

MAX_ID = 2**63 - 1
"""The largest replication id (ids are stored as unsigned 64-bit in Qpid; we keep 63 bits)."""

_MAX_VARINT_BYTES = 9  # 9 * 7 = 63 bits

BytesLike = bytes | bytearray | memoryview


T = TypeVar("T")


def _check_id(value: object, what: str = "id") -> int:
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"replication {what} must be an int, not {type(value).__name__}")
        value = int(value)  # an int subclass: store a plain int
    if value < 0 or value > MAX_ID:
        raise ValueError(f"replication {what} {value} out of range 0..{MAX_ID}")
    return value


class IdSet:
    """A mutable set of replication ids kept as canonical inclusive ranges.

    Behaves like ``set[int]`` for ``in``, ``len``, iteration (ascending) and ``==``; the set
    algebra returns new sets. Ids outside ``0..MAX_ID`` raise :class:`ValueError`, non-ints
    :class:`TypeError`. Unhashable (mutable).
    """

    __slots__ = ("_count", "_firsts", "_lasts")

    def __init__(self, iterable: Iterable[int] = ()) -> None:
        self._firsts: list[int] = []  # range starts, ascending
        self._lasts: list[int] = []  # range ends (inclusive), parallel to _firsts
        self._count = 0
        if isinstance(iterable, IdSet):
            self._firsts = list(iterable._firsts)
            self._lasts = list(iterable._lasts)
            self._count = iterable._count
            return
        ids = sorted({_check_id(i) for i in iterable})
        if not ids:
            return
        firsts, lasts = self._firsts, self._lasts
        first = last = ids[0]
        for i in ids[1:]:
            if i != last + 1:
                firsts.append(first)
                lasts.append(last)
                first = i
            last = i
        firsts.append(first)
        lasts.append(last)
        self._count = len(ids)

    @classmethod
    def from_ranges(cls, ranges: Iterable[tuple[int, int]]) -> IdSet:
        """The union of inclusive ``(first, last)`` ranges, in any order, overlapping or not."""
        result = cls()
        for first, last in ranges:
            result.add_range(first, last)
        return result

    @classmethod
    def from_ascending(cls, ids: Iterable[int]) -> IdSet:
        """The set of ``ids``, given in strictly ascending order: linear, no sort.

        :raises ValueError: if an id is out of range or not greater than the one before.
        """
        if type(ids) is list:
            fast = cls._from_ascending_list(ids)
            if fast is not None:
                return fast
        firsts: list[int] = []
        lasts: list[int] = []
        count = 0
        last = -2
        for i in ids:
            if type(i) is not int or i < 0 or i > MAX_ID:
                i = _check_id(i)
            if i == last + 1:
                last = i
            elif i > last:
                if count:
                    lasts.append(last)
                firsts.append(i)
                last = i
            else:
                raise ValueError(f"replication ids not strictly ascending: {i} after {last}")
            count += 1
        if count:
            lasts.append(last)
        return cls._trusted(firsts, lasts, count)

    @classmethod
    def _from_ascending_list(cls, ids: list[int]) -> IdSet | None:
        """:meth:`from_ascending` of a list of plain ints, checked at C speed (None when the
        checks fail: the caller's loop then says what is wrong). Strictly ascending, a slice
        ``ids[lo:hi]`` is one range exactly when ``ids[hi - 1] - ids[lo] == hi - 1 - lo``, so
        splitting the list in halves finds the ranges in O(ranges x log(len)) steps: a
        backup's million queue positions in one or a few ranges cost two linear C passes."""
        n = len(ids)
        if not n:
            return cls()
        if (
            set(map(type, ids)) != {int}
            or ids[0] < 0
            or ids[-1] > MAX_ID
            or not all(map(lt, ids, islice(ids, 1, None)))
        ):
            return None
        return cls._by_halving(n, ids.__getitem__)

    @classmethod
    def of_sorted(cls, items: Sequence[T], key: Callable[[T], int]) -> IdSet:
        """The set of ``key(item)`` for ``items``, whose keys the caller knows to be valid
        ids in strictly ascending order (a queue's snapshot by position): found by halving,
        O(ranges x log(len)) keys read and no list of them made (a restarted backup's
        50,000-message queue: no pass over its entries in Python). Not checked: keys out of
        order give a wrong set."""
        return cls._by_halving(len(items), lambda i: key(items[i]))

    @classmethod
    def _by_halving(cls, n: int, at: Callable[[int], int]) -> IdSet:
        """The set of ``at(0) < at(1) < ... < at(n - 1)``, ranges found by halving."""
        if not n:
            return cls()
        firsts: list[int] = []
        lasts: list[int] = []
        todo = [(0, n)]
        while todo:
            lo, hi = todo.pop()
            first = at(lo)
            last = at(hi - 1)
            if last - first == hi - 1 - lo:
                if lasts and first == lasts[-1] + 1:
                    lasts[-1] = last
                else:
                    firsts.append(first)
                    lasts.append(last)
            else:
                mid = (lo + hi) // 2
                todo.append((mid, hi))
                todo.append((lo, mid))  # the lower half first
        return cls._trusted(firsts, lasts, n)

    @classmethod
    def _trusted(cls, firsts: list[int], lasts: list[int], count: int) -> IdSet:
        # Build from lists already known to be canonical (merges, decode).
        result = cls.__new__(cls)
        result._firsts = firsts
        result._lasts = lasts
        result._count = count
        return result

    # -- mutation -------------------------------------------------------------------------

    def add(self, i: int) -> None:
        """Add one id (O(1) when ``i`` extends or follows the last range)."""
        if type(i) is not int or i < 0 or i > MAX_ID:
            i = _check_id(i)
        lasts = self._lasts
        if lasts:
            tail = lasts[-1]
            if i == tail + 1:
                lasts[-1] = i
                self._count += 1
                return
            if i > tail:
                self._firsts.append(i)
                lasts.append(i)
                self._count += 1
                return
        else:
            self._firsts.append(i)
            lasts.append(i)
            self._count = 1
            return
        self._add_range(i, i)

    def add_range(self, first: int, last: int) -> None:
        """Add every id from ``first`` to ``last`` inclusive (``first <= last``)."""
        first = _check_id(first, "range start")
        last = _check_id(last, "range end")
        if first > last:
            raise ValueError(f"empty range: first {first} > last {last}")
        self._add_range(first, last)

    def _add_range(self, first: int, last: int) -> None:
        firsts, lasts = self._firsts, self._lasts
        # Ranges lo..hi-1 overlap or touch [first, last]: their last >= first - 1 and their
        # first <= last + 1.
        lo = bisect_left(lasts, first - 1)
        hi = bisect_right(firsts, last + 1)
        if lo >= hi:  # nothing to merge with: insert
            firsts.insert(lo, first)
            lasts.insert(lo, last)
            self._count += last - first + 1
            return
        new_first = min(first, firsts[lo])
        new_last = max(last, lasts[hi - 1])
        removed = 0
        for k in range(lo, hi):
            removed += lasts[k] - firsts[k] + 1
        firsts[lo:hi] = [new_first]
        lasts[lo:hi] = [new_last]
        self._count += (new_last - new_first + 1) - removed

    def discard(self, i: int) -> None:
        """Remove ``i`` if present (splitting its range if ``i`` is inside it)."""
        if type(i) is not int or i < 0 or i > MAX_ID:
            i = _check_id(i)
        firsts, lasts = self._firsts, self._lasts
        k = bisect_right(firsts, i) - 1
        if k < 0 or lasts[k] < i:
            return
        first, last = firsts[k], lasts[k]
        self._count -= 1
        if first == last:
            del firsts[k]
            del lasts[k]
        elif i == first:
            firsts[k] = i + 1
        elif i == last:
            lasts[k] = i - 1
        else:  # split
            lasts[k] = i - 1
            firsts.insert(k + 1, i + 1)
            lasts.insert(k + 1, last)

    def clear(self) -> None:
        self._firsts.clear()
        self._lasts.clear()
        self._count = 0

    def copy(self) -> IdSet:
        return IdSet._trusted(list(self._firsts), list(self._lasts), self._count)

    # -- queries --------------------------------------------------------------------------

    def __contains__(self, i: object) -> bool:
        if type(i) is not int and (isinstance(i, bool) or not isinstance(i, int)):
            return False
        k = bisect_right(self._firsts, i) - 1
        return k >= 0 and i <= self._lasts[k]

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return bool(self._firsts)

    def __iter__(self) -> Iterator[int]:
        for first, last in zip(self._firsts, self._lasts, strict=True):
            yield from range(first, last + 1)

    def ranges(self) -> list[tuple[int, int]]:
        """The canonical ranges, ascending: sorted, disjoint, non-touching, inclusive."""
        return list(zip(self._firsts, self._lasts, strict=True))

    def min(self) -> int:
        if not self._firsts:
            raise ValueError("min() of an empty IdSet")
        return self._firsts[0]

    def max(self) -> int:
        if not self._lasts:
            raise ValueError("max() of an empty IdSet")
        return self._lasts[-1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IdSet):
            return NotImplemented
        return self._firsts == other._firsts and self._lasts == other._lasts

    def __repr__(self) -> str:
        ranges = self.ranges()
        if len(ranges) <= 8:
            return f"IdSet.from_ranges({ranges!r})"
        head = ", ".join(f"({f}, {last})" for f, last in ranges[:4])
        return f"<IdSet {self._count} ids in {len(ranges)} ranges: {head}, ... ({self.max()})>"

    # -- set algebra (linear merges) --------------------------------------------------------

    def union(self, other: IdSet) -> IdSet:
        """Ids in either set."""
        af, al, bf, bl = self._firsts, self._lasts, other._firsts, other._lasts
        na, nb = len(af), len(bf)
        firsts: list[int] = []
        lasts: list[int] = []
        count = 0
        i = j = 0
        cur_first = cur_last = -2
        while i < na or j < nb:
            if j >= nb or (i < na and af[i] <= bf[j]):
                first, last = af[i], al[i]
                i += 1
            else:
                first, last = bf[j], bl[j]
                j += 1
            if first <= cur_last + 1:
                if last > cur_last:
                    cur_last = last
            else:
                if cur_last >= 0:
                    firsts.append(cur_first)
                    lasts.append(cur_last)
                    count += cur_last - cur_first + 1
                cur_first, cur_last = first, last
        if cur_last >= 0:
            firsts.append(cur_first)
            lasts.append(cur_last)
            count += cur_last - cur_first + 1
        return IdSet._trusted(firsts, lasts, count)

    def intersection(self, other: IdSet) -> IdSet:
        """Ids in both sets."""
        af, al, bf, bl = self._firsts, self._lasts, other._firsts, other._lasts
        na, nb = len(af), len(bf)
        firsts: list[int] = []
        lasts: list[int] = []
        count = 0
        i = j = 0
        while i < na and j < nb:
            lo = af[i] if af[i] > bf[j] else bf[j]
            a_last, b_last = al[i], bl[j]
            if a_last < b_last:
                hi = a_last
                i += 1
            else:
                hi = b_last
                j += 1
            if lo <= hi:
                # Pieces cut from canonical inputs never touch: no coalescing needed.
                firsts.append(lo)
                lasts.append(hi)
                count += hi - lo + 1
        return IdSet._trusted(firsts, lasts, count)

    def difference(self, other: IdSet) -> IdSet:
        """Ids in this set and not in ``other``."""
        af, al, bf, bl = self._firsts, self._lasts, other._firsts, other._lasts
        nb = len(bf)
        firsts: list[int] = []
        lasts: list[int] = []
        count = 0
        j = 0
        for first, last in zip(af, al, strict=True):
            while j < nb and bl[j] < first:  # other's ranges wholly before this one
                j += 1
            k = j
            start = first
            while k < nb and bf[k] <= last:
                if bf[k] > start:
                    firsts.append(start)
                    lasts.append(bf[k] - 1)
                    count += bf[k] - start
                if bl[k] + 1 > start:
                    start = bl[k] + 1
                if bl[k] > last:
                    break
                k += 1
            j = k
            if start <= last:
                firsts.append(start)
                lasts.append(last)
                count += last - start + 1
        return IdSet._trusted(firsts, lasts, count)

    def __or__(self, other: IdSet) -> IdSet:
        return self.union(other) if isinstance(other, IdSet) else NotImplemented

    def __and__(self, other: IdSet) -> IdSet:
        return self.intersection(other) if isinstance(other, IdSet) else NotImplemented

    def __sub__(self, other: IdSet) -> IdSet:
        return self.difference(other) if isinstance(other, IdSet) else NotImplemented

    # -- encoding ---------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The compact varint encoding described in the module docstring."""
        out = bytearray()
        append = out.append
        values = [len(self._firsts)]
        previous_end = 0
        for first, last in zip(self._firsts, self._lasts, strict=True):
            values.append(first - previous_end)
            values.append(last - first)
            previous_end = last + 2
        for v in values:
            while v >= 0x80:
                append((v & 0x7F) | 0x80)
                v >>= 7
            append(v)
        return bytes(out)

    @classmethod
    def decode(cls, data: BytesLike) -> IdSet:
        """Parse :meth:`encode`'s output; :class:`ValueError` naming the problem otherwise."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ValueError(f"id set encoding must be bytes, not {type(data).__name__}")
        if isinstance(data, memoryview):
            data = data.tobytes()  # also normalises a non-byte itemsize
        end = len(data)
        if end == 0:
            raise ValueError("id set truncated: no range count")
        count, pos = _read_varint(data, 0, end, "range count")
        if count > (end - pos) // 2:  # every range takes at least two bytes
            raise ValueError(
                f"id set truncated: {count} ranges announced, only {end - pos} bytes follow"
            )
        firsts: list[int] = []
        lasts: list[int] = []
        total = 0
        previous_end = 0
        for n in range(count):
            gap, pos = _read_varint(data, pos, end, f"range {n} start")
            span, pos = _read_varint(data, pos, end, f"range {n} length")
            first = previous_end + gap
            last = first + span
            if last > MAX_ID:
                raise ValueError(f"id set range {n} ends at {last}, above the maximum id {MAX_ID}")
            firsts.append(first)
            lasts.append(last)
            total += span + 1
            previous_end = last + 2
        if pos != end:
            raise ValueError(f"id set has {end - pos} trailing bytes after {count} ranges")
        return cls._trusted(firsts, lasts, total)


def _read_varint(data: bytes | bytearray, pos: int, end: int, what: str) -> tuple[int, int]:
    """One minimal LEB128 varint of at most 63 bits at ``pos``: (value, next position)."""
    if pos >= end:
        raise ValueError(f"id set truncated: missing {what}")
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    start = pos
    pos += 1
    while True:
        if pos >= end:
            raise ValueError(f"id set truncated inside the varint of {what}")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if b == 0:
                raise ValueError(f"id set: non-minimal varint for {what} at byte {start}")
            return value, pos
        shift += 7
        if pos - start >= _MAX_VARINT_BYTES:
            raise ValueError(f"id set: varint for {what} at byte {start} is longer than 63 bits")
