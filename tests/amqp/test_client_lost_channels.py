"""A client connection lost with thousands of channels open (issue 25): the connection is
over at once, its channels close a slice at a time (a pause between two), and every call
waiting on one fails with the connection's reason. A backup's link to a primary that died holds one
channel a queue: 10,000 closed in one step was 40-70 ms of CPU before its promotion could
start. A socket pair, no broker."""

from __future__ import annotations

import asyncio
import socket

import pytest
from pamqp import commands

from broker.amqp.client import AmqpClient, ConnectionFailed
from broker.amqp.client.channel import ClientChannel
from broker.amqp.client.connection import CHANNELS_CLOSE_PAUSE, CHANNELS_CLOSED_A_TURN

CHANNELS = 3 * CHANNELS_CLOSED_A_TURN + 7


async def client_with_channels(count: int) -> tuple[AmqpClient, socket.socket, list[ClientChannel]]:
    """A client over one end of a socket pair (the other end returned: the peer), with
    ``count`` channels open (as ``open_channel`` leaves them once the peer said open-ok)."""
    ours, peer = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    client = AmqpClient(
        reader, writer, server_properties={}, frame_max=131072, channel_max=0, heartbeat=0
    )
    channels = []
    for number in range(1, count + 1):
        channel = ClientChannel(client, number)
        client._channels[number] = channel
        channels.append(channel)
    return client, peer, channels


def test_a_lost_connection_closes_its_channels_a_slice_at_a_time() -> None:
    async def main() -> None:
        client, peer, channels = await client_with_channels(CHANNELS)
        # a call waiting for its reply on the last channel (closed in the last slice)
        waiting = asyncio.ensure_future(
            channels[-1]._call(commands.Basic.Qos(), commands.Basic.QosOk)
        )
        await asyncio.sleep(0)
        seen: list[int] = []  # channels closed when the connection's end is first heard
        client._closed.add_done_callback(lambda _: seen.append(sum(c.is_closed for c in channels)))
        peer.close()  # the broker's end is gone
        await asyncio.wait_for(client.wait_closed(), 10)
        assert client.is_closed
        assert seen == [CHANNELS_CLOSED_A_TURN]  # the first slice only, in the step that found it
        with pytest.raises(ConnectionFailed):  # a call on a channel not closed yet fails now
            await channels[-2]._call(commands.Basic.Qos(), commands.Basic.QosOk)
        await asyncio.sleep(0)
        assert sum(c.is_closed for c in channels) == CHANNELS_CLOSED_A_TURN  # a pause first
        deadline = asyncio.get_running_loop().time() + 30
        while not all(channel.is_closed for channel in channels):
            assert asyncio.get_running_loop().time() < deadline, "channels left open"
            await asyncio.sleep(CHANNELS_CLOSE_PAUSE / 2)
        reasons = {type(channel.close_reason) for channel in channels}
        assert reasons == {ConnectionFailed}
        with pytest.raises(ConnectionFailed):
            await waiting

    asyncio.run(main())
