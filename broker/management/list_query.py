"""Filter, sort and pagination of a management list, in RabbitMQ's query shape (issue 25).

:Status: Beta

One query shape for every list of the API (queues, exchanges, bindings, connections,
channels, consumers) and for the console's live pages, with RabbitMQ's parameter names so
that an operator's scripts carry over::

    ?page=N&page_size=M&name=TEXT&use_regex=true&sort=FIELD&sort_reverse=true&columns=a,b

- ``name``: rows whose name contains ``TEXT``, ignoring case; with ``use_regex=true``,
  whose name a regular expression finds (``re.search``, ignoring case). Which fields are a
  row's "name" is the list's to say (a binding's source, destination and routing key).
- ``sort``: a field, or a field's field with dots (``arguments.x-max-length``);
  ``sort_reverse=true`` reverses. Rows without the field come first; equal rows keep the
  list's own order (by name).
- ``columns``: the fields each row keeps (dotted paths keep a nested field).
- ``page`` (from 1) and ``page_size`` (1 to :data:`MAX_PAGE_SIZE`, default
  :data:`DEFAULT_PAGE_SIZE`): the answer is then an object, RabbitMQ's::

      {"items": [...], "page": 1, "page_size": 100, "page_count": 3,
       "filtered_count": 250, "item_count": 100, "total_count": 10000}

  ``total_count`` counts the list, ``filtered_count`` what the filter kept,
  ``item_count`` this page's rows; ``page_count`` is at least 1. Without ``page`` or
  ``page_size`` (or ``pagination=true``), the answer is the plain array, as before.

Contract: bad parameters raise :class:`QueryError` naming the value (the shell answers
400). A regular expression is refused when it could take a long time on a 255-byte name
(:func:`compile_pattern`: length, nested or too many repetitions, back-references), and a
filter that still takes more than :data:`FILTER_BUDGET` seconds of CPU over a list is
refused as well. Unknown parameters are ignored, as RabbitMQ does.

Pure computation over rows (JSON-ready mappings), no I/O: :func:`select_steps` is a
:data:`~common.slices.Steps` generator that yields between slices (at most
:data:`~common.slices.SLICE` rows, or :data:`MATCH_SLICE` seconds of matching), so the
shell runs it a slice a turn of the event loop. Sorting 10,000 rows is done by chunks of
:data:`SORT_CHUNK` merged a chunk a slice.
"""

from __future__ import annotations

import heapq
import json
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Generic, TypeVar

from common.slices import SLICE as SLICE  # re-exported: a test makes slices small
from common.slices import Steps

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "ListQuery",
    "QueryError",
    "Selection",
    "answer_steps",
    "compile_pattern",
    "field_of",
    "project",
    "select_steps",
]

#: RabbitMQ's default and largest page sizes.
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
#: Characters a ``name`` filter may have.
MAX_PATTERN = 256
#: A repetition whose upper bound is above this counts as unbounded.
WIDE_REPEAT = 16
#: CPU seconds a filter may take over one list before it is refused.
FILTER_BUDGET = 2.0
#: Seconds of matching in one slice.
MATCH_SLICE = 0.005
#: Rows sorted in one slice (then merged).
SORT_CHUNK = 5000

T = TypeVar("T")
Row = Mapping[str, Any]


class QueryError(ValueError):
    """A bad query parameter; the message names it and its value."""


_TRUE_FALSE = {"true": True, "false": False}


def _flag(params: Mapping[str, str], key: str) -> bool:
    text = params.get(key)
    if text is None:
        return False
    value = _TRUE_FALSE.get(text.lower())
    if value is None:
        raise QueryError(f"{key} must be true or false, not {text!r}")
    return value


def _positive(params: Mapping[str, str], key: str, default: int, top: int | None) -> int:
    text = params.get(key)
    if text is None:
        return default
    if not text.isdigit() or int(text) < 1 or (top is not None and int(text) > top):
        bounds = f"between 1 and {top}" if top is not None else "a positive integer"
        raise QueryError(f"{key} must be {bounds}, not {text!r}")
    return int(text)


def _path(text: str, key: str, fields: Collection[str]) -> tuple[str, ...]:
    path = tuple(text.split("."))
    if not text or any(not part for part in path):
        raise QueryError(f"{key} names no field: {text!r}")
    if path[0] not in fields:
        raise QueryError(f"{key}: no field {path[0]!r} in this list (fields: {', '.join(fields)})")
    return path


