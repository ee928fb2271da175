"""The native publisher confirms (broker/core/_confirms.c) behave as the Python classes
(broker/core/confirms.py) for any sequence of publishes with and without a message, holds,
releases (ok or not), replies taken and a close (hypothesis): the same replies, the same
errors, the same settled flags, outstanding counts and settlement calls, and each message
keeps its handle exactly while it is not settled. A publish never settled is collected with
its message. Sans-I/O."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core import confirms as confirms_module
from broker.core.confirms import (
    ConfirmHandle,
    ConfirmReply,
    PublisherConfirms,
    PythonPublisherConfirms,
)

from ..store.test_native_walk import can_compile

try:
    from broker.core import _confirms as native_confirms
except ImportError:  # the first test says so
    native_confirms = None  # type: ignore[assignment]


def test_the_native_handle_is_built_where_it_can_be() -> None:
    """`pip install -e .` compiles it (setup.py) where a C compiler and Python's headers
    are; elsewhere PublisherConfirms makes the Python class's handles."""
    if not can_compile():
        assert native_confirms is None
        assert PublisherConfirms is PythonPublisherConfirms
        return
    assert native_confirms is not None, "broker/core/_confirms.c is not built: pip install -e ."
    assert cast(object, PublisherConfirms) is native_confirms.PublisherConfirms
    assert cast(object, ConfirmHandle) is native_confirms.ConfirmHandle
    assert confirms_module.NATIVE


needs_native = pytest.mark.skipif(
    native_confirms is None,
    reason="no native handle on a machine without a compiler (the test above checks that)",
)


class Message:
    """A published message as a handle sees it."""

    __slots__ = ("__weakref__", "confirm")

    def __init__(self) -> None:
        self.confirm: Any = None


def pairs(handles: list[Any], messages: list[Message | None]) -> list[Any]:
    return list(zip(handles, messages, strict=True))


Maker = Callable[..., Any]

operations = st.lists(
    st.tuples(
        st.sampled_from(
            ["publish"] * 3
            + ["publish-bare", "hold"]
            + ["release"] * 4
            + ["nack"]
            + ["replies"] * 2
            + ["close"]
        ),
        st.integers(0, 7),  # which publish (of those made so far, modulo)
    ),
    min_size=5,
    max_size=120,
)


def _run(make: Maker, ops: list[tuple[str, int]]) -> list[object]:
    """What a sequence of operations shows, step by step, with the confirms ``make``
    makes."""
    settled_calls: list[int] = []
    confirms = make(on_settled=lambda: settled_calls.append(1))
    handles: list[Any] = []
    messages: list[Message | None] = []
    seen: list[object] = []
    for op, pick in ops:
        try:
            if op in ("publish", "publish-bare"):
                message = Message() if op == "publish" else None
                handles.append(confirms.publish(message))
                messages.append(message)
                seen.append(("tag", handles[-1].seq))
            elif not handles:
                continue
            elif op == "hold":
                handles[pick % len(handles)].hold()
            elif op == "release":
                handles[pick % len(handles)].release()
            elif op == "nack":
                handles[pick % len(handles)].release(ok=False)
            elif op == "replies":
                seen.append(confirms.take_replies())
            elif op == "close":
                confirms.close()
        except RuntimeError as exc:
            seen.append(("error", str(exc)))
        seen.append(
            (
                [h.settled for h in handles],
                [m is not None and m.confirm is h for h, m in pairs(handles, messages)],
                [m is not None and m.confirm is None for m in messages],
                confirms.outstanding,
                confirms.has_replies,
                len(settled_calls),
            )
        )
    return seen


@needs_native
@settings(max_examples=1000, deadline=None)
@given(operations)
def test_any_sequence_behaves_as_the_python_handle(ops: list[tuple[str, int]]) -> None:
    assert native_confirms is not None
    assert _run(native_confirms.PublisherConfirms, ops) == _run(PythonPublisherConfirms, ops)


@needs_native
def test_a_handle_keeps_its_message_until_settled_and_then_lets_go() -> None:
    assert native_confirms is not None
    confirms = PublisherConfirms()
    message = Message()
    handle = confirms.publish(message)
    assert isinstance(handle, native_confirms.ConfirmHandle)
    assert message.confirm is handle and not handle.settled
    handle.hold()
    handle.release()
    assert message.confirm is handle
    handle.release(True)
    assert message.confirm is None and handle.settled
    with pytest.raises(RuntimeError, match="already settled"):
        handle.hold()
    with pytest.raises(RuntimeError, match="released more often than held"):
        handle.release()
    with pytest.raises(TypeError):
        cast(Any, handle).release(ok=True, extra=1)


@needs_native
def test_a_publish_never_settled_is_collected_with_its_message() -> None:
    """The handle and its message refer to each other until it settles: the cyclic
    collector frees the pair once nothing else holds it (a channel closed with publishes
    held)."""
    confirms = PublisherConfirms()
    message = Message()
    handle = confirms.publish(message)
    handle.hold()
    gone = weakref.ref(message)
    del message, handle
    gc.collect()
    assert gone() is None


@needs_native
def test_after_a_nack_is_answered_a_run_of_acks_is_one_multiple_ack_again() -> None:
    """A nack answered no longer stands in the way of a multiple ack (as in Python)."""
    ops = [("publish", 0), ("nack", 0), ("replies", 0)]
    ops += [("publish", 0), ("publish", 0), ("release", 1), ("release", 2), ("replies", 0)]
    assert native_confirms is not None
    native = _run(native_confirms.PublisherConfirms, ops)
    assert native == _run(PythonPublisherConfirms, ops)
    assert [r for r in native if isinstance(r, list) and r and hasattr(r[0], "multiple")][-1] == [
        ConfirmReply(3, True, True)
    ]
