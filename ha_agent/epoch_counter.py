"""The cluster's fencing epoch: a strictly increasing number handed out by ZooKeeper.

:Status: Stable

Each promotion takes the next epoch (ARCHITECTURE.md, invariant 3). The counter is the
znode ``/qpid-ha/<cluster>/epoch`` (:class:`ha_agent.zk_layout.ClusterLayout`) holding the
last value handed out as ASCII decimal digits. It is created holding ``0`` when absent, so
the first epoch of a new cluster is 1.

:func:`next_epoch` reads the value and its version, then writes value + 1 with a
version-checked ``set``. ZooKeeper applies at most one ``set`` per version, so two callers
never get the same value, and values grow in the order ZooKeeper committed them. A caller
that loses the race (``BadVersionError``) reads again; with N concurrent callers each round
has a winner, so the loop ends.

A value can be skipped (never handed to anyone) when the connection drops after ZooKeeper
applied a ``set`` but before its answer arrived: the retry finds a newer version and takes
the next value. Gaps are harmless: an epoch only has to be larger than every earlier one.

``minimum`` lets the caller jump past epochs the brokers already know from their data
directories (e.g. after the ZooKeeper data was lost): the result is never lower than it.

Error Handling
==============

- :class:`EpochCounterError` if the znode holds something that is not an epoch, or the
  counter would pass :data:`MAX_EPOCH`. The znode is left as it is.
- Connection loss is retried through ``client.retry`` (the client's command retry policy);
  when that gives up, kazoo's ``ConnectionLoss``/``SessionExpiredError``/
  ``RetryFailedError`` propagate and no epoch was taken by this call (at most one skipped).
- Blocks: call it from a thread, not from an event loop.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import structlog
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ha_agent.zk_layout import ClusterLayout

__all__ = [
    "MAX_EPOCH",
    "EpochCounterError",
    "cover_epoch",
    "next_epoch",
    "raise_epoch",
    "read_counter",
    "read_epoch",
]

_log = structlog.get_logger("ha_agent.epoch_counter", component="agent")

#: The largest epoch: a signed 64-bit number, like the broker's ``ha-epoch`` file.
MAX_EPOCH = 2**63 - 1

_DIGITS = re.compile(rb"[0-9]{1,19}")


class EpochCounterError(Exception):
    """The epoch znode holds no epoch, or the counter is exhausted (names the znode)."""


def _parse(path: str, data: bytes | None) -> int:
    data = (data or b"").strip()
    if not _DIGITS.fullmatch(data) or int(data) > MAX_EPOCH:
        raise EpochCounterError(f"{path} holds {data[:40]!r}, not an epoch (0..{MAX_EPOCH})")
    return int(data)


def _read_or_create(client: Any, path: str) -> tuple[int, int]:
    """(value, version) of the counter, creating it at 0 when absent."""
    while True:
        try:
            data, stat = client.retry(client.get, path)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):  # else another caller made it: read it
                client.retry(client.create, path, b"0", makepath=True)
            continue
        return _parse(path, data), int(stat.version)


def read_counter(client: Any, cluster: str) -> tuple[int, int]:
    """(the last epoch handed out, the counter znode's version), creating it at 0 when
    absent: a promotion's multi-op sets it at that version (:mod:`ha_agent.promotion_txn`),
    a change of the in-sync set checks it."""
    return _read_or_create(client, ClusterLayout(cluster).epoch)


def raise_epoch(client: Any, cluster: str, epoch: int) -> int:
    """Make the counter at least ``epoch`` (an epoch a broker reports that the counter
    never handed out: a promotion outside the agents, ``qpid-ha --cluster-manager
    promote``), so that no later promotion takes it again; never lowers it. Returns the
    counter's value."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"not an epoch: {epoch!r}")
    path = ClusterLayout(cluster).epoch
    while True:
        current, version = _read_or_create(client, path)
        if current >= epoch:
            return current
        try:
            client.retry(client.set, path, str(epoch).encode("ascii"), version=version)
        except BadVersionError:
            continue  # someone took an epoch since we read: read again
        return epoch


def cover_epoch(client: Any, cluster: str, epoch: int) -> int:
    """A broker reports ``epoch``: raise the counter to it when the counter never handed it
    out (the broker was promoted outside the agents: qpid-ha --cluster-manager promote), so
    that no promotion takes that epoch again (``epoch_counter_raised``). Returns the epoch
    the counter is known to have reached, at least ``epoch``."""
    counter = read_epoch(client, cluster)
    if counter < epoch:
        counter = raise_epoch(client, cluster, epoch)
        _log.warning(
            "epoch_counter_raised",
            broker_epoch=epoch,
            new_epoch=counter,
            reason="the broker is at an epoch ZooKeeper never handed out: promoted"
            " outside the agents (qpid-ha --cluster-manager promote?)",
        )
    return max(counter, epoch)


def read_epoch(client: Any, cluster: str) -> int:
    """The last epoch handed out in ``cluster`` (0 when none was), without taking one."""
    path = ClusterLayout(cluster).epoch
    try:
        data, _ = client.retry(client.get, path)
    except NoNodeError:
        return 0
    return _parse(path, data)


def next_epoch(client: Any, cluster: str, *, minimum: int = 1) -> int:
    """Take the next fencing epoch of ``cluster``: larger than every one handed out before.

    ``client`` is a started ``kazoo.client.KazooClient``. The result is at least
    ``minimum``.
    """
    if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
        raise ValueError(f"minimum must be a positive integer: {minimum!r}")
    path = ClusterLayout(cluster).epoch
    while True:
        current, version = _read_or_create(client, path)
        value = max(current + 1, minimum)
        if value > MAX_EPOCH:
            raise EpochCounterError(f"{path}: the epoch counter is exhausted at {current}")
        try:
            client.retry(client.set, path, str(value).encode("ascii"), version=version)
        except BadVersionError:
            continue  # someone took an epoch since we read: read again
        return value
