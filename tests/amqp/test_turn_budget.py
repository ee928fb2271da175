"""The loop's CPU per turn for the sockets' callbacks (issue 25, "no long stalls"):
:class:`~common.slices.TurnBudget` as a core with a work clock and a recorded
``call_soon``, then the shell (:class:`~broker.amqp.protocol.AmqpProtocol`) over real
sockets with a budget of nothing, where every socket waits for a later turn at each of its
callbacks (a new socket, each read, a login decided, a socket lost): clients still do all
they did, in order, and a lost socket's connection is still released. ``bench/
connection_storm.py`` measures the steps of 2,000 clients coming, refused or going at once
(docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.amqp.client import AmqpClient, Delivery, connect
from broker.amqp.protocol import AmqpProtocol
from common.polling import poll_until_async
from common.slices import HANDSHAKE, TRAFFIC, TurnBudget
from tests.amqp.helpers import make_context, open_client

HOST = "127.0.0.1"
#: No deadline: the suite shares two busy cores.
no_deadline = settings(deadline=None)


class Loop:
    """A recorded ``call_soon``: :meth:`turn` runs what the last turn scheduled."""

    def __init__(self) -> None:
        self.soon: list[Callable[[], None]] = []

    def call_soon(self, callback: Callable[[], None]) -> None:
        self.soon.append(callback)

    def turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


class WorkClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pieces_run_at_once_while_the_turn_has_cpu_left_then_wait_in_order() -> None:
    loop, cpu = Loop(), WorkClock()
    turns = TurnBudget(lambda: loop.call_soon, budget=0.02, cpu=cpu)
    assert not turns.spent()
    cpu.now = 0.03  # this turn's CPU is spent: what comes now waits
    assert turns.spent()
    ran: list[int] = []

    def piece(i: int) -> Callable[[], None]:
        def run() -> None:
            ran.append(i)
            cpu.now += 0.008  # 8 ms each: three a turn of 20 ms

        return run

    for i in range(7):
        turns.later(piece(i))
    assert ran == [] and len(turns) == 7 and len(loop.soon) == 1  # one callback a turn
    assert turns.spent()  # pieces wait: a newcomer waits behind them whatever the CPU
    loop.turn()
    assert ran == [0, 1, 2] and len(loop.soon) == 1
    loop.turn()
    loop.turn()
    assert ran == list(range(7)) and loop.soon == [] and len(turns) == 0
    assert not turns.spent()  # the last turn began at 0.078 and took 8 ms


def test_a_turn_runs_one_piece_whatever_it_costs_and_the_queue_moves_past_an_error() -> None:
    loop, cpu = Loop(), WorkClock()
    turns = TurnBudget(lambda: loop.call_soon, budget=0.0, cpu=cpu)
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("a bug")

    turns.later(failing)
    turns.later(lambda: ran.append("next"))
    with pytest.raises(RuntimeError):
        loop.turn()  # the loop reports it
    assert ran == ["failing"] and len(loop.soon) == 1  # the rest still has its turn
    loop.turn()
    assert ran == ["failing", "next"] and loop.soon == []


def test_a_handshakes_steps_before_the_open_connections_and_the_new_sockets() -> None:
    """The storm's rule: a handshake's next step (queued meanwhile too) before the open
    connections' reads and the new sockets' first pieces, which keep their order; each
    turn still runs one piece of each queue, whatever they cost."""
    loop, cpu = Loop(), WorkClock()
    turns = TurnBudget(lambda: loop.call_soon, budget=0.02, cpu=cpu)
    cpu.now = 0.03
    ran: list[str] = []

    def piece(name: str) -> Callable[[], None]:
        def run() -> None:
            ran.append(name)
            cpu.now += 0.006
            if name == "shake0":  # its next step, queued meanwhile
                turns.later(piece("shake0-next"), HANDSHAKE)

        return run

    for i in range(3):
        turns.later(piece(f"new{i}"))
        turns.later(piece(f"read{i}"))
    turns.later(piece("shake0"), HANDSHAKE)
    assert len(turns) == 7 and turns.spent()
    loop.turn()  # one of each (12 ms), then the first-ranked, then the rest, for 20 ms
    assert ran == ["shake0", "new0", "shake0-next", "read0"]
    loop.turn()
    assert ran[4:] == ["new1", "read1", "new2", "read2"] and loop.soon == []
    assert len(turns) == 0


def test_with_a_budget_of_nothing_every_queue_moves_a_piece_a_turn() -> None:
    loop, cpu = Loop(), WorkClock()
    turns = TurnBudget(lambda: loop.call_soon, budget=0.0, cpu=cpu)
    ran: list[str] = []
    for i in range(2):
        turns.later(lambda i=i: ran.append(f"read{i}"))  # type: ignore[misc]
        turns.later(lambda i=i: ran.append(f"shake{i}"), HANDSHAKE)  # type: ignore[misc]
    loop.turn()
    assert ran == ["shake0", "read0"]
    loop.turn()
    assert ran[2:] == ["shake1", "read1"] and loop.soon == []


@no_deadline
@given(
    st.lists(
        st.tuples(st.sampled_from([HANDSHAKE, TRAFFIC, -1]), st.floats(0.0, 0.03)),
        max_size=60,
    )
)
def test_each_queue_in_order_every_queue_moving_the_first_ranked_first(
    ops: list[tuple[int, float]],
) -> None:
    """Any sequence of pieces queued (each costing some CPU; -1: a turn of the loop): each
    queue runs in the order it was filled; a turn begins with one piece of each queue
    that had one, in rank order; past those, a piece runs only when no piece of a queue
    ranked before it waits."""
    loop, cpu = Loop(), WorkClock()
    turns = TurnBudget(lambda: loop.call_soon, budget=0.02, cpu=cpu)
    cpu.now = 1.0  # spent: everything queued waits
    ran: list[tuple[int, int, list[int]]] = []  # rank, number, the queues' lengths then
    counts = [0, 0]

    def piece(rank: int, n: int, cost: float) -> Callable[[], None]:
        def run() -> None:
            ran.append((rank, n, [len(q) for q in turns._queues]))
            cpu.now += cost

        return run

    def one_turn() -> None:
        waiting = [rank for rank, queue in enumerate(turns._queues) if queue]
        before = len(ran)
        loop.turn()
        this = ran[before:]
        assert [rank for rank, _, _ in this[: len(waiting)]] == waiting
        for rank, _, lengths in this[len(waiting) :]:
            assert not any(lengths[:rank]), this

    for rank, cost in ops:
        if rank == -1:
            if loop.soon:
                one_turn()
            continue
        turns.later(piece(rank, counts[rank], cost), rank)
        counts[rank] += 1
    while loop.soon:
        one_turn()
    for rank in (HANDSHAKE, TRAFFIC):
        assert [n for r, n, _ in ran if r == rank] == list(range(counts[rank]))
    assert len(turns) == 0


def test_a_cluster_hosts_socket_is_made_ahead_of_a_storm_of_new_ones() -> None:
    """300 new sockets from another host (127.0.0.2) wait to be made; a socket from a host
    of ``ha-brokers-url`` (127.0.0.1: a backup's link) is made and served ahead of them:
    its client is logged in and open while most of the storm has not had its
    connection.start. The turns are the test's (a piece of each queue a turn, a budget of
    nothing), turned every millisecond once every socket waits."""

    async def main() -> None:
        ctx = make_context()
        pump = Loop()
        turns = TurnBudget(lambda: pump.call_soon, budget=0.0)
        ctx.turns = turns
        ctx.cluster_hosts = frozenset({"127.0.0.1"})
        server = await asyncio.get_running_loop().create_server(lambda: AmqpProtocol(ctx), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        started: list[bool] = []
        storm: list[asyncio.StreamWriter] = []

        async def storm_socket() -> None:
            reader, writer = await asyncio.open_connection(HOST, port, local_addr=("127.0.0.2", 0))
            storm.append(writer)
            writer.write(b"AMQP\x00\x00\x09\x01")
            await reader.read(1)  # connection.start's first byte
            started.append(True)

        async def turning() -> None:
            while True:
                pump.turn()
                await asyncio.sleep(0.001)

        tasks = [asyncio.ensure_future(storm_socket()) for _ in range(300)]
        turner: asyncio.Future[None] | None = None
        try:
            await poll_until_async(lambda: len(turns) == 300, timeout=30)  # all made later
            turner = asyncio.ensure_future(turning())
            client = await connect(HOST, port, user="guest", password="guest")
            behind = 300 - len(started)
            await client.close()
            assert behind >= 200, f"only {behind} of the storm's sockets were behind it"
            await asyncio.wait_for(asyncio.gather(*tasks), 60)  # the storm is served too
        finally:
            if turner is not None:
                turner.cancel()
            for task in tasks:
                task.cancel()
            for writer in storm:
                writer.close()
            server.close()
            await server.wait_closed()

    uvloop.run(main())


def test_a_client_gone_before_its_socket_was_made_costs_its_turn_nothing() -> None:
    """A socket waiting for its turn to be made is read on: its client giving up (closing)
    is seen at once, and at its turn nothing is made and nothing sent (soak42: such
    sockets, paused, were made and sent connection.start long after their clients left)."""

    class Counted(AmqpProtocol):
        made = 0
        lost = 0

        def _make(self, transport: asyncio.Transport) -> None:
            Counted.made += 1
            super()._make(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            Counted.lost += 1
            super().connection_lost(exc)

    async def main() -> None:
        ctx = make_context()
        pump = Loop()
        ctx.turns = TurnBudget(lambda: pump.call_soon, budget=0.0)
        server = await asyncio.get_running_loop().create_server(lambda: Counted(ctx), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            writers = []
            for _ in range(20):
                _reader, writer = await asyncio.open_connection(HOST, port)
                writer.write(b"AMQP\x00\x00\x09\x01")
                writers.append(writer)
            for writer in writers:
                writer.close()  # given up before its turn
            await poll_until_async(lambda: Counted.lost == 20, timeout=30)
            while pump.soon:
                pump.turn()
            assert Counted.made == 0 and not ctx.connections
        finally:
            server.close()
            await server.wait_closed()

    uvloop.run(main())


def test_without_a_loop_a_piece_runs_at_once() -> None:
    turns = TurnBudget(lambda: None, budget=0.0)
    ran: list[int] = []
    turns.later(lambda: ran.append(1))
    assert ran == [1] and len(turns) == 0


async def _session(port: int, i: int) -> tuple[list[bytes], int]:
    """Declare, publish confirmed, get one, consume the rest, close."""
    client = await connect(HOST, port, user="guest", password="guest")
    channel = await client.open_channel()
    await channel.confirm_select()
    queue = f"q{i}"
    await channel.declare_queue(queue)
    for n in range(5):
        await channel.publish("", queue, b"%d-%d" % (i, n))
    first = await channel.get(queue, no_ack=True)
    assert first is not None
    got = [first.body]
    done = asyncio.get_running_loop().create_future()

    def delivered(delivery: Delivery) -> None:
        got.append(delivery.body)
        if len(got) == 5 and not done.done():
            done.set_result(None)

    await channel.consume(queue, delivered, no_ack=True)
    await asyncio.wait_for(done, 30)
    await client.close()
    return got, i


class CountedTurns(TurnBudget):
    """Counts the pieces that waited for a turn."""

    waited = 0

    def later(self, work: Callable[[], None], rank: int = TRAFFIC) -> None:
        self.waited += 1
        super().later(work, rank)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_clients_served_a_turn_at_a_time_do_all_they_did_in_order(loop: str) -> None:
    """A budget of nothing: each callback of each socket waits for a turn of its own
    (uvloop, the broker's loop, reads a new socket whatever its connection_made did)."""

    async def main() -> None:
        ctx = make_context()
        turns = CountedTurns(lambda: asyncio.get_running_loop().call_soon, budget=0.0)
        ctx.turns = turns
        server = await asyncio.get_running_loop().create_server(lambda: AmqpProtocol(ctx), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(_session(port, i) for i in range(20))), 60
            )
            for got, i in results:
                assert got == [b"%d-%d" % (i, n) for n in range(5)]
            # sockets lost at once (the clients' host gone): each connection released
            clients: list[AmqpClient] = [
                await connect(HOST, port, user="guest", password="guest") for _ in range(10)
            ]
            await poll_until_async(lambda: len(ctx.connections) == 10, timeout=30)
            for client in clients:
                await client.abort()
            await poll_until_async(lambda: not ctx.connections, timeout=30)
            assert len(turns) == 0
            # every socket made, read, logged in and lost in turns
            assert turns.waited >= 30 * 4, turns.waited
        finally:
            server.close()
            await server.wait_closed()

    if loop == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())


