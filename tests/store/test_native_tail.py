"""The journal's tail appended to natively (broker/store/_records.c) as broker/store/tail.py
appends in Python: for any sequence of appends, message and dequeue records, hand-overs,
new segments and transactions on tails near their limit (hypothesis), the same answers, the
same buffers byte for byte and the same counts; nothing changed where either answers None
or raises. Sans-I/O."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store import tail as tail_module
from broker.store.ledger import SegmentUse
from broker.store.records import Kind, encode_dequeue, encode_message_with_enqueue, iter_records
from broker.store.tail import Tail

from .test_native_walk import can_compile

try:
    from broker.store import _records as native_records
except ImportError:  # the first test says so
    native_records = None  # type: ignore[assignment]


def test_the_native_tail_is_built_where_it_can_be() -> None:
    """`pip install -e .` compiles it (setup.py) where a C compiler and Python's headers
    are; elsewhere the journal appends with tail.py's functions."""
    if not can_compile():
        assert native_records is None
        assert tail_module.append is tail_module._append
        return
    assert native_records is not None, "broker/store/_records.c is not built: pip install -e ."
    chosen: list[object] = [
        tail_module.new_tail,
        tail_module.append,
        tail_module.append_message_with_enqueue,
        tail_module.append_dequeue,
    ]
    native: list[object] = [
        native_records.Tail,
        native_records.append,
        native_records.append_message_with_enqueue,
        native_records.append_dequeue,
    ]
    assert all(a is b for a, b in zip(chosen, native, strict=True))


needs_native = pytest.mark.skipif(
    native_records is None,
    reason="no native tail on a machine without a compiler (the test above checks that)",
)

LIMIT = 600
names = st.sampled_from(["", "amq.direct", "q", "é" * 100, "x" * 256, "\udc80"])
ids = st.sampled_from([0, 1, 7, 2**63, 2**64 - 1])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.binary(max_size=120), st.integers(1, 3)),
        st.tuples(
            st.just("message"),
            ids,
            names,
            names,
            st.binary(max_size=8),
            st.binary(max_size=200),
            ids,
            ids,
            ids,
        ),
        st.tuples(st.just("dequeue"), ids, ids),
        st.tuples(st.just("hand over")),
        st.tuples(st.just("segment"), st.integers(0, 40)),
        st.tuples(st.just("renumber")),
        st.tuples(st.just("transaction")),
    ),
    max_size=60,
)


def _state(tail: object) -> tuple[object, ...]:
    pending = [(segment, bytes(buffer)) for segment, buffer in tail.pending]  # type: ignore[attr-defined]
    group = tail.group  # type: ignore[attr-defined]
    return (
        pending,
        tail.current,  # type: ignore[attr-defined]
        tail.size,  # type: ignore[attr-defined]
        tail.unflushed,  # type: ignore[attr-defined]
        tail.appended,  # type: ignore[attr-defined]
        tail.limit,  # type: ignore[attr-defined]
        (tail.use.records, tail.use.live),  # type: ignore[attr-defined]
        None if group is None else bytes(group),
    )


def _outcome(call: Callable[..., int | None], *args: object) -> int | str | None:
    """The answer, or "raised" (an id out of range: OverflowError natively, struct.error
    from Python's struct)."""
    try:
        return call(*args)
    except (OverflowError, struct.error):
        return "raised"


@needs_native
@settings(deadline=None, max_examples=400)
@given(operations=operations)
def test_native_appends_leave_the_tail_python_leaves(operations: list[tuple[object, ...]]) -> None:
    assert native_records is not None
    python_side = (Tail(LIMIT), tail_module._append, tail_module._append_message_with_enqueue)
    native_side = (
        native_records.Tail(LIMIT),
        native_records.append,
        native_records.append_message_with_enqueue,
    )
    python_dequeue, native_dequeue = tail_module._append_dequeue, native_records.append_dequeue
    for tail in (python_side[0], native_side[0]):
        tail.use = SegmentUse()
    for op, *values in operations:
        answers = []
        for (tail, append, append_message), append_dequeue in (
            (python_side, python_dequeue),
            (native_side, native_dequeue),
        ):
            if op == "append":
                answers.append(_outcome(append, tail, values[0], values[1]))
            elif op == "message":
                answers.append(_outcome(append_message, tail, *values))
            elif op == "dequeue":
                answers.append(_outcome(append_dequeue, tail, *values))
            elif op == "hand over":
                tail.pending = []
                tail.unflushed = 0
            elif op == "segment":  # as Journal._open_segment does
                header = values[0]
                assert isinstance(header, int)
                tail.current += 1
                tail.use = SegmentUse()
                tail.pending.append((tail.current, bytearray(b"h" * header)))
                tail.size = header
            elif op == "renumber":  # the last buffer another segment's: never appended to
                tail.current += 1
            elif op == "transaction":
                tail.group = bytearray() if tail.group is None else None
        assert answers[:1] * len(answers) == answers, (op, values)
        assert _state(python_side[0]) == _state(native_side[0])


@needs_native
def test_what_is_appended_are_the_records_the_encoders_make() -> None:
    """A message, its enqueue and a dequeue in the buffer: the bytes of the Python encoders,
    read back as records; counted in the segment's use; the segment answered."""
    assert native_records is not None
    tail = native_records.Tail(1 << 20)
    tail.use = use = SegmentUse()
    tail.current = 3
    tail.pending.append((3, bytearray()))
    assert (
        native_records.append_message_with_enqueue(tail, 9, "ex", "rk", b"\x00", b"body", 2, 5, 0)
        == 3
    )
    assert native_records.append_dequeue(tail, 2, 9) == 3
    expected = encode_message_with_enqueue(
        9, "ex", "rk", b"\x00", b"body", 2, 5, 0
    ) + encode_dequeue(2, 9)
    assert bytes(tail.pending[0][1]) == expected
    kinds = [record[2] for record in iter_records(expected, 0)]  # type: ignore[index]
    assert kinds == [Kind.MESSAGE, Kind.ENQUEUE, Kind.DEQUEUE]
    assert (use.records, tail.appended, tail.size, tail.unflushed) == (
        3,
        3,
        len(expected),
        len(expected),
    )


@needs_native
def test_the_native_appends_refuse_what_the_journal_never_passes() -> None:
    """Wrong shapes raise TypeError, a use without a record count AttributeError, with the
    buffer as it was; never a crash."""
    assert native_records is not None
    tail = native_records.Tail(1 << 20)
    tail.pending.append((0, bytearray(b"h")))
    with pytest.raises(TypeError):
        native_records.append([], b"x", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native_records.append_dequeue(tail, 1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        native_records.append(tail, "text", 1)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):  # use is None
        native_records.append(tail, b"record", 1)
    assert bytes(tail.pending[0][1]) == b"h" and tail.size == tail.appended == 0
    tail.pending = [(0, b"not a bytearray")]  # type: ignore[list-item]
    tail.use = SegmentUse()
    assert native_records.append(tail, b"record", 1) is None
    with pytest.raises(TypeError):
        native_records.Tail()  # type: ignore[call-arg]
