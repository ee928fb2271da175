"""The ledger's per-message maps, split by message id so that no insert resizes a big dict.

A dict grows by copying its whole table into a bigger one within one insert: the ledger's
map of live messages and its map of live enqueues, 500,000 entries each behind issue 25's
backlog of 10 x 50,000 messages, both grew in the same publish, 37 ms of CPU quiet and
103-136 ms at load 16 on each of soak44's three brokers (``loop_step_long`` at
``ledger.py message_enqueued``). Split into shards of :data:`SHARD_IDS` consecutive message
ids (ids are handed out in order, so one shard fills at a time), the biggest copy is one
shard's: under a millisecond.

:class:`MessageShards` maps a message id, :class:`EnqueueShards` an enqueue's key (queue id,
message id); each offers the dict operations the ledger uses. THREAD UNSAFE.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["SHARD_BITS", "SHARD_IDS", "EnqueueShards", "MessageShards"]

#: Message ids a shard holds: ``id >> SHARD_BITS`` names its shard.
SHARD_BITS = 15
SHARD_IDS = 1 << SHARD_BITS

V = TypeVar("V")
EnqueueKey = tuple[int, int]  # (queue id, message id)


class MessageShards(Generic[V]):
    """message id -> ``V``, in shards of :data:`SHARD_IDS` ids."""

    __slots__ = ("_shards",)

    def __init__(self, items: dict[int, V] | None = None) -> None:
        self._shards: dict[int, dict[int, V]] = {}
        for message_id, value in (items or {}).items():
            self[message_id] = value

    def __setitem__(self, message_id: int, value: V) -> None:
        shard = self._shards.get(message_id >> SHARD_BITS)
        if shard is None:
            shard = self._shards[message_id >> SHARD_BITS] = {}
        shard[message_id] = value

    def __getitem__(self, message_id: int) -> V:
        return self._shards[message_id >> SHARD_BITS][message_id]

    def get(self, message_id: int) -> V | None:
        shard = self._shards.get(message_id >> SHARD_BITS)
        return None if shard is None else shard.get(message_id)

    def __delitem__(self, message_id: int) -> None:
        number = message_id >> SHARD_BITS
        shard = self._shards[number]
        del shard[message_id]
        if not shard:
            del self._shards[number]

    def drop_one(self: MessageShards[list[int]], message_id: int) -> list[int] | None:
        """For a ledger's ``[segment, enqueues]`` values: one enqueue of ``message_id`` less
        (its count decremented); the value, removed, once that count is 0, else None (the
        dequeue path: one call for the lookup, the count and the removal)."""
        number = message_id >> SHARD_BITS
        shard = self._shards[number]
        value = shard[message_id]
        value[1] -= 1
        if value[1] > 0:
            return None
        del shard[message_id]
        if not shard:
            del self._shards[number]
        return value

    def __contains__(self, message_id: object) -> bool:
        if not isinstance(message_id, int):
            return False
        shard = self._shards.get(message_id >> SHARD_BITS)
        return shard is not None and message_id in shard

    def __len__(self) -> int:
        return sum(map(len, self._shards.values()))

    def __iter__(self) -> Iterator[int]:
        for shard in list(self._shards.values()):
            yield from shard


class EnqueueShards:
    """enqueue key (queue id, message id) -> segment, in shards by message id."""

    __slots__ = ("_shards",)

    def __init__(self, items: dict[EnqueueKey, int] | None = None) -> None:
        self._shards: dict[int, dict[EnqueueKey, int]] = {}
        for key, segment in (items or {}).items():
            self[key] = segment

    def __setitem__(self, key: EnqueueKey, segment: int) -> None:
        shard = self._shards.get(key[1] >> SHARD_BITS)
        if shard is None:
            shard = self._shards[key[1] >> SHARD_BITS] = {}
        shard[key] = segment

    def get(self, key: EnqueueKey) -> int | None:
        shard = self._shards.get(key[1] >> SHARD_BITS)
        return None if shard is None else shard.get(key)

    def pop(self, key: EnqueueKey) -> int | None:
        """The key's segment, removed; None if it has none."""
        number = key[1] >> SHARD_BITS
        shard = self._shards.get(number)
        if shard is None:
            return None
        segment = shard.pop(key, None)
        if not shard:
            del self._shards[number]
        return segment

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple):
            return False
        shard = self._shards.get(key[1] >> SHARD_BITS)
        return shard is not None and key in shard

    def __len__(self) -> int:
        return sum(map(len, self._shards.values()))

    def __iter__(self) -> Iterator[EnqueueKey]:
        for shard in list(self._shards.values()):
            yield from shard
