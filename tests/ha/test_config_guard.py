"""Synchronous configuration without sockets: ReplyHandle and ConfigGuard."""

from __future__ import annotations

import functools

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.config_guard import NEXT_STREAM, ConfigGuard, ReplyHandle


def handle(sent: list[str], name: str) -> ReplyHandle:
    return ReplyHandle(lambda: sent.append(name))


def test_a_reply_nobody_holds_goes_when_armed() -> None:
    sent: list[str] = []
    h = handle(sent, "ok")
    assert sent == []
    h.arm()
    assert sent == ["ok"]


def test_held_until_the_stream_is_acknowledged_up_to_its_position() -> None:
    sent: list[str] = []
    guard = ConfigGuard()
    first, second = handle(sent, "first"), handle(sent, "second")
    guard.hold(7, 3, first)
    guard.hold(7, 5, second)
    first.arm()
    second.arm()
    guard.acknowledged(7, 2)
    assert sent == []
    guard.acknowledged(7, 4)
    assert sent == ["first"]
    guard.acknowledged(7, 5)
    assert sent == ["first", "second"]


def test_two_backups_both_needed() -> None:
    sent: list[str] = []
    b1, b2 = ConfigGuard(), ConfigGuard()
    h = handle(sent, "ok")
    b1.hold(1, 2, h)
    b2.hold(2, 9, h)
    h.arm()
    b1.acknowledged(1, 2)
    assert sent == []
    b2.acknowledged(2, 9)
    assert sent == ["ok"]


def test_a_newer_streams_snapshot_covers_older_holds_not_the_reverse() -> None:
    sent: list[str] = []
    guard = ConfigGuard()
    old, nxt, new = handle(sent, "old"), handle(sent, "next"), handle(sent, "new")
    guard.hold(4, 10, old)
    guard.hold(4, NEXT_STREAM, nxt)  # no open stream after stream 4: the next one
    guard.hold(9, 3, new)
    for h in (old, nxt, new):
        h.arm()
    guard.acknowledged(4, 10_000)  # the old stream cannot release the newer stream's hold
    assert sent == ["old"]
    guard.acknowledged(9, 1)  # the new stream's snapshot: covers the older stream's holds
    assert sent == ["old", "next"]
    guard.acknowledged(9, 3)
    assert sent == ["old", "next", "new"]


def test_cancel_releases_and_later_holds_are_ignored() -> None:
    sent: list[str] = []
    guard = ConfigGuard()
    h = handle(sent, "ok")
    guard.hold(1, 5, h)
    h.arm()
    guard.cancel()
    assert sent == ["ok"] and guard.held == 0
    later = handle(sent, "later")
    guard.hold(1, 9, later)
    later.arm()
    assert sent == ["ok", "later"]


holds = st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(1, 20)), max_size=12
)  # (backup, stream key, position)
acks = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(0, 25)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(holds, acks, st.sets(st.integers(0, 2)))
def test_a_reply_goes_exactly_once_when_no_backup_lacks_the_change(
    taken: list[tuple[int, int, int]], acked: list[tuple[int, int, int]], cancelled: set[int]
) -> None:
    guards = [ConfigGuard() for _ in range(3)]
    sent: list[int] = []
    handles = []
    for i, (backup, key, position) in enumerate(taken):
        h = ReplyHandle(functools.partial(sent.append, i))
        guards[backup].hold(key, position, h)
        h.arm()
        handles.append((backup, key, position))
    best: dict[tuple[int, int], int] = {}
    for backup, key, position in acked:
        guards[backup].acknowledged(key, position)
        best[(backup, key)] = max(best.get((backup, key), 0), position)
    for backup in cancelled:
        guards[backup].cancel()
    assert len(sent) == len(set(sent))  # never twice
    for i, (backup, key, position) in enumerate(handles):
        newer = any(b == backup and k > key and p >= 1 for (b, k), p in best.items())
        covered = best.get((backup, key), 0) >= position or newer or backup in cancelled
        assert (i in sent) == covered, (i, backup, key, position, best)
