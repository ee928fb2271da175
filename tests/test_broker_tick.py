"""The broker's housekeeping tick walks every queue and every connection a slice a turn of
the loop (issue 25, "no long stalls": at 10,000 queues and 2,000 connections it was one
step of 100-115 ms on 2 loaded cores); a walk of the queues stops once the broker must not
walk them (a promotion's quiet, a backup)."""

from __future__ import annotations

import asyncio

from broker import server
from broker.core.message import Message
from broker.options import BrokerOptions
from broker.server import Broker
from common.polling import free_port
from common.slices import SLICE, Steps


def test_the_tick_expires_every_queue_over_several_turns_of_the_loop() -> None:
    options = BrokerOptions(
        port=0, interface="127.0.0.1", mgmt_port=free_port(), mgmt_interface="127.0.0.1"
    )

    async def main() -> None:
        broker = Broker(options)
        await broker.start()
        try:
            host = broker.vhost
            count = 3 * SLICE + 1
            for i in range(count):
                host.declare_queue(f"q{i}", arguments={"x-message-ttl": 1})
                host.publish(host.exchange(""), Message("", f"q{i}", body=b"x"))
            await asyncio.sleep(0.01)  # every message's time to live is over
            turns = 0
            stop = False

            def turn() -> None:
                nonlocal turns
                turns += 1
                if not stop:
                    asyncio.get_running_loop().call_soon(turn)

            turn()
            await broker._tick()
            stop = True
            assert all(host.queues[f"q{i}"].message_count == 0 for i in range(count))
            assert turns >= 4  # a slice of 500 queues a turn, other callbacks between
        finally:
            await broker.stop()

    asyncio.run(main())


def test_a_walk_in_turns_stops_once_it_must_not_go_on() -> None:
    walked: list[int] = []
    go = [True]

    def steps() -> Steps[None]:
        for i in range(5):
            if i:
                yield
            walked.append(i)
            if i == 1:
                go[0] = False  # a promotion's quiet began meanwhile

    asyncio.run(server._in_turns(steps(), lambda: go[0]))
    assert walked == [0, 1]
