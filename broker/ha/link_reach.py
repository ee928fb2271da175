"""Backup side: is the primary's *host* still there? A probe its kernel must acknowledge.

:Status: Beta (issue 26, item 5: a partition's fail-over)

A replication link is found dead by its heartbeat after twice ``link-heartbeat-interval``
without a frame (2 s at the defaults): long enough that a primary whose event loop is only
slow (a loaded machine, a long step) is not taken for a dead one ("slow is not dead",
docs/reliability.md). A cut-off primary was found no sooner, and those 2 s were most of a
partition's fail-over (3.4 s against the target of 2.5 s).

Slow and cut differ below the process. A host's kernel acknowledges the TCP segments it
receives whether or not the process behind the socket gets the CPU (a starved, stalled or
SIGSTOPped broker included): within its delayed-ACK time, at most 200 ms on Linux. A host
cut off by the network (or frozen whole, or powered off) acknowledges nothing. So:

1. when the link has heard nothing from the primary for :attr:`ReachTimes.silence` (a
   quarter of the link heartbeat; a healthy primary asks for a grant every 0.2 s at the
   defaults, so it is never that quiet), the backup writes a heartbeat frame: the *probe*;
2. :attr:`ReachTimes.ack_timeout` after the probe (half the heartbeat) it asks its own
   kernel (``TCP_INFO``): if segments it sent are still unacknowledged and the primary's
   host has acknowledged nothing since before the probe, the host is unreachable: the link
   is *cut*, and the backup drops it (``ha_link_down``, "the primary's host acknowledged
   nothing ..."), 0.75 heartbeats after the silence began instead of 2;
3. otherwise the host answered (the broker is slow, or was just quiet): the probe is done,
   the next one follows while the silence lasts, and the heartbeat's rule stays the one
   that finds a slow primary's link dead.

A dial's TCP handshake is the kernel's answer as well: :attr:`ReachTimes.connect_timeout`
bounds it (:func:`broker.ha.backup_dial.connect_as_backup`), so that a backup redialling
after a partition does not spend a whole heartbeat on the cut-off host first.

Why the unacknowledged segments as well: the probe may not be sent at all when the
primary's receive window is full (a stalled broker that reads nothing); the kernel then
sends window probes, and a host that answers them is alive. Only a probe that left and was
never acknowledged counts. A false "cut" (a kernel slower than the timeout to acknowledge)
costs a redial, never safety: what a dropped link allows is only what
:class:`ha_agent.takeover.LapsedGrant` allows, and that rests on the lapsed member lease
(:mod:`broker.ha.member_lease`), which no link state shortens.

:class:`ReachProbe` is the rule (no clock, no I/O: times are passed in); :func:`tcp_acks`
reads the kernel's view of one socket; :func:`watch_reach` is the asyncio shell the link
runs beside its session. Without ``TCP_INFO`` (not Linux) the shell does nothing: the
heartbeat alone decides, as before.

THREAD UNSAFE: one link's loop owns its probe.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

__all__ = [
    "ProbedLink",
    "ReachProbe",
    "ReachStep",
    "ReachTimes",
    "TcpAcks",
    "tcp_acks",
    "watch_reach",
]

#: How much earlier than the probe the host's last acknowledgement must be for the probe to
#: count as unanswered: the kernel counts in jiffies (1-10 ms), the link on the monotonic
#: clock; an acknowledgement within this of the probe counts as an answer (a "cut" is then
#: found one probe later, never wrongly).
CLOCK_SLACK = 0.05
#: ``struct tcp_info`` (linux/tcp.h): tcpi_unacked at byte 24, tcpi_last_ack_recv at 56.
_TCP_INFO_LEN = 104
_U32 = struct.Struct("=I")
_UNACKED_AT = 24
_LAST_ACK_RECV_AT = 56


@dataclass(frozen=True)
class ReachTimes:
    """When to probe a silent link and how long its host has to acknowledge (seconds)."""

    #: No frame from the primary for this long: probe.
    silence: float
    #: A probe unacknowledged this long: the host is unreachable.
    ack_timeout: float

    def __post_init__(self) -> None:
        if not (self.silence > 0 and self.ack_timeout > 0):
            raise ValueError(f"reach times must be above 0: {self!r}")

    @property
    def connect_timeout(self) -> float:
        """How long a dial's TCP handshake may take: the SYN's answer is the kernel's too,
        and not delayed as an acknowledgement may be (so a quarter of the heartbeat); a
        backup redialling after a partition spends no more on the cut-off host before it
        dials the new primary. A SYN lost fails one dial: the next round dials again."""
        return self.silence

    @classmethod
    def for_heartbeat(cls, heartbeat: float) -> ReachTimes:
        """The times of a link whose heartbeat is ``heartbeat`` seconds (the link finds its
        peer dead after twice that): probe after a quarter, wait half for the answer."""
        return cls(silence=heartbeat / 4, ack_timeout=heartbeat / 2)


@dataclass(frozen=True)
class TcpAcks:
    """What the kernel says of one connection (``TCP_INFO``)."""

    #: Segments sent and not acknowledged.
    unacked: int
    #: Seconds since the peer's host last acknowledged anything.
    since_ack: float


class ReachStep(Enum):
    """What :meth:`ReachProbe.due` asks the shell to do."""

    WAIT = "wait"  # nothing now
    PROBE = "probe"  # write a heartbeat frame
    ASK = "ask"  # read TCP_INFO and hand it to ReachProbe.answered


class ReachProbe:
    """The rule of the module docstring for one link: fed the time of the link's last frame
    received, it says when to probe and when to ask the kernel, and judges the answer."""

    def __init__(self, times: ReachTimes) -> None:
        self.times = times
        #: When the outstanding probe was written (None: none outstanding).
        self.probed_at: float | None = None

    def due(self, now: float, last_received: float) -> ReachStep:
        """The step at ``now``; the link's last frame came at ``last_received``."""
        if self.probed_at is not None and last_received >= self.probed_at:
            self.probed_at = None  # the primary spoke since: not silent any more
        if self.probed_at is None:
            if now - last_received >= self.times.silence:
                self.probed_at = now
                return ReachStep.PROBE
            return ReachStep.WAIT
        if now - self.probed_at >= self.times.ack_timeout:
            return ReachStep.ASK
        return ReachStep.WAIT

    def answered(self, now: float, acks: TcpAcks) -> bool:
        """The kernel's view at ``now`` (after :attr:`ReachStep.ASK`): True when the host is
        unreachable (the probe left and nothing was acknowledged since before it); else the
        probe is done (False) and the next one follows while the silence lasts."""
        probed_at = self.probed_at
        if probed_at is None:
            return False
        age = now - probed_at
        if acks.unacked > 0 and acks.since_ack >= age + CLOCK_SLACK:
            return True
        self.probed_at = None
        return False

    def next_in(self, now: float, last_received: float) -> float:
        """Seconds until :meth:`due` may say something other than WAIT."""
        if self.probed_at is None:
            return max(0.0, last_received + self.times.silence - now)
        return max(0.0, self.probed_at + self.times.ack_timeout - now)


