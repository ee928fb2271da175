"""What changed in the management lists since a version: the delta feed's core (issue 25).

:Status: Beta

One journal of the lists a viewer watches (queues, exchanges, bindings, connections), each
a map of rows by key. Each tick of the console's sampler hands it what the lists hold now
(:meth:`DeltaJournal.advance`): for each list every key present, and the rows it rebuilt
(at least every new key's; a row it did not rebuild is taken as unchanged, so a caller may
rebuild only the objects whose counters moved). The journal bumps its version and keeps
the tick's delta: the keys added, changed and removed, per list. :meth:`~DeltaJournal.since`
answers "what changed since version V" by merging the ticks after V into one
:class:`Delta` whose rows are the latest: applied to the lists as they were at V
(:func:`apply`), it gives the lists as they are now (a property test holds this for any
sequence of adds, changes and removes). A version older than the ticks kept, or not one
this journal handed out, gets None: the viewer needs a snapshot.

Plain data, no I/O and no clock: the shell (:mod:`broker.management.console.live`) builds
the rows, serialises each delta once for every viewer, and sends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KEPT_TICKS", "Delta", "DeltaJournal", "ListDelta", "ListUpdate", "apply"]

#: Ticks kept: a viewer this many versions behind can still be sent a delta.
KEPT_TICKS = 30

Row = Mapping[str, Any]


@dataclass(frozen=True)
class ListUpdate:
    """What one list holds at a tick: every key present, and the rows rebuilt (a key that
    is new must have its row; a known key without one keeps its row)."""

    keys: Collection[str]
    rows: Mapping[str, Row]

    @classmethod
    def whole(cls, rows: Mapping[str, Row]) -> ListUpdate:
        """Every row of the list rebuilt."""
        return cls(rows.keys(), rows)


@dataclass(frozen=True)
class ListDelta:
    """One list's change: rows added and changed (by key, as they are now), keys removed."""

    added: dict[str, Row] = field(default_factory=dict)
    changed: dict[str, Row] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    def view(self) -> dict[str, Any]:
        return {"added": self.added, "changed": self.changed, "removed": self.removed}


@dataclass(frozen=True)
class Delta:
    """What changed from version ``since`` to ``version``, and each list's size now."""

    since: int
    version: int
    lists: dict[str, ListDelta]
    totals: dict[str, int]

    def view(self) -> dict[str, Any]:
        """The JSON shape (docs/management.md, ``GET /api/changes``)."""
        return {
            "since": self.since,
            "version": self.version,
            "lists": {name: delta.view() for name, delta in self.lists.items()},
            "totals": self.totals,
        }


@dataclass(frozen=True)
class _Tick:
    version: int
    #: list -> (added, changed, removed) keys
    lists: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]]


class DeltaJournal:
    """See the module docstring. THREAD UNSAFE: the event loop's."""

    def __init__(self, lists: Iterable[str], kept: int = KEPT_TICKS) -> None:
        self.names = tuple(lists)
        self.version = 0
        self.rows: dict[str, dict[str, Row]] = {name: {} for name in self.names}
        #: list -> key -> the version its row last changed (or was added) at
        self.row_versions: dict[str, dict[str, int]] = {name: {} for name in self.names}
        #: list -> the version a key was last added or removed at
        self.membership: dict[str, int] = dict.fromkeys(self.names, 0)
        self._ticks: deque[_Tick] = deque(maxlen=kept)
        self._oldest = 0  #: the lowest version since() answers

    def totals(self) -> dict[str, int]:
        return {name: len(rows) for name, rows in self.rows.items()}

    def advance(self, updates: Mapping[str, ListUpdate]) -> int:
        """The next version, with the lists as ``updates`` say (a list not named is
        unchanged). Its delta is ``since(version - 1)``, built when asked (a first tick of
        10,000 rows is not made into a delta nobody reads)."""
        version = self.version + 1
        tick: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {}
        for name, update in updates.items():
            rows, versions = self.rows[name], self.row_versions[name]
            present = update.keys if isinstance(update.keys, AbstractSet) else set(update.keys)
            removed = frozenset(rows.keys() - present)  # set operations: C speed
            for key in removed:
                del rows[key]
                del versions[key]
            given = update.rows.keys() & present
            # set operations and dict updates at C speed: a first tick of 10,000 rows
            added = given - rows.keys()
            changed = {key for key in given - added if rows[key] != update.rows[key]}
            rows.update({key: update.rows[key] for key in added | changed})
            versions.update(dict.fromkeys(added | changed, version))
            missing = present - rows.keys()
            if missing:
                raise ValueError(f"{name}: no row for the new key(s) {sorted(missing)[:5]}")
            if added or removed:
                self.membership[name] = version
            tick[name] = (frozenset(added), frozenset(changed), removed)
        self.version = version
        self._ticks.append(_Tick(version, tick))
        self._oldest = max(self._oldest, self._ticks[0].version - 1)
        return version

    def forget(self) -> None:
        """Drop the ticks kept: every older version gets None from :meth:`since` (the
        lists were not followed meanwhile)."""
        self._ticks.clear()
        self._oldest = self.version

    def clear(self) -> None:
        """Drop every row (the lists are not followed any more) and the ticks kept; a new
        version, so that every one before needs a snapshot."""
        self.version += 1
        for name in self.names:
            self.rows[name].clear()
            self.row_versions[name].clear()
            self.membership[name] = self.version
        self.forget()

    def since(self, version: int) -> Delta | None:
        """What changed after ``version``, or None when this journal cannot tell (older
        than the ticks kept, or not a version it handed out)."""
        if version < self._oldest or version > self.version:
            return None
        first: dict[str, dict[str, str]] = {name: {} for name in self.names}
        for tick in self._ticks:
            if tick.version <= version:
                continue
            for name, (added, changed, removed) in tick.lists.items():
                seen = first[name]
                for kind, keys in (("added", added), ("changed", changed), ("removed", removed)):
                    for key in keys:
                        seen.setdefault(key, kind)
        lists: dict[str, ListDelta] = {}
        for name in self.names:
            rows = self.rows[name]
            delta = ListDelta()
            for key, kind in first[name].items():
                existed = kind != "added"
                row = rows.get(key)
                if row is not None:
                    (delta.changed if existed else delta.added)[key] = row
                elif existed:
                    delta.removed.append(key)
            delta.removed.sort()
            lists[name] = delta
        return Delta(version, self.version, lists, self.totals())

    def snapshot(self) -> dict[str, dict[str, Row]]:
        """The lists now (copies of the maps; the rows are shared)."""
        return {name: dict(rows) for name, rows in self.rows.items()}


def apply(lists: Mapping[str, Mapping[str, Row]], delta: Delta) -> dict[str, dict[str, Row]]:
    """``lists`` (as at ``delta.since``) with ``delta`` applied: the lists at
    ``delta.version``. What a viewer does with each delta."""
    out = {name: dict(rows) for name, rows in lists.items()}
    for name, change in delta.lists.items():
        rows = out.setdefault(name, {})
        for key in change.removed:
            rows.pop(key, None)
        rows.update(change.added)
        rows.update(change.changed)
    return out