@dataclass(frozen=True)
class ListQuery:
    """A list's query parameters, checked (see the module docstring)."""

    paged: bool = False
    page: int = 1
    page_size: int = DEFAULT_PAGE_SIZE
    name: str | None = None
    use_regex: bool = False
    sort: tuple[str, ...] | None = None
    sort_reverse: bool = False
    columns: tuple[tuple[str, ...], ...] | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str], fields: Collection[str]) -> ListQuery:
        """The query of ``params`` (a request's query string) for a list whose rows have
        ``fields``; :class:`QueryError` naming a bad value."""
        paged = "page" in params or "page_size" in params or _flag(params, "pagination")
        name = params.get("name") or None
        use_regex = _flag(params, "use_regex")
        if name is not None:
            compile_pattern(name if use_regex else re.escape(name))
        sort_text = params.get("sort")
        columns_text = params.get("columns")
        columns = None
        if columns_text:
            columns = tuple(_path(c.strip(), "columns", fields) for c in columns_text.split(","))
        return cls(
            paged=paged,
            page=_positive(params, "page", 1, None),
            page_size=_positive(params, "page_size", DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE),
            name=name,
            use_regex=use_regex,
            sort=_path(sort_text, "sort", fields) if sort_text else None,
            sort_reverse=_flag(params, "sort_reverse"),
            columns=columns,
        )

    def matcher(self) -> Callable[[str], bool] | None:
        """Whether a name passes the filter; None without a filter."""
        if self.name is None:
            return None
        if not self.use_regex:
            wanted = self.name.casefold()
            return lambda text: wanted in text.casefold()
        pattern = compile_pattern(self.name)
        return lambda text: pattern.search(text) is not None


# regular expressions ----------------------------------------------------------------------
def compile_pattern(text: str) -> re.Pattern[str]:
    """``text`` compiled ignoring case, or :class:`QueryError` when it is too long, not a
    regular expression, or could backtrack for long on a 255-byte name: a repetition
    inside a repetition (``(a+)+``), an alternation inside one (``(a|ab)*``), a
    back-reference, or more unbounded repetitions (``*``, ``+``, ``{n,}``, ``{n,m}`` with m
    over :data:`WIDE_REPEAT`) than one, or two after a leading ``^`` (each one multiplies
    the work on a name by its length: ``.*.*x`` took 33 ms on one name, ``.*.*.*x`` 2 s)."""
    if len(text) > MAX_PATTERN:
        raise QueryError(f"name: a pattern of at most {MAX_PATTERN} characters, not {len(text)}")
    try:
        parsed = _parser.parse(text, re.IGNORECASE)
        pattern = re.compile(text, re.IGNORECASE)
    except (re.error, RecursionError, OverflowError) as exc:
        raise QueryError(f"name: not a regular expression: {text!r} ({exc})") from None
    items = list(parsed)
    anchored = bool(items) and items[0] == (_AT, _AT_BEGINNING)
    wide = _wide_repeats(items, text, inside=False)
    if wide > (2 if anchored else 1):
        raise QueryError(
            f"name: {text!r} has {wide} unbounded repetitions; at most one"
            " (two after a leading ^): each multiplies the time a name takes"
        )
    return pattern


try:  # the regular expression parser (re._parser since Python 3.11)
    import re._parser as _parser  # type: ignore[import-not-found,unused-ignore]
    from re._constants import (  # type: ignore[import-not-found,unused-ignore]
        AT as _AT,
    )
    from re._constants import (  # type: ignore[import-not-found,unused-ignore]
        AT_BEGINNING as _AT_BEGINNING,
    )
    from re._constants import MAXREPEAT as _MAXREPEAT  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _parser  # type: ignore[no-redef,unused-ignore]
    from sre_constants import AT as _AT  # type: ignore[no-redef,unused-ignore]
    from sre_constants import AT_BEGINNING as _AT_BEGINNING  # type: ignore[no-redef,unused-ignore]
    from sre_constants import MAXREPEAT as _MAXREPEAT  # type: ignore[no-redef,unused-ignore]

_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _wide_repeats(items: Iterable[Any], text: str, *, inside: bool) -> int:
    """Unbounded repetitions in a parsed pattern; :class:`QueryError` for a repetition or
    an alternation inside one, or a back-reference."""
    count = 0
    for op, value in items:
        name = str(op)
        if name in ("GROUPREF", "GROUPREF_EXISTS", "GROUPREF_IGNORE"):
            raise QueryError(f"name: {text!r} has a back-reference (refused: it may backtrack)")
        if name in _REPEATS:
            _low, high, body = value
            repeats = high == _MAXREPEAT or high > WIDE_REPEAT
            if inside and high > 1:
                raise QueryError(f"name: {text!r} repeats a repetition (refused: it may backtrack)")
            count += int(repeats) + _wide_repeats(body, text, inside=inside or high > 1)
        elif name == "BRANCH":
            if inside:
                raise QueryError(
                    f"name: {text!r} repeats an alternation (refused: it may backtrack)"
                )
            count += max((_wide_repeats(b, text, inside=inside) for b in value[1]), default=0)
        elif name == "SUBPATTERN":
            count += _wide_repeats(value[-1], text, inside=inside)
        elif name in ("ASSERT", "ASSERT_NOT"):
            count += _wide_repeats(value[1], text, inside=inside)
        elif name == "ATOMIC_GROUP":
            count += _wide_repeats(value, text, inside=inside)
    return count


