"""The ledger's per-message maps in shards (:mod:`broker.store.id_shards`): the same answers
as a dict for any sequence of the ledger's operations (hypothesis), and no shard past
:data:`~broker.store.id_shards.SHARD_IDS` ids, whose resize is the biggest copy an insert
makes (soak44: a 500,000-entry dict resized in one publish, 103-136 ms at load 16)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.id_shards import SHARD_BITS, SHARD_IDS, EnqueueShards, MessageShards

ids = st.integers(0, 4 * SHARD_IDS) | st.integers(0, 2**63 - 1)
operations = st.lists(
    st.tuples(st.sampled_from(["set", "del", "pop"]), st.integers(0, 3), ids, st.integers()),
    max_size=200,
)


@settings(deadline=None, max_examples=300)
@given(operations=operations)
def test_shards_answer_as_one_dict(operations: list[tuple[str, int, int, int]]) -> None:
    messages: MessageShards[int] = MessageShards()
    enqueues = EnqueueShards()
    flat_messages: dict[int, int] = {}
    flat_enqueues: dict[tuple[int, int], int] = {}
    for op, queue, message_id, value in operations:
        key = (queue, message_id)
        if op == "set":
            messages[message_id] = value
            flat_messages[message_id] = value
            enqueues[key] = value
            flat_enqueues[key] = value
        elif op == "del" and message_id in flat_messages:
            del messages[message_id]
            del flat_messages[message_id]
        elif op == "pop":
            assert enqueues.pop(key) == flat_enqueues.pop(key, None)
        assert (message_id in messages) == (message_id in flat_messages)
        assert messages.get(message_id) == flat_messages.get(message_id)
        assert (key in enqueues) == (key in flat_enqueues)
        assert enqueues.get(key) == flat_enqueues.get(key)
    assert {m: messages[m] for m in messages} == flat_messages
    assert {k: enqueues.get(k) for k in enqueues} == flat_enqueues
    assert (len(messages), len(enqueues)) == (len(flat_messages), len(flat_enqueues))
    assert MessageShards(flat_messages).get(0) == flat_messages.get(0)
    assert len(EnqueueShards(flat_enqueues)) == len(flat_enqueues)


def test_a_backlog_fills_shards_of_bounded_size() -> None:
    enqueues = EnqueueShards()
    for message_id in range(1, 200_001):
        enqueues[(message_id % 10, message_id)] = 1
    shards = enqueues._shards
    assert len(shards) == 200_000 // SHARD_IDS + 1
    assert max(map(len, shards.values())) == SHARD_IDS
    assert all(key[1] >> SHARD_BITS == n for n, shard in shards.items() for key in shard)


counted = st.lists(
    st.tuples(st.booleans(), ids, st.integers(-1, 3), st.integers(0, 9)), max_size=200
)


@settings(deadline=None, max_examples=300)
@given(operations=counted)
def test_drop_one_counts_down_as_the_ledger_did(
    operations: list[tuple[bool, int, int, int]],
) -> None:
    """``drop_one`` (the ledger's dequeue) answers as the lookup, decrement and removal it
    replaced: None while enqueues are left, the value, removed, at the last one; and it
    leaves no empty shard behind."""
    messages: MessageShards[list[int]] = MessageShards()
    flat: dict[int, list[int]] = {}
    for add, message_id, count, segment in operations:
        if add:
            messages[message_id] = [segment, count]
            flat[message_id] = [segment, count]
        elif message_id in flat:
            expected = flat[message_id]
            expected[1] -= 1
            gone = expected if expected[1] <= 0 else None
            if gone is not None:
                del flat[message_id]
            assert messages.drop_one(message_id) == gone
        assert messages.get(message_id) == flat.get(message_id)
    assert {m: messages[m] for m in messages} == flat
    assert all(messages._shards.values())
