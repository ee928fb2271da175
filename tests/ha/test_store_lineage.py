"""StoreLineage.promoted: the store's new era durable before it returns, its fsyncs run off
the event loop (issue 25: at 10,000 queues a promotion's fsyncs took 28-31 ms each on a
busy disk, one of them on the loop), and the base epoch the era until then."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.ha.epoch import EpochError
from broker.ha.store_history import STORE_EPOCH_FILE
from broker.ha.store_lineage import StoreLineage


class Log:
    def error(self, event: str, **fields: Any) -> None:
        raise AssertionError(f"unexpected {event} {fields}")


def test_promoted_writes_the_era_in_a_thread_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / STORE_EPOCH_FILE).write_text("3\n")
    lineage = StoreLineage(tmp_path, Log())
    synced_on: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # the real fsync, noting the thread it ran on
        synced_on.append(threading.get_ident())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)  # the module calls os.fsync

    async def promote() -> int:
        await lineage.promoted(7)
        return threading.get_ident()

    loop_thread = asyncio.run(promote())
    assert (tmp_path / STORE_EPOCH_FILE).read_text() == "7\n"
    assert lineage.base_epoch == 3 and lineage.store_epoch.current == 7
    assert synced_on and loop_thread not in synced_on  # file and directory, off the loop


def test_a_failed_write_leaves_the_lineage_as_it_was(tmp_path: Path) -> None:
    data = tmp_path / "data"
    lineage = StoreLineage(data, Log())  # loads: no file yet, era 0
    data.write_text("")  # a file where the data directory should be: no write can succeed
    with pytest.raises(EpochError, match="cannot write"):
        asyncio.run(lineage.promoted(2))
    assert lineage.base_epoch is None and lineage.store_epoch.current == 0
