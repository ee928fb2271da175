"""The member lease on the replication link (replication format 3; docs/ha-design.md,
"The member lease").

A backup whose link speaks format 3 consumes :data:`~broker.ha.names.LEASE_STREAM` on a
channel of its own. The primary delivers a *lease request* on it every
:attr:`~broker.ha.member_lease.LeaseTimes.interval`: a body holding its sequence
number, its epoch, the lease's duration in milliseconds and whether the primary needs this
backup's grant (:func:`encode_request`, 21 bytes). The backup's answer is the basic.ack of
that delivery, sent as the request is read (no disk, no replication work before it): for a
needed request, its *grant* (a promise, :class:`~broker.ha.member_lease.GrantLedger`). The
request rides its own channel, never behind a queue's credit; what can be ahead of it on the
wire is at most the streams' batches in flight (each bounded by its channel's prefetch), so
a busy backup answers in time and only a stopped or cut-off one does not.

:class:`LeaseStream` is the primary's side of one link: it sends requests when asked
(:meth:`LeaseStream.request`, the sequence number from
:class:`~broker.ha.member_lease.MemberLeases`) and hands each answer's sequence number to
``on_grant``. Unanswered requests are bounded by the channel's credit (a stopped backup
is sent a few, then none). Each request marks the link's
:class:`~broker.ha.link_credit.LinkCredit` and each answer tells it what the backup has read:
what the link's queue streams may have ahead of the next request is bounded by it.

THREAD UNSAFE: the primary's event loop owns the streams.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.amqp.stream_sink import StreamSink
    from broker.ha.link_credit import LinkCredit

__all__ = ["LEASE_CREDIT", "LeaseStream", "decode_request", "encode_request"]

_REQUEST = struct.Struct(">QQIB")
#: Unanswered requests a link holds at most (a stopped backup is sent no more).
LEASE_CREDIT = 8


def encode_request(seq: int, epoch: int, duration: float, needed: bool) -> bytes:
    return _REQUEST.pack(seq, epoch, max(1, round(duration * 1000.0)), 1 if needed else 0)


def decode_request(body: bytes) -> tuple[int, int, float, bool]:
    """(sequence, epoch, duration in seconds, needed); ValueError for a body that is not
    one."""
    if len(body) != _REQUEST.size:
        raise ValueError(f"a lease request is {_REQUEST.size} bytes, not {len(body)}")
    seq, epoch, millis, needed = _REQUEST.unpack(body)
    if needed > 1:
        raise ValueError(f"a lease request's last byte is 0 or 1, not {needed}")
    return seq, epoch, millis / 1000.0, bool(needed)


class LeaseStream:
    """The primary's lease requests to one backup's link (see the module docstring)."""

    def __init__(
        self,
        sink: StreamSink,
        backup_id: str,
        on_grant: Callable[[int], None],
        on_open: Callable[[], None],
        link: LinkCredit | None = None,
    ) -> None:
        self.sink = sink
        #: The link's queue-stream bytes not known read (told what each answer proves).
        self.link = link
        self.backup_id = backup_id
        self.on_grant = on_grant
        self.on_close: Callable[[], None] | None = None
        self.on_failed: Callable[[str, str], None] | None = None  # never fails: kept for shape
        self.closed = False
        self._sent: dict[int, int] = {}  # delivery tag -> sequence number
        self._marks: dict[int, int] = {}  # delivery tag -> the link's mark when written
        sink.request_pump(id(self), on_open)  # the first request, after consume-ok

    @property
    def can_send(self) -> bool:
        return not self.closed and len(self._sent) < LEASE_CREDIT and self.sink.can_deliver

    def request(self, seq: int, epoch: int, duration: float, needed: bool) -> bool:
        """Send request ``seq``; False when it cannot go now (closed, or too many unanswered:
        the caller's sequence number is then simply never answered)."""
        if not self.can_send:
            return False
        body = encode_request(seq, epoch, duration, needed)
        tag = self.sink.deliver_stream(body)
        self._sent[tag] = seq
        if self.link is not None:
            self._marks[tag] = self.link.mark()
        return True

    def acknowledged(self, delivery_tag: int, multiple: bool) -> None:
        tags = [t for t in self._sent if t <= delivery_tag] if multiple else [delivery_tag]
        for tag in sorted(tags):
            seq = self._sent.pop(tag, None)
            mark = self._marks.pop(tag, None)
            if mark is not None and self.link is not None:
                self.link.answered(mark)  # the backup read everything written before it
            if seq is not None:
                self.on_grant(seq)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._sent.clear()
        self._marks.clear()
        # told once, then dropped: the callbacks name this stream (a reference cycle)
        on_close, self.on_close, self.on_failed = self.on_close, None, None
        if on_close is not None:
            on_close()
