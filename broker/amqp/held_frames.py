"""What a connection keeps behind a held basic.get, and the bound on it.

While a channel's basic.get is held (its queue's delivery gate is closed: a new HA primary
whose expected backups have not acknowledged a delivery watermark, docs/ha-design.md), the
frames that follow on that channel are kept and replayed in order once it is answered
(:meth:`HeldFrames.replay`); a channel.close cancels the get after the frames
kept before it. What is kept is bounded by protocol: once the frames kept on a connection
take :data:`HELD_BYTES_LIMIT` or more, the connection stops being read (its
``reading_paused``, as for a resource alarm; TCP back-pressure holds the rest in the
client) until a replay, or a channel gone with its kept frames, brings them back under.
So a connection keeps at most the limit plus one socket read. Nothing is dropped or
reordered; other connections are not affected; a connection paused for an alarm too is
read again only when both are gone (:meth:`Connection.reading_changed`). Only a channel
with a held get pays for any of this: the connection's hot path tests
``held_frames is None`` as before.

:class:`HeldFrames` is owned by a :class:`~broker.amqp.connection.Connection` (one per
connection), built with a :class:`HeldFramesHost` (the connection: handle one frame,
process under its error handling, a pump before the next flush, the reading pause) and its
channels as :class:`KeepingChannel`, nothing else of it.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from broker.amqp import framing
from broker.amqp.context import Logger

_CHANNEL_CLOSE_ID = b"\x00\x14\x00\x28"

#: Bytes the frames kept behind held basic.gets may take on one connection before it stops
#: being read (TCP back-pressure holds the rest in the client). A held get lasts about a
#: round trip to the backups after a fail-over and a client rarely pipelines more than a
#: few frames behind one, so this is rarely reached; it is the write side's low water mark
#: (the shell's ``LOW_WATER``) and 8 frames at the default frame-max. Not an option: as
#: RabbitMQ's internal credit flow, it decides when a reader waits, never what is kept.
HELD_BYTES_LIMIT = 1024 * 1024
#: What a kept frame costs beyond its payload (the bytes object's and the tuple's headers,
#: its list slot): a flood of tiny frames is bounded too.
KEPT_FRAME_COST = 100


class KeepingChannel(Protocol):
    """A channel, as the frames kept behind its held basic.get see it."""

    number: int
    #: The frames kept behind the held get, in order; None: none held.
    held_frames: list[tuple[int, bytes]] | None

    @property
    def get_is_held(self) -> bool:
        """Is its basic.get still held (not answered yet)?"""
        ...

    def cancel_held_get(self) -> list[tuple[int, bytes]]:
        """Forget the held get (its message stays queued); the frames kept behind it."""
        ...


class HeldFramesHost(Protocol):
    """What :class:`HeldFrames` need of their connection."""

    @property
    def replaying(self) -> bool:
        """May kept frames be handled now (the connection open, not closing)?"""
        ...

    def frame(self, ftype: int, channel: int, payload: bytes) -> None:
        """Handle one frame as if just read (errors raise, as there)."""
        ...

    def process(self, first: Callable[[], None] | None = None) -> None:
        """Run ``first``, then parse what was read, closing the connection on an error."""
        ...

    def request_pump(self, key: int, pump: Callable[[], None]) -> None: ...

    def pumps_requested(self) -> None:
        """Signal output again if pumps were asked for meanwhile."""
        ...

    def reading_changed(self) -> None:
        """``paused`` changed: recompute whether the connection is read."""
        ...


class HeldFrames:
    """Frames kept behind held gets; see the module docstring."""

    def __init__(
        self,
        host: HeldFramesHost,
        channels: Mapping[int, KeepingChannel],
        name: str,
        log: Logger,
    ) -> None:
        self._host = host
        #: The connection's open channels by number.
        self._channels = channels
        self._name = name
        self._log = log
        #: Bytes of the frames kept behind held basic.gets (:data:`KEPT_FRAME_COST` each
        #: beyond its payload), on every channel of the connection.
        self.held_bytes = 0
        #: The connection is not read for what is kept (see the module docstring).
        self.paused = False

    def defer(self, ch: KeepingChannel, ftype: int, payload: bytes) -> bool:
        """A frame for a channel whose basic.get is held (or whose frames kept behind it
        wait for replay): kept for later (True), except channel.close, which cancels the
        get (its message stays queued) and goes on after the frames kept before it."""
        if ftype != framing.FRAME_METHOD or payload[:4] != _CHANNEL_CLOSE_ID:
            assert ch.held_frames is not None
            ch.held_frames.append((ftype, payload))
            self.held_bytes += len(payload) + KEPT_FRAME_COST
            if self.held_bytes >= HELD_BYTES_LIMIT and not self.paused:
                self.paused = True
                self._log.info(
                    "held_frames_paused",
                    connection=self._name,
                    channel=ch.number,
                    held_bytes=self.held_bytes,
                    limit=HELD_BYTES_LIMIT,
                )
                self._host.reading_changed()
            return True
        while ch.held_frames is not None:
            frames = ch.cancel_held_get()
            self._unkeep(frames)
            for kept_type, kept in frames:
                self._host.frame(kept_type, ch.number, kept)
        self._resume_if_under()
        return False

    def _unkeep(self, frames: list[tuple[int, bytes]]) -> None:
        """``frames``, kept behind a held get, are replayed or dropped: no longer counted."""
        self.held_bytes -= sum(len(payload) for _, payload in frames) + KEPT_FRAME_COST * len(
            frames
        )

    def _resume_if_under(self) -> None:
        if self.paused and self.held_bytes < HELD_BYTES_LIMIT:
            self.paused = False
            self._log.info("held_frames_resumed", connection=self._name, held_bytes=self.held_bytes)
            self._host.reading_changed()

    def dropped(self, frames: list[tuple[int, bytes]]) -> None:
        """A channel closed or released while its get was held: its kept frames are gone."""
        self._unkeep(frames)
        self._resume_if_under()

    def replay(self, number: int) -> None:
        """A held basic.get was answered: process the frames its channel kept, in order,
        before the next flush (not inside the queue's dispatch that answered it). Frames
        that arrive meanwhile are kept behind them."""

        host = self._host

        def replay() -> None:
            ch = self._channels.get(number)
            if ch is None or ch.get_is_held or ch.held_frames is None:
                return
            frames, ch.held_frames = ch.held_frames, None
            self._unkeep(frames)
            try:
                for ftype, payload in frames:
                    if not host.replaying:
                        return
                    host.frame(ftype, number, payload)
            finally:  # after the replay: a get held again may keep its followers again
                self._resume_if_under()

        def pump() -> None:
            if host.replaying:
                host.process(replay)
                host.pumps_requested()  # held again and answered at once: flush again

        host.request_pump(-number, pump)
