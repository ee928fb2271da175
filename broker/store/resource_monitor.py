"""Samples the broker's memory and the data directory's free space for the resource alarms.

The thin shell around :class:`~broker.core.alarms.ResourceAlarms`: :meth:`ResourceMonitor.sample`
(called on the broker's tick) reads the resident set size from ``/proc/self/statm`` and the
free space of the data directory's filesystem with ``statvfs``, feeds them to the alarms and
carries out what they return: log ``resource_alarm_raised``/``resource_alarm_cleared`` and
call ``on_block`` with the reason (block publishers) or None (unblock). While the memory
alarm is raised, each sample also hands freed heap pages back to the kernel
(``malloc_trim``, on a thread of its own: :class:`_OffLoopTrim`) so that resident memory
can fall once messages are consumed; so does a sample after the messages the broker holds
(``held``) fell by 32 MiB or more, and once more when they then stay still (the settled trim:
:class:`~broker.core.heap_return.HeapReturn`), alarm or not.

The store's journal calls :meth:`ResourceMonitor.write_failed` when a write fails with
``ENOSPC``: the disk alarm goes up at once.

Linux only (``/proc``). THREAD UNSAFE: the broker's event loop owns it (the trim's thread
touches nothing of it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.core.alarms import (
    Action,
    AlarmCleared,
    AlarmRaised,
    BlockPublishers,
    Resource,
    ResourceAlarms,
    UnblockPublishers,
)
from broker.core.heap_return import HeapReturn

_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_memory() -> int:
    """This process's resident set size in bytes."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * _PAGE


def total_memory() -> int:
    """The memory this process may use: the machine's, or its cgroup's limit if lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            limit = int(Path(path).read_text().strip())
            if 0 < limit < total:
                total = limit
    return total


def free_space(path: str | os.PathLike[str]) -> int:
    """Bytes available to this (unprivileged or not) process on ``path``'s filesystem."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


class _OffLoopTrim:
    """Calls glibc's ``malloc_trim(0)`` on a thread of its own, one at a time: handing back a
    deleted 300,000 x 1 KiB queue's pages took 320-400 ms on the loaded 2-core machine (the
    kernel unmapping ~100,000 pages), a step the event loop must not hold. ctypes releases
    the GIL for the call; the loop waits only if it asks glibc's main arena for memory while
    the trim holds it. A call while a trim runs does nothing (that trim gives it all back)."""

    def __init__(self, trim: Callable[[int], object]) -> None:
        self._trim = trim
        self._running: threading.Thread | None = None

    def __call__(self) -> None:
        if self._running is not None and self._running.is_alive():
            return
        self._running = threading.Thread(
            target=self._trim, args=(0,), name="malloc-trim", daemon=True
        )
        self._running.start()


def _malloc_trim() -> Callable[[], None]:
    """glibc's ``malloc_trim`` off the loop, or a no-op where the C library has none.

    The symbol is looked up in what the process has loaded already (``dlopen(NULL)``: the
    C library is there), not through ``ctypes.util.find_library("c")``, which runs
    ``ldconfig -p`` and parses its listing: 15 ms of CPU at every broker start."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        trim = None
    if trim is None:
        return lambda: None
    return _OffLoopTrim(trim)


class ResourceMonitor:
    """Samples memory and disk, raises and clears the alarms (see the module docstring)."""

    def __init__(
        self,
        alarms: ResourceAlarms,
        data_dir: str | os.PathLike[str] | None,
        log: Any,
        on_block: Callable[[str | None], None],
        *,
        memory: Callable[[], int] = resident_memory,
        disk: Callable[[str | os.PathLike[str]], int] = free_space,
        held: Callable[[], int] | None = None,
        trim: Callable[[], None] | None = None,
    ) -> None:
        self.alarms = alarms
        self.data_dir = data_dir
        self.log = log
        self.on_block = on_block
        self._memory = memory
        self._disk = disk
        self._trim = _malloc_trim() if trim is None else trim
        #: Bytes of the messages the broker holds (None: not watched).
        self._held = held
        self.heap_return = HeapReturn()

    def sample(self) -> None:
        """Take one sample of each resource and act on what changed."""
        alarms = self.alarms
        trimmed = False
        if self._held is not None and self.heap_return.sample(self._held()):
            self._trim()
            trimmed = True
        if alarms.memory_limit:
            if Resource.MEMORY in alarms.raised and not trimmed:
                self._trim()
            self._act(alarms.memory_sample(self._memory()))
        if self.data_dir is not None:
            try:
                free = self._disk(self.data_dir)
            except OSError as exc:
                self.log.warning("disk_sample_failed", path=str(self.data_dir), reason=str(exc))
            else:
                self._act(alarms.disk_sample(free))

    def write_failed(self) -> None:
        """A write to the data directory failed with ENOSPC."""
        self._act(self.alarms.disk_write_failed())

    def _act(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, AlarmRaised):
                self.log.warning(
                    "resource_alarm_raised",
                    resource=action.resource.value,
                    value=action.value,
                    limit=action.limit,
                )
            elif isinstance(action, AlarmCleared):
                self.log.info(
                    "resource_alarm_cleared",
                    resource=action.resource.value,
                    value=action.value,
                    limit=action.limit,
                )
            elif isinstance(action, BlockPublishers):
                self.on_block(action.reason)
            elif isinstance(action, UnblockPublishers):
                self.on_block(None)
