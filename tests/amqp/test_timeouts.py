"""ConnectionTimeouts (broker/amqp/timeouts.py) carries out what a tick finds due, for
either protocol's connection: the socket goes after an unanswered close or a handshake
time-out; a silent peer and a heartbeat to send are the connection's own (its port).
No socket, no clock: time is given."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.amqp.context import ConnectionSettings
from broker.amqp.timeouts import ConnectionTimeouts

SETTINGS = ConnectionSettings(handshake_timeout=10.0, close_timeout=2.0)


@dataclass
class Log:
    lines: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


@dataclass
class Peer:
    """The connection as its time-outs see it, and what its callbacks were asked."""

    name: str = "127.0.0.1:5 #1"
    should_close: bool = False
    close_reason: str | None = None
    calls: list[str] = field(default_factory=list)
    log: Log = field(default_factory=Log)

    def peer_silent(self) -> None:
        self.calls.append("peer_silent")

    def send_heartbeat(self) -> None:
        self.calls.append("heartbeat")

    def timeouts(self, now: float = 0.0) -> ConnectionTimeouts:
        return ConnectionTimeouts(SETTINGS, now, self)


def tick(peer: Peer, timeouts: ConnectionTimeouts, now: float, **kw: Any) -> None:
    args: dict[str, Any] = {
        "closing": False,
        "handshaking": False,
        "receive_timeout": 20.0,
        "send_interval": 5.0,
        "log": peer.log,
        "state": "open",
    }
    timeouts.tick(now, **{**args, **kw})


def test_a_handshake_not_finished_in_time_drops_the_connection_and_is_logged() -> None:
    peer = Peer()
    timeouts = peer.timeouts(0.0)
    tick(peer, timeouts, 9.9, handshaking=True, state="await_open")
    assert not peer.should_close and peer.log.lines == []
    tick(peer, timeouts, 10.0, handshaking=True, state="await_open")
    assert peer.should_close and peer.close_reason == "handshake timeout"
    assert peer.log.lines == [
        ("handshake_timeout", {"connection": "127.0.0.1:5 #1", "state": "await_open"})
    ]
    assert peer.calls == []


def test_an_unanswered_close_drops_the_connection_after_close_timeout() -> None:
    peer = Peer(close_reason="320 bye")
    timeouts = peer.timeouts(0.0)
    timeouts.closing(100.0)
    tick(peer, timeouts, 101.9, closing=True)
    assert not peer.should_close
    tick(peer, timeouts, 102.0, closing=True)
    assert peer.should_close and peer.close_reason == "320 bye"  # its reason kept
    assert peer.calls == []


def test_a_silent_peer_is_the_connections_callback_not_while_it_is_not_read() -> None:
    peer = Peer()
    timeouts = peer.timeouts(0.0)
    timeouts.wrote(21.0)
    tick(peer, timeouts, 21.0, reading_paused=True)
    tick(peer, timeouts, 21.5, reading_paused=True)
    assert peer.calls == []
    timeouts.read(0.5)
    tick(peer, timeouts, 21.5)
    assert peer.calls == []  # found silent: the loop reads its sockets before it decides
    tick(peer, timeouts, 21.75)
    assert peer.calls == ["peer_silent"]
    assert not peer.should_close  # the connection closes in its own words


def test_a_peer_found_silent_after_a_stall_is_not_if_its_frames_waited_unread() -> None:
    """The loop stalled 3 s (starved): its first tick after runs before it reads the
    socket, where the peer's heartbeats waited. Read before the next tick: not silent."""
    peer = Peer()
    timeouts = peer.timeouts(0.0)
    timeouts.read(10.0)
    timeouts.wrote(10.0)
    tick(peer, timeouts, 33.0)  # 23 s since the last read (time-out 20 s): found silent
    assert peer.calls == ["heartbeat"]  # what was due besides is done
    timeouts.read(33.0)  # the poll after the timers: the frames that waited
    for now in (33.25, 53.0, 53.5):  # 20 s since the read at 53.0: not over the time-out;
        tick(peer, timeouts, now, send_interval=0)  # over it at 53.5: found silent afresh
    assert peer.calls == ["heartbeat"]
    tick(peer, timeouts, 53.75, send_interval=0)  # and still, at the next tick
    assert peer.calls == ["heartbeat", "peer_silent"]


def test_a_heartbeat_is_due_after_the_send_interval_without_a_write() -> None:
    peer = Peer()
    timeouts = peer.timeouts(0.0)
    tick(peer, timeouts, 4.9)
    assert peer.calls == []
    tick(peer, timeouts, 5.0)
    assert peer.calls == ["heartbeat"]
    timeouts.wrote(5.0)
    timeouts.read(5.0)
    tick(peer, timeouts, 9.0)
    assert peer.calls == ["heartbeat"]
    tick(peer, timeouts, 100.0, receive_timeout=0, send_interval=0)  # 0: never
    assert peer.calls == ["heartbeat"] and not peer.should_close
