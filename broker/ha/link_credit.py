"""What a link's queue streams may have ahead of its next lease request: :class:`LinkCredit`
(issue 25: a member catching up must not starve the primary's member lease).

A backup answers a lease request (:mod:`broker.ha.lease_stream`) as it reads it, but it
reads the link in order: whatever the queue streams wrote before the request is read, and
applied, first. Each stream's credit is its channel's (31 batches of up to 64 KiB at the
defaults), so ten busy streams had up to 20 MB ahead of a request (measured: 9 MB, 2.9 s
at load 15; docs/reliability.md, "A member's catch-up and its lease round trip").

:class:`LinkCredit` bounds, per link, the bytes of queue-stream batches the backup may not
have read yet: a stream sends a batch only while one of two counts is below
:data:`LINK_BYTES`, each an upper bound on what is unread:

- *unacknowledged*: the bytes of batches the backup has not acknowledged (the usual way
  credit comes back);
- *since the newest answered request*: the bytes written after the lease request the
  backup answered last was written (the backup answered it, so it read everything
  before it). A batch the backup holds unacknowledged behind a staged transaction
  (:class:`~broker.ha.queue_replicator.BatchAcks`) has been read: the next answer frees
  its bytes, so held batches never stop the transaction's other parts (no deadlock with
  the backup's holds, only with a link whose lease requests go unanswered: a stopped
  backup, which reads nothing either).

So at most :data:`LINK_BYTES` plus one batch is ahead of each lease request (besides the
configuration stream's, bounded by its channel's credit). Availability only: nothing the
lease promises depends on it. A link without a lease stream (formats 1-2) has none.

Sans-I/O: counts and waiters only; :class:`~broker.ha.streams.QueueStream` asks
:attr:`LinkCredit.open` before each batch and registers its pump with
:meth:`LinkCredit.wait` when it is not, :class:`~broker.ha.lease_stream.LeaseStream` marks
each request (:meth:`LinkCredit.mark`) and its answer (:meth:`LinkCredit.answered`).

THREAD UNSAFE: the primary's event loop owns it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

__all__ = ["LINK_BYTES", "LinkCredit"]

#: Bytes of queue-stream batches a link may have unread ahead of a lease request (plus one
#: batch): a backup applying 1-2 MB/s at load 15-30 reads it in well under a second.
LINK_BYTES = 512 * 1024


class LinkCredit:
    """One link's queue-stream bytes not known read by the backup (module docstring)."""

    def __init__(self, limit: int = LINK_BYTES) -> None:
        self.limit = limit
        #: Bytes of batches sent and not acknowledged (nor their stream closed).
        self.unacknowledged = 0
        #: Bytes ever written by the link's queue streams.
        self.written = 0
        #: :attr:`written` when the newest answered lease request was written.
        self.read = 0
        #: The streams waiting for the link to open, in the order they came.
        self._waiting: OrderedDict[int, Callable[[], None]] = OrderedDict()

    @property
    def unread(self) -> int:
        """The smaller of the two upper bounds on the bytes the backup has not read."""
        return min(self.unacknowledged, self.written - self.read)

    @property
    def open(self) -> bool:
        """May a stream send a batch now?"""
        return self.unread < self.limit

    def sent(self, size: int) -> None:
        """A batch of ``size`` bytes was written."""
        self.written += size
        self.unacknowledged += size

    def acknowledged(self, size: int) -> None:
        """A batch of ``size`` bytes was acknowledged, or its stream closed (never will be)."""
        self.unacknowledged -= size
        self._wake()

    def mark(self) -> int:
        """A lease request is written now: the value to hand to :meth:`answered`."""
        return self.written

    def answered(self, mark: int) -> None:
        """The request written at ``mark`` was answered: the backup read what was before."""
        if mark > self.read:
            self.read = mark
            self._wake()

    def wait(self, key: int, pump: Callable[[], None]) -> None:
        """Call ``pump`` once the link is open again (``key``: the stream; once each)."""
        self._waiting.setdefault(key, pump)

    def forget(self, key: int) -> None:
        self._waiting.pop(key, None)

    def _wake(self) -> None:
        """The waiting streams' pumps, in the order they waited, while the link is open:
        once a pump has filled it again, the rest stay waiting, in their order, uncalled
        (each would only find it full and wait anew: 10,000 catching-up queues' pumps
        called at one acknowledgement were a 104 ms step of the loop in the scale soak).
        One that sends and still has more waits anew, at the back. Only those waiting
        when it began are called (one that waits anew while the link is open is not
        called twice in one wake)."""
        waiting = self._waiting
        for _ in range(len(waiting)):
            if not waiting or not self.open:
                return
            _key, pump = waiting.popitem(last=False)
            pump()
