"""The ledger's native per-message operations (broker/store/_ledger.c) leave a ledger as the
Python ones do (broker/store/ledger.py), for any sequence of enqueues, fan-outs,
deliveries, dequeues, queue deletions and compaction moves (hypothesis): the same answers,
the same live counts per segment, the same maps. Sans-I/O."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store import ledger as ledger_module
from broker.store.id_shards import SHARD_IDS
from broker.store.ledger import Ledger
from broker.store.records import Kind

from .test_native_walk import can_compile

try:
    from broker.store import _ledger as native_ledger
except ImportError:  # the first test says so
    native_ledger = None  # type: ignore[assignment]


def test_the_native_ledger_is_built_where_it_can_be() -> None:
    """`pip install -e .` compiles it (setup.py) where a C compiler and Python's headers
    are; elsewhere the ledger runs the same operations in Python."""
    if not can_compile():
        assert native_ledger is None
        assert ledger_module._dequeued is ledger_module._py_dequeued
        return
    assert native_ledger is not None, "broker/store/_ledger.c is not built: pip install -e ."
    assert ledger_module._dequeued is native_ledger.dequeued
    assert ledger_module._message_enqueued is native_ledger.message_enqueued


needs_native = pytest.mark.skipif(
    native_ledger is None,
    reason="no native ledger on a machine without a compiler (the test above checks that)",
)

# A few message ids, so that operations meet on the same ones: either side of shard
# boundaries, and one far away (a shard of its own).
ids = st.sampled_from([1, SHARD_IDS - 1, SHARD_IDS, 2**40])
operations = st.lists(
    st.tuples(
        st.sampled_from(
            ["publish", "publish", "fan-out", "deliver", "dequeue", "dequeue", "queue", "move"]
        ),
        st.integers(1, 2),  # queue id
        ids,
        st.integers(1, 4),  # segment (5 and 6 are never opened: counts there are not kept)
    ),
    min_size=10,
    max_size=150,
)


def _state(ledger: Ledger) -> tuple[object, ...]:
    lookups = ledger.lookups()
    messages = {m: list(lookups[1](m) or []) for m in ledger._messages}
    enqueues = {k: lookups[0](k) for k in ledger._enqueues}
    uses = {n: (u.records, u.live) for n, u in ledger.segments.items()}
    shard_sizes = sorted(len(s) for s in ledger._messages._shards.values())
    enqueue_shards = sorted(len(s) for s in ledger._enqueues._shards.values())
    return (
        messages,
        enqueues,
        uses,
        set(ledger.delivered),
        ledger.live_messages,
        0 in shard_sizes or 0 in enqueue_shards,  # no empty shard left behind
    )


@needs_native
@settings(deadline=None, max_examples=400)
@given(operations=operations)
def test_native_operations_leave_the_ledger_python_leaves(
    operations: list[tuple[str, int, int, int]],
) -> None:
    assert native_ledger is not None
    ledgers = [Ledger(), Ledger()]
    ops = [
        (native_ledger.message_enqueued, native_ledger.dequeued),
        (ledger_module._py_message_enqueued, ledger_module._py_dequeued),
    ]
    for ledger in ledgers:
        for segment in (1, 2, 3, 4):
            ledger.opened(segment)
    for op, queue_id, message_id, segment in operations:
        answers: list[bool | None] = []
        for ledger, (enqueued, dequeued) in zip(ledgers, ops, strict=True):
            key = (queue_id, message_id)
            if op == "publish" and not ledger.has_message(message_id):
                enqueued(ledger._messages, ledger._enqueues, ledger.segments, key, segment)
                answers.append(None)
            elif op == "fan-out" and ledger.has_message(message_id):
                if not ledger.has_enqueue(key):
                    ledger.enqueued(key, segment)
            elif op == "deliver" and ledger.has_enqueue(key):
                ledger.delivered.add(key)
            elif op == "dequeue":
                answers.append(
                    dequeued(
                        ledger._messages, ledger._enqueues, ledger.segments, ledger.delivered, key
                    )
                )
            elif op == "queue":
                ledger.queue_deleted(queue_id)
            elif op == "move" and ledger.has_message(message_id):
                old = ledger.lookups()[1](message_id)
                assert old is not None
                ledger.moved(Kind.MESSAGE, (message_id,), old[0], segment)
            if op == "publish" and segment == 4:
                ledger.segments.pop(4, None)  # a segment compacted away meanwhile
        assert answers[:1] * len(answers) == answers
        assert _state(ledgers[0]) == _state(ledgers[1])
    assert not _state(ledgers[0])[-1]


@needs_native
def test_the_native_operations_refuse_what_the_ledger_never_passes() -> None:
    """Wrong shapes raise TypeError (not a crash); a missing message raises KeyError, as
    MessageShards.drop_one does in Python."""
    ledger = Ledger()
    ledger.opened(1)
    native = native_ledger
    assert native is not None
    with pytest.raises(TypeError):
        native.message_enqueued(ledger._messages, ledger._enqueues, {}, (1, 2, 3), 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native.dequeued(ledger._messages, ledger._enqueues, ledger.segments, [], (1, 2))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native.dequeued(ledger._messages)  # type: ignore[call-arg]
    ledger._enqueues[(1, 5)] = 1  # an enqueue whose message is not in the ledger
    with pytest.raises(KeyError):
        native.dequeued(ledger._messages, ledger._enqueues, ledger.segments, set(), (1, 5))
    assert not native.dequeued(ledger._messages, ledger._enqueues, ledger.segments, set(), (1, 6))


def test_the_ledger_uses_them() -> None:
    """A publish and its dequeue through the Ledger's methods: the live counts they keep."""
    ledger = Ledger()
    ledger.opened(1)
    ledger.message_enqueued((1, 7), 1)
    assert ledger.segments[1].live == 2 and ledger.has_message(7) and ledger.has_enqueue((1, 7))
    assert ledger.dequeued((1, 7))
    assert ledger.segments[1].live == 0 and not ledger.has_message(7)
    assert not ledger.dequeued((1, 7))
