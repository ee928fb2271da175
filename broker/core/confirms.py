"""Publisher confirms as an explicit, releasable step.

Every publish on a channel in confirm mode gets a :class:`ConfirmHandle`. The handle starts
with one hold (the publishing channel's own, released once routing is done); anything else
that must happen before the publisher may be told "safe" takes a hold of its own and releases
it later: the message store until the message is on disk, the HA module's queue guards until
every backup has the message (or it was consumed), exactly the step Qpid's ``QueueGuard``
adds. Which holds, in what order, is one table: ``PUBLISH_HOLDS`` in
:mod:`broker.core.queue_contracts`.

When the last hold is released the publish is *settled*, as an ack or, if any holder
rejected it, as a nack. A message keeps its handle (``message.confirm``, read by the holders
and by paging) exactly while the publish is not settled: the handle lets go of it then
(a queued confirmed message was otherwise ~100 B and one object the cyclic collector tracks
more than an unconfirmed one, for as long as it waited; the reference from the handle to its
message lasts only while holds are taken, and the last release ends it).
:meth:`PublisherConfirms.take_replies` turns the settled publishes into the fewest
basic.ack/basic.nack replies: one ``multiple`` ack when a contiguous run from the lowest
outstanding tag settled, single replies otherwise; no tag is ever answered twice.

Both are native where broker/core/_confirms.c is built (the same rules; on an HA primary
with two backups a publish's handle is held three times and released four, and settled
once: each a Python frame otherwise); the classes here are the reference and the fallback
(``PythonPublisherConfirms``, ``PythonConfirmHandle``), and
tests/core/test_native_confirms.py holds the native ones to them.

THREAD UNSAFE: one event loop owns a channel and its confirms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol


class ConfirmedMessage(Protocol):
    """A published message, as its confirm handle sees it: it keeps the handle while the
    publish is not settled (``broker.core.message.Message``)."""

    confirm: ConfirmHandle | None


@dataclass(frozen=True, slots=True)
class ConfirmReply:
    """One basic.ack (``ack``) or basic.nack (not ``ack``) to send."""

    delivery_tag: int
    multiple: bool
    ack: bool


class ConfirmHandle:
    """The pending confirm of one publish."""

    __slots__ = ("_holds", "_message", "_nack", "_owner", "seq")

    def __init__(
        self, owner: PublisherConfirms, seq: int, message: ConfirmedMessage | None = None
    ) -> None:
        self._owner = owner
        self.seq = seq
        self._holds = 1
        self._nack = False
        #: The message that keeps this handle until it is settled (None: none, or settled).
        self._message = message
        if message is not None:
            message.confirm = self

    def hold(self) -> None:
        """Withhold the confirm until a matching :meth:`release`."""
        if self._holds <= 0:
            raise RuntimeError(f"confirm {self.seq} already settled")
        self._holds += 1

    def release(self, ok: bool = True) -> None:
        """Drop one hold; ``ok=False`` turns the eventual reply into a nack."""
        if self._holds <= 0:
            raise RuntimeError(f"confirm {self.seq} released more often than held")
        if not ok:
            self._nack = True
        self._holds -= 1
        if self._holds == 0:
            message = self._message
            if message is not None:  # nothing reads it any more: neither keeps the other
                self._message = None
                message.confirm = None
            self._owner._settle(self.seq, not self._nack)

    @property
    def settled(self) -> bool:
        return self._holds == 0


class PublisherConfirms:
    """Numbers the publishes of one channel and produces its confirm replies."""

    def __init__(self, on_settled: Callable[[], None] | None = None) -> None:
        self._next = 1
        self._low = 1  # every tag below this one is settled
        self._acked_upto = 0  # every tag up to here has been answered
        self._settled_ahead: set[int] = set()  # settled tags above _low
        self._unsent: list[int] = []  # settled tags above _acked_upto not yet answered
        self._nacked: set[int] = set()
        self._closed = False
        self._on_settled = on_settled

    def publish(self, message: ConfirmedMessage | None = None) -> ConfirmHandle:
        """A new publish: the next delivery tag, with the channel's routing hold taken;
        ``message`` keeps the handle until it is settled."""
        handle = PythonConfirmHandle(self, self._next, message)  # (the name below is native)
        self._next += 1
        return handle

    @property
    def outstanding(self) -> int:
        """Publishes not yet settled."""
        return self._next - self._low - len(self._settled_ahead)

    @property
    def has_replies(self) -> bool:
        return bool(self._unsent)

    def close(self) -> None:
        """The channel closed: later settlements are dropped (and the channel is let go
        of: its ``on_settled`` would keep it in a reference cycle)."""
        self._closed = True
        self._on_settled = None

    def _settle(self, seq: int, ack: bool) -> None:
        if self._closed:
            return
        if not ack:
            self._nacked.add(seq)
        if seq == self._low:
            self._low += 1
            while self._low in self._settled_ahead:
                self._settled_ahead.discard(self._low)
                self._low += 1
        else:
            self._settled_ahead.add(seq)
        self._unsent.append(seq)
        if self._on_settled is not None:
            self._on_settled()

    def take_replies(self) -> list[ConfirmReply]:
        """The replies for everything settled since the last call, fewest first."""
        if not self._unsent:
            return []
        unsent = self._unsent
        self._unsent = []
        top = self._low - 1  # everything up to here is settled
        replies: list[ConfirmReply] = []
        contiguous = top > self._acked_upto and not self._nacked
        if contiguous:
            # One multiple ack covers (acked_upto, top] if none of it was answered already,
            # i.e. every tag in that run is among the unsent ones.
            in_run = [s for s in unsent if s <= top]
            if len(in_run) == top - self._acked_upto:
                replies.append(ConfirmReply(top, top - self._acked_upto > 1, True))
                self._acked_upto = top
                unsent = [s for s in unsent if s > top]
        for seq in sorted(unsent):
            ack = seq not in self._nacked
            self._nacked.discard(seq)
            replies.append(ConfirmReply(seq, False, ack))
        if top > self._acked_upto:
            self._acked_upto = top
        return replies


#: The Python classes: the reference, and what runs where the native ones are not built.
PythonPublisherConfirms = PublisherConfirms
PythonConfirmHandle = ConfirmHandle

try:
    from broker.core import _confirms as _native
except ImportError:  # not built: the Python classes, the same rules
    NATIVE = False
else:
    NATIVE = True
    _native.bind_reply(ConfirmReply)
    if not TYPE_CHECKING:  # the same interface (tests/core/test_native_confirms.py)
        PublisherConfirms = _native.PublisherConfirms
        ConfirmHandle = _native.ConfirmHandle
