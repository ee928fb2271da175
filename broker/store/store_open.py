"""Opening the message store at a broker's start: recover what the data directory holds into
the virtual hosts, then start writing (docs/store.md).

:func:`open_store` makes the :class:`~broker.store.journal.Journal`, recovers it (a store
written by a newer broker, or damaged, is a :class:`~broker.store.journal.StoreError` naming
what to do: the broker exits 2), puts what it held into the virtual hosts (a torn tail marks
the store ``dirty``: a clean stop leaves none), starts the journal's writer and logs
``store_recovered`` (and ``store_restored_from_backup`` on ``qpid-ha restore``'s first start,
``store_sync_weakened`` when the sync policy is not ``fsync``). The broker then hands the
store's barrier and hooks to its connections (``BrokerContext.attach``).

THREAD UNSAFE: the broker's event loop calls it, before it listens.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator

from broker.core.vhosts import VirtualHosts
from broker.store.data_dir import DataDir
from broker.store.hot_backup import take_restored_marker
from broker.store.journal import Journal, StoreError, SyncPolicy
from broker.store.message_store import MessageStore
from broker.store.recovery import WALKER, CorruptStore, NewerStore
from common.log import get_logger

__all__ = ["open_store"]

_SYNC_RISK = {
    SyncPolicy.WRITE: "a confirmed persistent message is in the OS, not on the disk: a machine"
    " crash or power cut loses the last writes",
    SyncPolicy.NONE: "a confirm goes out before the message is written: a broker crash loses"
    " what was not written yet",
}


def open_store(
    data_dir: DataDir,
    vhosts: VirtualHosts,
    *,
    sync: SyncPolicy,
    cut_damaged: bool,
    on_write_failed: Callable[[OSError], None],
) -> MessageStore:
    """Recover the message store into ``vhosts``, then start writing to it."""
    log = get_logger("store")
    started = time.monotonic()
    journal = Journal(
        data_dir.path,
        sync=sync,
        log=log,
        on_write_failed=on_write_failed,
        compaction_lag=1,  # read a segment a segment late: its messages are gone by then
    )
    with _gc_paused():
        try:
            state = journal.recover(cut_damaged=cut_damaged)
        except NewerStore as exc:
            raise StoreError(f"the store in {journal.directory} is not damaged: {exc}") from None
        except CorruptStore as exc:
            raise StoreError(
                f"the store in {journal.directory} is damaged ({exc}); to start from what"
                " precedes the damage, moving the rest aside, run qpidd with"
                " --store-cut-damaged=yes (docs/store.md)"
            ) from None
        if state.torn_tail is not None:
            data_dir.store_status = "dirty"  # a clean stop leaves no torn record
        store = MessageStore(journal, vhosts)
        store.recover_into(state, crashed=data_dir.store_status == "dirty")
    journal.start()
    restored = take_restored_marker(data_dir.path)  # qpid-ha restore's first start
    if restored is not None:
        log.warning("store_restored_from_backup", **restored)
    log.info(
        "store_recovered",
        store_status=data_dir.store_status,
        store_id=data_dir.store_id,
        exchanges=len(state.exchanges),
        queues=len(state.queues),
        bindings=len(state.bindings),
        messages=store.recovered_messages,
        records=state.record_count,
        segments=len(state.segments),
        seconds=round(time.monotonic() - started, 3),
        sync=journal.sync.value,
        walker=WALKER,
    )
    if journal.sync is not SyncPolicy.FSYNC:
        # The operator's explicit choice (docs/store.md, "Sync policies"), said loudly:
        # a confirm then no longer means "on the disk".
        log.warning("store_sync_weakened", sync=journal.sync.value, risk=_SYNC_RISK[journal.sync])
    return store


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the store is recovered. Recovery creates several
    long-lived objects per message (records, then messages and queue entries), and CPython
    would run full collections over everything recovered so far again and again: 43 % of
    the CPU of recovering 1M messages (docs/benchmarks.md, issue 11). Reference counting
    frees what recovery drops meanwhile; collections resume afterwards, with what was
    recovered moved to the collector's permanent generation (``gc.freeze()``, constant
    time): the first collections would otherwise walk every recovered message, three
    times (generations 0, 1 and 2: 1.6-2.2 s of CPU for 1M x 1 KiB, issue 12). Messages
    freed later are freed by reference counting as always; only reference cycles among
    recovered objects are never collected (until a backup's catch-up unfreezes everything
    at its end, CatchUpGc)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if enabled:
            gc.enable()
