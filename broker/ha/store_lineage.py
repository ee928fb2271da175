"""Shell of :mod:`broker.ha.store_history`: this broker's store epoch, kept in its data
directory, and what a backup does when its store diverged.

- :meth:`StoreLineage.replicating` (a backup's link is up to a primary of some epoch:
  recorded before anything of that era is applied);
- :meth:`StoreLineage.promoted` (this broker becomes the primary: its base epoch is the
  store's era until now, announced to backups as ``qpid.ha-base-epoch``);
- :meth:`StoreLineage.check` (a backup dialled a primary: None to go on, or why not, with
  the marker that makes the next start move the store aside).

THREAD UNSAFE: the broker's event loop owns it (the file writes are small and rare: one a
link-up to a primary of a newer epoch, one a promotion). A promotion's write runs in a
thread, awaited (:meth:`StoreLineage.promoted`): its two fsyncs wait for the disk's journal,
tens of ms on a busy disk, which the loop would otherwise stand still for; nothing else
uses the lineage meanwhile (the link is dropped before the promotion's work starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from broker.ha.epoch import EpochStore
from broker.ha.store_history import (
    DISCARD_MARKER,
    STORE_EPOCH_FILE,
    diverged,
    divergence_reason,
)


class StoreLineage:
    """The era of this broker's store (see the module docstring)."""

    def __init__(self, data_dir: str | os.PathLike[str] | None, log: Any) -> None:
        self.data_dir = None if data_dir is None else Path(data_dir)
        self.log = log
        self.store_epoch = EpochStore(data_dir, STORE_EPOCH_FILE)
        self.store_epoch.load()
        #: As primary: the era of the store it was promoted from (None: not a primary).
        self.base_epoch: int | None = None

    def replicating(self, primary_epoch: int) -> None:
        """The link is up to a primary of ``primary_epoch``: its era is the store's now.
        :raises EpochError: the file cannot be written."""
        self.store_epoch.observe(primary_epoch)

    async def promoted(self, epoch: int) -> None:
        """This broker became the primary at ``epoch``: the store's era is ``epoch`` (durable
        when this returns; written in a thread, off the loop), its base epoch the era until
        now. The caller writes nothing of the new era before this returns, and has written
        the broker's own epoch (``ha-epoch``) before it: a crash between the two leaves a
        broker whose epoch is ahead of its store's era, never a store holding an era its
        epoch never reached.

        :raises EpochError: the file cannot be written (the base epoch is then unchanged)."""
        base = self.store_epoch.current
        await asyncio.to_thread(self.store_epoch.observe, epoch)
        self.base_epoch = base

    def check(self, primary_epoch: int, base_epoch: int | None, address: str) -> str | None:
        """Before replicating from the primary at ``address``: None to go on, else why not
        (the store diverged: the marker is written, the caller stops the broker)."""
        store_epoch = self.store_epoch.current
        if not diverged(store_epoch, base_epoch, primary_epoch):
            return None
        assert base_epoch is not None
        reason = divergence_reason(store_epoch, base_epoch, primary_epoch, address)
        self.log.error(
            "ha_store_diverged",
            store_epoch=store_epoch,
            base_epoch=base_epoch,
            primary_epoch=primary_epoch,
            primary=address,
            reason=reason,
        )
        if self.data_dir is not None:
            with contextlib.suppress(OSError):  # unwritable: the next dial says it again
                (self.data_dir / DISCARD_MARKER).write_text(reason + "\n", encoding="utf-8")
        return reason