# rows ------------------------------------------------------------------------------------
_MISSING = object()


def field_of(row: Row, path: Sequence[str]) -> Any:
    """The value at ``path`` in ``row`` (dotted fields), or None when there is none."""
    value: Any = row
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part, _MISSING)
        if value is _MISSING:
            return None
    return value


def sort_key(value: Any) -> tuple[int, Any]:
    """A total order over JSON values: none first, then numbers, text, the rest."""
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    return (3, json.dumps(value, sort_keys=True, default=str))


def project(row: Row, columns: Sequence[Sequence[str]] | None) -> Row:
    """``row`` with only ``columns`` (dotted paths keep the nested field)."""
    if columns is None:
        return row
    out: dict[str, Any] = {}
    for path in columns:
        value = field_of(row, path)
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    return out


@dataclass(frozen=True)
class Selection(Generic[T]):
    """What a query kept of a list: the rows of the page asked (all of them when not
    paged), in order, and the counts."""

    items: list[T]
    total_count: int
    filtered_count: int
    page: int
    page_size: int

    @property
    def page_count(self) -> int:
        return max(1, -(-self.filtered_count // self.page_size))

    def counts(self) -> dict[str, int]:
        """The paged answer's fields but ``items``."""
        return {
            "page": self.page,
            "page_size": self.page_size,
            "page_count": self.page_count,
            "filtered_count": self.filtered_count,
            "item_count": len(self.items),
            "total_count": self.total_count,
        }


def select_steps(
    items: Sequence[T],
    query: ListQuery,
    row_of: Callable[[T], Row],
    names: Callable[[Row], Iterable[Any]],
    *,
    clamp: bool = False,
) -> Steps[Selection[T]]:
    """The items ``query`` keeps, sorted, and its page, in slices. ``names`` gives the
    texts of a row that the ``name`` filter reads. A page past the last is a
    :class:`QueryError`, or the last page with ``clamp`` (a live page whose rows went)."""
    matched: Sequence[T] = items
    matcher = query.matcher()
    if matcher is not None:
        matched = yield from _filter_steps(items, matcher, row_of, names)
    ordered: Sequence[T] = matched
    if query.sort is not None:
        ordered = yield from _sort_steps(matched, query.sort, query.sort_reverse, row_of)
    size = query.page_size if query.paged else max(1, len(ordered))
    page = query.page if query.paged else 1
    last = max(1, -(-len(ordered) // size))
    if page > last:
        if not clamp:
            raise QueryError(f"page {page} is out of range: the list has {last} page(s)")
        page = last
    start = (page - 1) * size
    return Selection(list(ordered[start : start + size]), len(items), len(ordered), page, size)


def _filter_steps(
    items: Sequence[T],
    matcher: Callable[[str], bool],
    row_of: Callable[[T], Row],
    names: Callable[[Row], Iterable[Any]],
) -> Steps[list[T]]:
    kept: list[T] = []
    spent = 0.0
    began = time.thread_time()
    done = 0
    for item in items:
        if any(matcher(text) for text in names(row_of(item)) if isinstance(text, str)):
            kept.append(item)
        done += 1
        now = time.thread_time()
        if done >= SLICE or now - began >= MATCH_SLICE:
            spent += now - began
            if spent > FILTER_BUDGET:
                raise QueryError(
                    f"name: the pattern took more than {FILTER_BUDGET:g} s of CPU over"
                    f" {done} of {len(items)} names; make it simpler"
                )
            yield
            done, began = 0, time.thread_time()
    return kept


def _sort_steps(
    items: Sequence[T], path: Sequence[str], reverse: bool, row_of: Callable[[T], Row]
) -> Steps[list[T]]:
    keyed: list[tuple[tuple[int, Any], int]] = []
    sign = -1 if reverse else 1
    for start in range(0, len(items), SLICE):
        if start:
            yield
        keyed.extend(
            (sort_key(field_of(row_of(item), path)), sign * (start + i))
            for i, item in enumerate(items[start : start + SLICE])
        )
    chunks = []
    for start in range(0, len(keyed), SORT_CHUNK):
        yield
        chunks.append(sorted(keyed[start : start + SORT_CHUNK], reverse=reverse))
    merged = heapq.merge(*chunks, reverse=reverse)
    ordered: list[T] = []
    while True:
        batch = list(islice(merged, SORT_CHUNK))
        ordered.extend(items[sign * index] for _key, index in batch)
        if len(batch) < SORT_CHUNK:
            return ordered
        yield


def answer_steps(selection: Selection[Row], query: ListQuery) -> Steps[Any]:
    """The JSON answer, in slices: the array of rows, or RabbitMQ's page object when
    paged."""
    rows = selection.items
    if query.columns is not None:
        rows = []
        for start in range(0, len(selection.items), SLICE):
            if start:
                yield
            rows.extend(project(r, query.columns) for r in selection.items[start : start + SLICE])
    if not query.paged:
        return rows
    return {"items": rows, **selection.counts()}