def test_a_lost_connection_releases_its_channels_a_slice_at_a_time() -> None:
    """A backup's link has a channel a queue stream: the socket's loss releases them
    ``size`` a slice (the shell runs a slice a turn), each channel's consumer and
    unacknowledged deliveries when its slice runs; the connection is closed and gone
    from the context after the last."""
    client = open_client()
    conn, ctx = client.conn, client.ctx
    for number in range(2, 13):
        client.open_channel(number)
    for number in range(1, 13):
        client.send(number, commands.Queue.Declare(queue=f"q{number}"))
        client.send(number, commands.Basic.Consume(queue=f"q{number}"))
    queues = [ctx.vhost.queues[f"q{n}"] for n in range(1, 13)]
    assert [q.consumer_count for q in queues] == [1] * 12
    steps = conn.connection_lost_steps(size=5)
    next(steps)  # channels 1-5
    assert [q.consumer_count for q in queues] == [0] * 5 + [1] * 7
    assert conn.id in ctx.connections
    next(steps)  # 6-10
    with pytest.raises(StopIteration):
        next(steps)  # 11-12, then the connection closes
    assert [q.consumer_count for q in queues] == [0] * 12
    assert conn.id not in ctx.connections and not conn.channels


def test_the_clusters_own_connections_never_wait_behind_clients() -> None:
    """A backup's replication link and an HA admin connection (known from start-ok) are
    read at once however spent the turn: the link carries the member lease's grants."""

    async def main() -> None:
        ctx = make_context()
        turns = CountedTurns(lambda: asyncio.get_running_loop().call_soon, budget=0.0)
        ctx.turns = turns
        server = await asyncio.get_running_loop().create_server(lambda: AmqpProtocol(ctx), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            for properties, waits in (({}, True), ({"qpid.ha-admin": True}, False)):
                client = await connect(
                    HOST, port, user="guest", password="guest", client_properties=properties
                )
                channel = await client.open_channel()
                before = turns.waited
                for i in range(10):
                    await channel.declare_queue(f"q{i}")
                assert (turns.waited - before >= 10) is waits, (properties, turns.waited)
                await client.close()
        finally:
            server.close()
            await server.wait_closed()

    uvloop.run(main())