def tcp_acks(sock: Any) -> TcpAcks | None:
    """The kernel's view of ``sock`` (a socket, or asyncio's wrapper of one); None where
    ``TCP_INFO`` is not available (not Linux) or the socket is closed."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None or sock is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, option, _TCP_INFO_LEN)
    except OSError:
        return None
    if len(info) < _LAST_ACK_RECV_AT + 4:
        return None
    (unacked,) = _U32.unpack_from(info, _UNACKED_AT)
    (last_ack_ms,) = _U32.unpack_from(info, _LAST_ACK_RECV_AT)
    return TcpAcks(unacked=unacked, since_ack=last_ack_ms / 1000.0)


class ProbedLink(Protocol):
    """What :func:`watch_reach` needs of a link (:class:`~broker.amqp.client.AmqpClient`)."""

    @property
    def last_received(self) -> float:
        """When its last bytes came (the event loop's clock)."""
        ...

    def send_heartbeat(self) -> None:
        """Write one heartbeat frame."""
        ...

    def tcp_socket(self) -> Any:
        """Its TCP socket (None once closed)."""
        ...


async def watch_reach(link: ProbedLink, times: ReachTimes) -> str:
    """Probe ``link`` while it is silent; return why its primary's host is unreachable (the
    caller drops the link). Returns only then; cancel it when the link ends. Without
    ``TCP_INFO`` it waits for ever. Times are the event loop's clock, the link's too."""
    now = asyncio.get_running_loop().time
    if tcp_acks(link.tcp_socket()) is None:
        await asyncio.Event().wait()  # no kernel view here: the heartbeat alone decides
    probe = ReachProbe(times)
    while True:
        step = probe.due(now(), link.last_received)
        if step is ReachStep.PROBE:
            link.send_heartbeat()
        elif step is ReachStep.ASK:
            acks = tcp_acks(link.tcp_socket()) or TcpAcks(0, 0.0)  # no view: no verdict
            if probe.answered(now(), acks):
                return (
                    f"the primary's host acknowledged nothing for {acks.since_ack:.3f} s,"
                    f" a probe unanswered for {times.ack_timeout:g} s or more"
                    f" ({acks.unacked} segments unacknowledged): cut off"
                )
        await asyncio.sleep(max(0.01, probe.next_in(now(), link.last_received)))
