"""A loop that stalled reads what waited before it finds its peer silent.

A backup's replication link (the asyncio client, broker/amqp/client/) on a loop starved of
CPU for over two heartbeats: uvloop runs its timers before it polls its sockets, so the
heartbeat check's timer, due during the stall, ran first and found "nothing received for
2 s" while the primary's heartbeats waited unread in the socket; the link closed, the
member's grant lapsed (docs/reliability.md). The check now looks again once the loop has
polled. Real sockets, a real uvloop loop; the peer is a thread with a blocking socket that
sends a heartbeat every 0.2 s whatever the client does.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvloop
from pamqp import commands

from broker.amqp import framing
from broker.amqp.client import connect

HOST = "127.0.0.1"
#: how long the client's loop stalls: over two heartbeats of 1 s
STALL = 2.6


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _read_method(sock: socket.socket) -> object:
    while True:
        head = _read_exactly(sock, 7)
        payload = _read_exactly(sock, int.from_bytes(head[3:7], "big") + 1)[:-1]
        if head[0] == framing.FRAME_METHOD:
            return framing.unmarshal_method(payload)


class HeartbeatingPeer:
    """A broker stand-in: the handshake at heartbeat 1 s, then a heartbeat every 0.2 s
    until the client closes the socket (then :attr:`closed_by_client`)."""

    def __init__(self) -> None:
        self.listener = socket.create_server((HOST, 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.closed_by_client = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        try:
            sock, _ = self.listener.accept()
            with sock:
                sock.settimeout(10)
                assert _read_exactly(sock, 8) == framing.PROTOCOL_HEADER
                start = commands.Connection.Start(
                    server_properties={"product": "peer"}, mechanisms="PLAIN", locales="en_US"
                )
                sock.sendall(framing.marshal_method(start, 0))
                assert isinstance(_read_method(sock), commands.Connection.StartOk)
                tune = commands.Connection.Tune(channel_max=10, frame_max=8192, heartbeat=1)
                sock.sendall(framing.marshal_method(tune, 0))
                assert isinstance(_read_method(sock), commands.Connection.TuneOk)
                assert isinstance(_read_method(sock), commands.Connection.Open)
                sock.sendall(framing.marshal_method(commands.Connection.OpenOk(), 0))
                sock.settimeout(0.2)
                while not self.stop.is_set():
                    sock.sendall(framing.HEARTBEAT_FRAME)
                    try:
                        if sock.recv(4096) == b"":
                            self.closed_by_client.set()
                            return
                    except TimeoutError:
                        pass
        except (ConnectionError, OSError) as exc:
            if not self.stop.is_set():
                self.closed_by_client.set()
                self.errors.append(exc)
        except BaseException as exc:  # the handshake's assertions fail the test
            self.errors.append(exc)


@pytest.fixture
def peer() -> Iterator[HeartbeatingPeer]:
    peer = HeartbeatingPeer()
    peer.thread.start()
    try:
        yield peer
    finally:
        peer.stop.set()
        peer.listener.close()
        peer.thread.join(timeout=10)


def test_a_stalled_loop_reads_the_heartbeats_that_waited_before_it_gives_up(
    peer: HeartbeatingPeer,
) -> None:
    """The loop stalls 2.6 s in an I/O callback (as a starved loop does mid-turn): the
    next turn's timers come before its poll. The connection stays open."""

    async def main() -> None:
        client = await connect(HOST, peer.port, user="u", password="p", heartbeat=1)
        assert client.heartbeat == 1
        await asyncio.sleep(0.6)  # the heartbeat check's timer is armed
        loop = asyncio.get_running_loop()
        read_end, write_end = os.pipe()
        stalled = asyncio.Event()

        def stall() -> None:  # in the poll phase, as a socket's callback
            loop.remove_reader(read_end)
            time.sleep(STALL)  # the loop's thread held, as a starved one
            stalled.set()

        loop.add_reader(read_end, stall)
        os.write(write_end, b"x")
        try:
            await stalled.wait()
            with pytest.raises(TimeoutError):  # two checks of the heartbeat loop and more
                await asyncio.wait_for(client.wait_closed(), 1.5)
        finally:
            os.close(read_end)
            os.close(write_end)
        await client.close()

    uvloop.run(main())
    assert not peer.errors or peer.closed_by_client.is_set(), peer.errors
