"""The lists the console follows live: one journal of changes, rows serialised once, and
each viewer's page of queues (issue 25, "the console and the API at scale").

:Status: Beta

Each tick of the sampler (:class:`~broker.management.console.live.LiveFeed`), while
someone follows (a console viewer, or a reader of ``GET /api/changes`` within
:data:`FOLLOW_FOR` seconds), :meth:`LiveLists.update_steps` hands the
:class:`~broker.management.deltas.DeltaJournal` the lists as they are: the queues (every
key; rows rebuilt only for the queues the sampler saw move, the new ones, and all of them
every :data:`FULL_EVERY` ticks), the exchanges and connections (rebuilt; those of both
protocols, AMQP 0-9-1 and 1.0, as ``GET /api/connections`` lists them), the bindings
(rows built once: a binding does not change), the channels of the AMQP 0-9-1 connections
and their consumers (rebuilt, a slice of channels a step; ``GET /api/channels``' and
``GET /api/consumers``' rows). The journal keeps what changed.

What is serialised once for every viewer: each row's JSON text (per row version,
:meth:`LiveLists.row_text`), the tick's delta of the exchanges, bindings and connections
a viewer holds whole, and the snapshot of them for a viewer that starts or fell behind.
The channels and consumers are held whole by nobody (thousands of rows that move every
second): a viewer pages them (:data:`PAGED_ONLY`); ``GET /api/changes`` has every list.
What is a viewer's own: its page of queues, and of each other list it pages rather than
holds whole (:class:`ListPage`: the console's filter, sort and page, the list query of
:mod:`broker.management.list_query`), sent only when its rows or order changed, as the
keys in order and the texts of the rows it does not hold yet. The order of a filter and
sort is computed once a tick for every viewer that asks it (none again while the rows
present did not change, when the sort is by a field that does not change).

Error Handling
==============

A row that cannot be built (a queue deleted between two slices) is left out until the
next tick; nothing here raises for the broker's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.core.vhosts import KEY_SEPARATOR, queue_key
from broker.management.channels import channel_name, channel_view, consumer_views
from broker.management.deltas import DeltaJournal, ListUpdate
from broker.management.list_query import ListQuery, select_steps
from broker.management.lists import (
    BINDINGS,
    CHANNELS,
    CONNECTIONS,
    CONSUMERS,
    EXCHANGES,
    QUEUES,
    ListKind,
)
from broker.management.managed import ManagedBroker, vhosts_of
from broker.management.responses import dumps
from broker.management.views import NO_RATES, binding_view, connection_view, exchange_view
from common.slices import SLICE, Steps

__all__ = [
    "CONSOLE_KINDS",
    "CONSOLE_QUEUES",
    "FOLLOW_FOR",
    "FULL_EVERY",
    "LIVE_LISTS",
    "PAGED_ONLY",
    "ListPage",
    "LiveLists",
    "NameFilter",
    "channels_wanted_by",
]

#: Seconds a read of ``GET /api/changes`` keeps the lists followed.
FOLLOW_FOR = 10.0
#: Every this many ticks every queue's row is rebuilt (what no counter shows: arguments).
FULL_EVERY = 30
#: The lists of the journal.
LIVE_LISTS = ("queues", "exchanges", "bindings", "connections", "channels", "consumers")
#: Lists a viewer of the live stream only pages, never holds whole (each row moves with
#: the deliveries: thousands of channels would be most of every delta).
PAGED_ONLY = ("channels", "consumers")
#: A console's queue row: the API's, with the replication level and the last rates.
CONSOLE_QUEUES = ListKind(
    "queues",
    (*QUEUES.fields, "replication", "publish_rate", "deliver_rate", "ack_rate"),
    QUEUES.names,
)
#: Each list's console rows: what a page's sort may name and its filter reads.
CONSOLE_KINDS: dict[str, ListKind] = {
    "queues": CONSOLE_QUEUES,
    "exchanges": EXCHANGES,
    "bindings": BINDINGS,
    "connections": CONNECTIONS,
    "channels": CHANNELS,
    "consumers": CONSUMERS,
}
#: Fields of a row that no tick changes: a sort by one keeps its order until a row is
#: added or removed.
STATIC_FIELDS = frozenset(
    {
        "name",
        "vhost",
        "durable",
        "auto_delete",
        "exclusive",
        "arguments",
        "type",
        "source",
        "destination",
        "destination_type",
        "routing_key",
        "properties_key",
        "id",
        "peer",
        "user",
        "user_provided_name",
        "ssl",
        "protocol",
        "connection",
        "connection_name",
        "number",
        "consumer_tag",
        "channel_details",
        "queue",
    }
)

Row = Mapping[str, Any]


@dataclass
class ListPage:
    """One viewer's page of a list (``name``, the queues by default): its query and what
    it holds."""

    query: ListQuery
    name: str = "queues"
    keys: list[str] = field(default_factory=list)
    #: the journal version of the rows it holds (-1: none)
    seen: int = -1
    counts: dict[str, int] = field(default_factory=dict)


def _default_order(keys: Iterable[str]) -> list[str]:
    """Queue keys in the lists' order: vhost ``/`` first, then by vhost and name. A key is
    the name in ``/`` and ``vhost NUL name`` elsewhere, so plain sorts give that order
    (at C speed: 10,000 keys with a key function took 10-16 ms in one step). The same for
    exchanges (keyed alike)."""
    listed = list(keys)
    return sorted([k for k in listed if KEY_SEPARATOR not in k]) + sorted(
        [k for k in listed if KEY_SEPARATOR in k]
    )


def _list_order(name: str, keys: Iterable[str]) -> list[str]:
    """A list's keys in its own order: queues and exchanges by vhost and name, bindings
    by their key (the JSON text of vhost, source, kind, destination, routing key,
    arguments: vhost ``/`` first), connections by id."""
    if name == "bindings":
        listed = list(keys)
        return sorted([k for k in listed if k.startswith('["/",')]) + sorted(
            [k for k in listed if not k.startswith('["/",')]
        )
    if name == "connections":
        return sorted(keys, key=int)
    if name in ("channels", "consumers"):
        return sorted(keys, key=_channel_order)
    return _default_order(keys)


#: Which channels to build, by name (a page's filter: :meth:`ListQuery.matcher`).
NameFilter = Callable[[str], bool]


def channels_wanted_by(pages: Iterable[ListPage]) -> NameFilter | None:
    """Which channels a viewer's pages may show: its page of channels' name filter; None
    for all of them (a page of channels without a filter, or a page of consumers, whose
    filter reads tags and queues)."""
    paged = [page for page in pages if page.name in PAGED_ONLY]
    if not paged or any(page.name != "channels" for page in paged):
        return None
    matchers = [page.query.matcher() for page in paged]
    if any(m is None for m in matchers):
        return None
    return lambda name: any(m(name) for m in matchers if m is not None)


def channel_key(connection: int, number: int) -> str:
    """A channel's key in the journal: its connection's id and its number."""
    return f"{connection}:{number}"


def consumer_key(connection: int, number: int, tag: str) -> str:
    """A consumer's key: its channel's key and its tag (any text: it comes last)."""
    return f"{connection}:{number}:{tag}"


def _channel_order(key: str) -> tuple[int, int, str]:
    """Channels and consumers by connection id, channel number, then tag."""
    connection, number, tag = [*key.split(":", 2), ""][:3]
    return int(connection), int(number), tag


class LiveLists:
    """See the module docstring. ``queue_row`` makes a queue's console row (the API's
    view and what the sampler adds); ``history`` gives a queue's samples by key."""

    def __init__(
        self,
        broker: ManagedBroker,
        queue_row: Callable[[Any], dict[str, Any]],
        history: Callable[[str], list[dict[str, float]]],
        connection_rates: Callable[[int], Mapping[str, float]] = lambda _id: NO_RATES,
    ) -> None:
        self.broker = broker
        self.queue_row = queue_row
        self.history = history
        #: a connection's byte rates at the sampler's last tick (by its id)
        self.connection_rates = connection_rates
        self.journal = DeltaJournal(LIVE_LISTS)
        self.followed_until = 0.0
        #: viewers paging the channels or consumers (while none does and nobody reads
        #: ``GET /api/changes``, those two lists are not built: they stay empty)
        self.channel_viewers = 0
        #: which channels each of those viewers' pages may show (:func:`channels_wanted_by`)
        self.channel_filters: list[NameFilter | None] = []
        #: the channels present at the last tick (the journal may hold only those wanted)
        self.channels_total = 0
        #: the last tick built every channel (else none, or those some page wanted)
        self.channels_whole = False
        self.ticks = 0
        self._binding_keys: dict[int, tuple[Any, str]] = {}
        self._texts: dict[tuple[str, str], tuple[int, str]] = {}
        #: (list, query's filter and sort) -> (membership version, journal version, keys)
        self._orders: dict[tuple[Any, ...], tuple[int, int, list[str]]] = {}
        #: list -> (membership version, its keys in its own order)
        self._default: dict[str, tuple[int, list[str]]] = {}
        #: the lists held whole -> (version, text) of the shared delta and snapshot
        self._delta_texts: dict[tuple[str, ...], tuple[int, str]] = {}
        self._snapshot_texts: dict[tuple[str, ...], tuple[int, str]] = {}

    # the journal --------------------------------------------------------------------------
    def update_steps(
        self,
        moved: set[str] | None,
        queues: list[tuple[str, Any]] | None = None,
        channels: bool | NameFilter = True,
    ) -> Steps[int]:
        """A tick: the lists as they are now, into the journal. ``moved``: the queue keys
        the sampler saw change (None: rebuild every row); ``queues``: (key, queue) of every
        queue, as the sampler listed them (else listed here); ``channels``: build the
        channels and consumers (False: they are left empty, nobody follows them; a name
        filter: only the channels it passes, :meth:`channels_wanted`)."""
        self.ticks += 1
        self.channels_whole = channels is True
        full = moved is None or self.ticks % FULL_EVERY == 1
        known = self.journal.rows["queues"]
        by_key = dict(vhosts_of(self.broker).queues.items() if queues is None else queues)
        present = by_key.keys()
        # the new keys and the moved ones by set operations, at C speed
        fresh = (present - known.keys()) | (present & (moved or set()))
        todo = list(present if full else fresh)
        rows: dict[str, Row] = {}
        for start in range(0, len(todo), SLICE):
            if start:
                yield
            for key in todo[start : start + SLICE]:
                row = self.queue_row(by_key[key])
                if known.get(key) != row:  # compared here, a slice a step
                    rows[key] = row
        yield
        exchanges = {
            queue_key(e.vhost, e.name): exchange_view(e)
            for vhost in vhosts_of(self.broker)
            for e in vhost.exchanges.values()
        }
        yield
        bindings = yield from self._bindings_steps()
        yield
        context = self.broker.context
        listed = list(context.connections.values())  # AMQP 0-9-1's: those with channels
        rates = self.connection_rates
        connections = {
            str(c.id): connection_view(c, rates(c.id))
            for c in (*listed, *context.connections_1_0.values())
        }
        yield
        channel_rows, consumer_rows = yield from self._channels_steps(
            listed if channels else [], None if isinstance(channels, bool) else channels
        )
        return self.journal.advance(
            {
                "queues": ListUpdate(present, rows),
                "exchanges": ListUpdate.whole(exchanges),
                "bindings": bindings,
                "connections": ListUpdate.whole(connections),
                "channels": ListUpdate.whole(channel_rows),
                "consumers": ListUpdate.whole(consumer_rows),
            }
        )

    def _channels_steps(
        self, connections: list[Any], wanted: NameFilter | None = None
    ) -> Steps[tuple[dict[str, Row], dict[str, Row]]]:
        """Every channel's row (``wanted``: only those whose name it passes) and their
        consumers' (as ``GET /api/channels`` and ``GET /api/consumers`` show them),
        :data:`SLICE` channels a step (a channel passed over counts a tenth of one)."""
        channels: dict[str, Row] = {}
        consumers: dict[str, Row] = {}
        built = total = 0
        for connection in connections:
            for number in list(connection.channels):
                channel = connection.channels.get(number)
                if channel is None:
                    continue
                total += 1
                if wanted is not None and not wanted(channel_name(connection, number)):
                    if total % (10 * SLICE) == 0:
                        yield
                    continue
                view = channel_view(connection, channel)
                channels[channel_key(connection.id, number)] = view
                for consumer in consumer_views(view):
                    key = consumer_key(connection.id, number, consumer["consumer_tag"])
                    consumers[key] = consumer
                built += 1
                if built % SLICE == 0:
                    yield
        self.channels_total = total
        return channels, consumers

    def _bindings_steps(self) -> Steps[ListUpdate]:
        """Every binding's key; a row for the ones not seen before (by identity)."""
        cache: dict[int, tuple[Any, str]] = {}
        keys: set[str] = set()
        rows: dict[str, Row] = {}
        known = self.journal.rows["bindings"]
        listed = [b for vhost in vhosts_of(self.broker) for b in vhost.bindings()]
        for start in range(0, len(listed), SLICE):
            if start:
                yield
            for binding in listed[start : start + SLICE]:
                entry = self._binding_keys.get(id(binding))
                if entry is None or entry[0] is not binding:
                    view = binding_view(binding)
                    key = dumps(
                        [
                            view["vhost"],
                            view["source"],
                            view["destination_type"],
                            view["destination"],
                            view["routing_key"],
                            view["arguments"],
                        ]
                    )
                    entry = (binding, key)
                cache[id(binding)] = entry
                keys.add(entry[1])
                if entry[1] not in known and entry[1] not in rows:
                    rows[entry[1]] = binding_view(binding)
        self._binding_keys = cache
        return ListUpdate(keys, rows)

    def release(self) -> None:
        """Nobody follows any more: the rows and their texts go (megabytes at 10,000
        queues); the next tick that follows rebuilds them."""
        self.journal.clear()
        self._texts.clear()
        self._orders.clear()
        self._binding_keys.clear()
        self.channels_total = 0
        self._default.clear()
        self._delta_texts.clear()
        self._snapshot_texts.clear()

    def follow(self, now: float) -> None:
        """A reader of ``GET /api/changes`` keeps the lists followed a while."""
        self.followed_until = max(self.followed_until, now + FOLLOW_FOR)

    def channels_wanted(self, now: float) -> bool | NameFilter:
        """Which channels (and their consumers) a tick builds: every one (True) for a
        reader of ``GET /api/changes`` within :data:`FOLLOW_FOR` seconds; none (False)
        while no viewer pages them; else those some viewer's page may show (a page of one
        connection's channels: its filter on their names; the others could never be on
        it, and building a row is most of the cost: 20,000 channels at 10,000 queues with
        two backups' links); every one when a page does not filter by name."""
        if now < self.followed_until:
            return True
        if self.channel_viewers <= 0:
            return False
        filters = self.channel_filters
        if len(filters) < self.channel_viewers or any(f is None for f in filters):
            return True
        wanted = [f for f in filters if f is not None]
        return lambda name: any(f(name) for f in wanted)

    # texts shared by every viewer ---------------------------------------------------------
    def row_text(self, name: str, key: str) -> str:
        """The JSON text of a row, encoded once per version of the row."""
        version = self.journal.row_versions[name][key]
        cached = self._texts.get((name, key))
        if cached is None or cached[0] != version:
            cached = (version, dumps(self.journal.rows[name][key]))
            self._texts[(name, key)] = cached
        return cached[1]

    def prune_texts(self) -> None:
        """Forget the texts of rows that went."""
        rows = self.journal.rows
        for name, key in [k for k in self._texts if k[1] not in rows[k[0]]]:
            del self._texts[(name, key)]

    def _rows_text_steps(self, name: str, keys: Iterable[str]) -> Steps[str]:
        """``{key: row, ...}`` of ``keys``, a slice of rows a step."""
        parts = []
        for count, key in enumerate(keys, 1):
            parts.append(f"{dumps(key)}: {self.row_text(name, key)}")
            if count % SLICE == 0:
                yield
        return "{" + ", ".join(parts) + "}"

    def shared_delta_steps(
        self, state_text: str, whole: tuple[str, ...] = LIVE_LISTS[1:]
    ) -> Steps[str]:
        """The tick's ``delta`` event for every viewer that holds the version before: the
        state (``state_text``) and what changed in the lists it holds whole (``whole``: of
        the exchanges, bindings and connections); encoded once a version."""
        version = self.journal.version
        cached = self._delta_texts.get(whole)
        if cached is None or cached[0] != version:
            delta = self.journal.since(version - 1)
            assert delta is not None
            parts = []
            for name in whole:
                change = delta.lists[name]
                added = yield from self._rows_text_steps(name, change.added)
                changed = yield from self._rows_text_steps(name, change.changed)
                parts.append(
                    f'{dumps(name)}: {{"added": {added}, "changed": {changed}, '
                    f'"removed": {dumps(change.removed)}}}'
                )
            text = (
                f'{{"version": {version}, "since": {version - 1}, "state": {state_text}, '
                f'"lists": {{{", ".join(parts)}}}, "totals": {dumps(delta.totals)}}}'
            )
            cached = self._delta_texts[whole] = (version, text)
        return cached[1]

    def shared_snapshot_steps(
        self, state_text: str, whole: tuple[str, ...] = LIVE_LISTS[1:]
    ) -> Steps[str]:
        """The ``snapshot`` event: the state and every row of the lists held whole
        (``whole``), for a viewer that starts or fell behind; encoded once a version."""
        version = self.journal.version
        cached = self._snapshot_texts.get(whole)
        if cached is None or cached[0] != version:
            rows = self.journal.rows
            parts = []
            for name in whole:
                text = yield from self._rows_text_steps(name, list(rows[name]))
                parts.append(f"{dumps(name)}: {text}")
            text = (
                f'{{"version": {version}, "state": {state_text}, "lists": {{{", ".join(parts)}}}, '
                f'"totals": {dumps(self.journal.totals())}}}'
            )
            cached = self._snapshot_texts[whole] = (version, text)
        return cached[1]

    # a viewer's page ----------------------------------------------------------------------
    def _ordered_steps(self, name: str, query: ListQuery) -> Steps[list[str]]:
        """The keys of list ``name`` that ``query``'s filter keeps, in its order; computed
        once a tick for every viewer, kept while it cannot change."""
        journal = self.journal
        rows = journal.rows[name]
        membership = journal.membership[name]
        default = self._default.get(name)
        if default is None or default[0] != membership:
            default = self._default[name] = (membership, _list_order(name, rows))
        static = query.sort is None or query.sort[0] in STATIC_FIELDS
        signature = (name, query.name, query.use_regex, query.sort, query.sort_reverse)
        cached = self._orders.get(signature)
        current = cached is not None and cached[0] == membership
        if cached is not None and current and (static or cached[1] == journal.version):
            return cached[2]
        unpaged = ListQuery(
            name=query.name,
            use_regex=query.use_regex,
            sort=query.sort,
            sort_reverse=query.sort_reverse,
        )
        selection = yield from select_steps(
            default[1], unpaged, rows.__getitem__, CONSOLE_KINDS[name].names
        )
        self._orders[signature] = (membership, journal.version, selection.items)
        if len(self._orders) > 64:  # viewers' old queries
            for old in [s for s, v in self._orders.items() if v[1] != journal.version][:32]:
                del self._orders[old]
        return selection.items

    def page_steps(self, page: ListPage, whole: bool) -> Steps[str | None]:
        """The viewer's ``page`` event of one list (its rows that changed or are new to
        it, its keys in order, the counts), or None when nothing on its page changed;
        ``whole``: every row of the page, with its history for queues (a viewer that
        starts or fell behind)."""
        journal = self.journal
        name = page.name
        ordered = yield from self._ordered_steps(name, page.query)
        size = page.query.page_size
        page_count = max(1, -(-len(ordered) // size))
        number = min(page.query.page, page_count)
        keys = ordered[(number - 1) * size : number * size]
        counts = {
            "page": number,
            "page_size": size,
            "page_count": page_count,
            "filtered_count": len(ordered),
            "item_count": len(keys),
            "total_count": self.channels_total if name == "channels" else len(journal.rows[name]),
        }
        versions = journal.row_versions[name]
        held = set() if whole else set(page.keys)
        fresh = [k for k in keys if k not in held]
        send = fresh + [k for k in keys if k in held and versions[k] > page.seen]
        if not whole and keys == page.keys and not send and counts == page.counts:
            page.seen = journal.version
            return None
        page.keys, page.seen, page.counts = keys, journal.version, counts
        queues = name == "queues"
        history = ", ".join(f"{dumps(k)}: {dumps(self.history(k))}" for k in fresh if queues)
        rows = yield from self._rows_text_steps(name, send)
        return (
            f'{{"list": {dumps(name)}, "version": {journal.version}, "whole": {dumps(whole)}, '
            f'"keys": {dumps(keys)}, '
            f'"rows": {rows}, "history": {{{history}}}, '
            f"{dumps(counts)[1:-1]}}}"
        )
