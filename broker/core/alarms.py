"""Resource alarms: the memory and disk watermarks that block publishers.

RabbitMQ's memory and disk alarms, in our words. The broker samples two figures now and
then: its resident memory (against ``--max-memory``, the high watermark) and the free space
of the data directory's filesystem (against ``--disk-free-limit``). Crossing a limit raises
that resource's alarm; while any alarm is raised, publishers are blocked (the connections
send ``connection.blocked`` and stop reading from publishing clients); when the last alarm
clears they are unblocked. Each alarm clears only past a margin (hysteresis), so a figure
hovering at the limit does not flap: memory clears below ``limit * (1 - hysteresis)``, free
disk above ``limit * (1 + hysteresis)`` (at least :data:`MIN_DISK_MARGIN` above it).

A journal write that fails for lack of space (``ENOSPC``) raises the disk alarm at once,
whatever the last sample said; it clears once a sample shows the free space above the
clearing mark and grown by the margin since the failure (space came back).

:class:`ResourceAlarms` takes samples and returns actions (raise/clear, block/unblock); it
reads no file and keeps no clock. :func:`parse_size` and :func:`memory_limit_bytes` read the
options' sizes (``512MB``, ``2GiB``, ``40%`` of the machine's memory). The shell that
samples and acts is :mod:`broker.store.resource_monitor`.

THREAD UNSAFE: one event loop owns it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

#: A cleared disk alarm needs at least this much free space above the limit.
MIN_DISK_MARGIN = 1024 * 1024
#: Default clearing margin, as a share of the limit.
HYSTERESIS = 0.05

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "kb": 1000,
    "m": 1024**2,
    "mib": 1024**2,
    "mb": 1000**2,
    "g": 1024**3,
    "gib": 1024**3,
    "gb": 1000**3,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 1000**4,
}
_SIZE = re.compile(r"([0-9]+)\s*([a-z]*)")
_SHARE = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*%")
SIZE_EXPECTED = "expected a size in bytes like 1048576, 512MB or 2GiB"
MEMORY_EXPECTED = "expected a size like 512MB or 2GiB, or a share of memory like 40% (0 = no limit)"


class Resource(StrEnum):
    """A watched resource."""

    MEMORY = "memory"
    DISK = "disk"


@dataclass(frozen=True, slots=True)
class AlarmRaised:
    """A resource crossed its limit (``value`` is the sample, or None after a write failure)."""

    resource: Resource
    value: int | None
    limit: int


@dataclass(frozen=True, slots=True)
class AlarmCleared:
    """A resource is back past its clearing mark."""

    resource: Resource
    value: int
    limit: int


@dataclass(frozen=True, slots=True)
class BlockPublishers:
    """The first alarm was raised: block publishing connections (``reason`` for the client)."""

    reason: str


@dataclass(frozen=True, slots=True)
class UnblockPublishers:
    """The last alarm cleared: publishers may go on."""


Action = AlarmRaised | AlarmCleared | BlockPublishers | UnblockPublishers


def parse_size(text: str) -> int:
    """``1048576``, ``512MB`` (10^6), ``512M``/``512MiB`` (2^20), ...; ValueError otherwise."""
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _UNITS or len(match.group(1)) > 20:
        raise ValueError(SIZE_EXPECTED)
    return int(match.group(1)) * _UNITS[match.group(2)]


def memory_limit_bytes(text: str, total_memory: int) -> int:
    """A ``--max-memory`` value in bytes: a size, or a share (``40%``) of ``total_memory``.

    0 means no limit. Raises ValueError with what was expected.
    """
    share = _SHARE.fullmatch(text.strip())
    if share is not None:
        percent = float(share.group(1))
        if not 0 <= percent <= 100:
            raise ValueError(MEMORY_EXPECTED)
        return int(total_memory * percent / 100)
    try:
        return parse_size(text)
    except ValueError:
        raise ValueError(MEMORY_EXPECTED) from None


class ResourceAlarms:
    """The memory and disk alarms (see the module docstring).

    ``memory_limit`` is the high watermark of resident memory in bytes, ``disk_free_limit``
    the least free space in bytes; 0 (or None) switches that alarm off.
    """

    def __init__(
        self,
        memory_limit: int | None,
        disk_free_limit: int | None,
        *,
        hysteresis: float = HYSTERESIS,
    ) -> None:
        if not 0 <= hysteresis < 1:
            raise ValueError(f"hysteresis {hysteresis} outside [0, 1)")
        self.memory_limit = memory_limit or 0
        self.disk_free_limit = disk_free_limit or 0
        self.hysteresis = hysteresis
        self.raised: set[Resource] = set()
        self.memory_used: int | None = None
        self.disk_free: int | None = None
        #: After a failed write: the free space must grow past this (None: not sampled yet).
        self._disk_failed = False
        self._disk_free_at_failure: int | None = None

    # -- inspection --------------------------------------------------------------------
    @property
    def blocked(self) -> bool:
        return bool(self.raised)

    @property
    def reason(self) -> str | None:
        """What a blocked client is told (RabbitMQ's words), None when not blocked."""
        if not self.raised:
            return None
        names = [r.value for r in Resource if r in self.raised]
        return "low on " + " and ".join(names)

    @property
    def memory_clear_mark(self) -> int:
        return int(self.memory_limit * (1 - self.hysteresis))

    @property
    def disk_clear_mark(self) -> int:
        margin = max(int(self.disk_free_limit * self.hysteresis), MIN_DISK_MARGIN)
        return self.disk_free_limit + margin

    # -- inputs ------------------------------------------------------------------------
    def memory_sample(self, used: int) -> list[Action]:
        """The broker's resident memory, in bytes."""
        self.memory_used = used
        limit = self.memory_limit
        if not limit:
            return []
        if Resource.MEMORY not in self.raised:
            if used >= limit:
                return self._raise(AlarmRaised(Resource.MEMORY, used, limit))
        elif used < self.memory_clear_mark:
            return self._clear(AlarmCleared(Resource.MEMORY, used, limit))
        return []

    def disk_sample(self, free: int) -> list[Action]:
        """Free space on the data directory's filesystem, in bytes."""
        self.disk_free = free
        limit = self.disk_free_limit
        if self._disk_failed and self._disk_free_at_failure is None:
            self._disk_free_at_failure = free
        if Resource.DISK not in self.raised:
            if limit and free < limit:
                return self._raise(AlarmRaised(Resource.DISK, free, limit))
            return []
        if free < self.disk_clear_mark:
            return []
        if self._disk_failed:
            base = self._disk_free_at_failure
            if base is None or free < base + max(int(limit * self.hysteresis), MIN_DISK_MARGIN):
                return []
        self._disk_failed = False
        self._disk_free_at_failure = None
        return self._clear(AlarmCleared(Resource.DISK, free, limit))

    def disk_write_failed(self) -> list[Action]:
        """A write to the data directory failed for lack of space: raise the disk alarm."""
        self._disk_failed = True
        self._disk_free_at_failure = None
        if Resource.DISK in self.raised:
            return []
        return self._raise(AlarmRaised(Resource.DISK, None, self.disk_free_limit))

    # -- transitions -------------------------------------------------------------------
    def _raise(self, raised: AlarmRaised) -> list[Action]:
        first = not self.raised
        self.raised.add(raised.resource)
        actions: list[Action] = [raised]
        if first:
            actions.append(BlockPublishers(self.reason or ""))
        return actions

    def _clear(self, cleared: AlarmCleared) -> list[Action]:
        self.raised.discard(cleared.resource)
        actions: list[Action] = [cleared]
        if not self.raised:
            actions.append(UnblockPublishers())
        return actions
