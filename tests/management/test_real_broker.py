"""The management API of a real Broker on free ports, over HTTP and AMQP sockets."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
import pytest

from broker.listen import ListenError
from broker.management.api import start_management
from common.polling import free_port, poll_until_async
from tests.management.support import GUEST, FakeBroker, parse_metrics, sample


def test_start_management_reports_the_bound_port() -> None:
    broker = FakeBroker()

    async def main() -> None:
        runner = await start_management(broker, "127.0.0.1", 0)
        try:
            assert broker.mgmt_port > 0
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{broker.mgmt_port}/api/status"
                async with session.get(url) as response:
                    assert response.status == 200
                    assert (await response.json())["node"] == "node-a"
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_start_management_on_a_busy_port_raises_listen_error() -> None:
    """The error names the listener and the address (broker.listen)."""

    async def main() -> None:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            with pytest.raises(ListenError, match=r"management API.*address already in use"):
                await start_management(FakeBroker(), "127.0.0.1", busy.getsockname()[1])

    asyncio.run(main())


def test_real_broker_over_http_and_amqp() -> None:
    """A real Broker: HTTP declares, an AMQP client publishes and consumes, both agree."""
    import aio_pika

    from broker.options import BrokerOptions
    from broker.server import Broker

    options = BrokerOptions(
        port=0,
        interface="127.0.0.1",
        mgmt_port=free_port(),
        mgmt_interface="127.0.0.1",
        auth=True,
        node_name="e2e",
    )

    async def main() -> None:
        broker = Broker(options)
        await broker.start()
        base = f"http://127.0.0.1:{broker.mgmt_port}"
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/api/status") as response:
                    status = await response.json()
                assert status["node"] == "e2e"
                assert status["amqp_port"] == broker.amqp_port
                assert status["ha_state"] == "standalone"

                async with http.put(f"{base}/api/queues/jobs") as response:
                    assert response.status == 401
                async with http.put(
                    f"{base}/api/queues/jobs", json={"durable": True}, headers=GUEST
                ) as response:
                    assert response.status == 201

                amqp = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/")
                async with amqp:
                    channel = await amqp.channel()
                    # The queue declared over HTTP is the queue AMQP sees.
                    queue = await channel.declare_queue("jobs", durable=True)
                    await channel.default_exchange.publish(
                        aio_pika.Message(b"payload"), routing_key="jobs"
                    )

                    async def one_message() -> dict[str, Any] | None:
                        async with http.get(f"{base}/api/queues/jobs", headers=GUEST) as r:
                            view: dict[str, Any] = await r.json()
                        return view if view["messages"] == 1 else None

                    view = await poll_until_async(one_message, 2.0, "one message in 'jobs'")
                    assert view["messages"] == 1
                    assert view["bytes"] == 7

                    async with http.get(f"{base}/api/connections", headers=GUEST) as r:
                        connections = await r.json()
                    assert len(connections) == 1
                    assert connections[0]["user"] == "guest"
                    assert connections[0]["state"] == "open"
                    assert connections[0]["client_product"]
                    assert connections[0]["messages_published"] == 1

                    async with http.get(f"{base}/metrics", headers=GUEST) as r:
                        samples = parse_metrics(await r.text())
                    assert sample(samples, "qpidd_connections") == 1
                    assert sample(samples, "qpidd_queue_messages", queue="jobs") == 1
                    assert sample(samples, "qpidd_messages_published_total") == 1

                    async def ignore(message: Any) -> None:
                        pass

                    consumer_tag = await queue.consume(ignore)
                    async with http.delete(
                        f"{base}/api/queues/jobs?if_unused=true", headers=GUEST
                    ) as r:
                        assert r.status == 409
                    await queue.cancel(consumer_tag)

                async with http.delete(f"{base}/api/queues/jobs", headers=GUEST) as r:
                    assert r.status == 200
                async with http.get(f"{base}/metrics", headers=GUEST) as r:
                    samples = parse_metrics(await r.text())
                assert sample(samples, "qpidd_queues") == 0
                assert ("qpidd_queue_messages", frozenset({("queue", "jobs")})) not in samples
        finally:
            await broker.stop(grace=1.0)

    asyncio.run(main())
