"""The new sockets waiting for a turn (:mod:`broker.amqp.new_sockets`): oldest first while
the broker keeps up, newest first once the oldest has waited its patience; a socket whose
client left is never made. The rule sans I/O (a given clock, hypothesis over any arrivals,
departures, tickets and clock steps), then over real sockets: a storm older than the
patience, and a new client made and opened ahead of it (soak44: first come first served,
every handshake began at the end of its client's patience and none finished)."""

from __future__ import annotations

import asyncio
from functools import partial

import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.amqp.client import connect
from broker.amqp.new_sockets import NewSockets, Shift, Waiting
from broker.amqp.protocol import AmqpProtocol
from common.polling import poll_until_async
from common.slices import TurnBudget
from tests.amqp.helpers import make_context
from tests.amqp.test_turn_budget import Loop, WorkClock

HOST = "127.0.0.1"


def _queue(clock: WorkClock, patience: float = 3.0) -> tuple[NewSockets, list[Shift]]:
    shifts: list[Shift] = []
    return NewSockets(clock=clock, patience=patience, on_shift=shifts.append), shifts


def test_oldest_first_while_the_oldest_is_young() -> None:
    clock = WorkClock()
    sockets, shifts = _queue(clock)
    made: list[int] = []
    tickets = []
    for n in range(5):
        clock.now += 0.5
        ticket, _wait = sockets.arrive(partial(made.append, n))
        tickets.append(ticket)
    for ticket in tickets:
        ticket()
    assert made == [0, 1, 2, 3, 4]
    assert shifts == [] and not sockets.newest_first and len(sockets) == 0


def test_newest_first_once_the_oldest_waited_its_patience_then_in_order_again() -> None:
    clock = WorkClock()
    sockets, shifts = _queue(clock)
    made: list[int] = []
    for n in range(4):
        sockets.arrive(partial(made.append, n))
        clock.now += 1.0  # socket 0 has waited 4 s once the last came
    sockets.make_one()
    sockets.make_one()
    assert made == [3, 2]
    assert shifts == [Shift(newest_first=True, waited_s=4.0, waiting=4)]
    assert sockets.made_newest_first == 2
    clock.now = 0.5  # the clock is the test's: the oldest is young again
    sockets.make_one()
    sockets.make_one()
    sockets.make_one()  # nothing waits: a ticket that makes nothing
    assert made == [3, 2, 0, 1]
    assert shifts[1:] == [Shift(newest_first=False, waited_s=0.5, waiting=2)]


def test_a_socket_whose_client_left_is_never_made_and_costs_no_ticket() -> None:
    clock = WorkClock()
    sockets, _shifts = _queue(clock)
    made: list[int] = []
    waits: list[Waiting] = []
    for n in range(5):
        _ticket, wait = sockets.arrive(partial(made.append, n))
        waits.append(wait)
    waits[0].cancel()
    waits[4].cancel()
    sockets.make_one()
    assert made == [1]
    clock.now = 10.0  # behind: the newest that stays
    sockets.make_one()
    assert made == [1, 3]
    waits[2].cancel()
    sockets.make_one()
    assert made == [1, 3] and len(sockets) == 0


events = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.floats(0.0, 2.0)),
        st.tuples(st.just("leave"), st.integers(0, 200)),
        st.tuples(st.just("ticket"), st.floats(0.0, 2.0)),
    ),
    max_size=150,
)


@settings(deadline=None, max_examples=300)
@given(events=events, patience=st.floats(0.5, 5.0))
def test_each_ticket_makes_the_rules_socket(
    events: list[tuple[str, float | int]], patience: float
) -> None:
    """Any arrivals, departures and tickets: each ticket makes at most one socket, never
    one whose client left and never one twice; the oldest waiting while it waited less
    than the patience, else the newest; a ticket makes none only when none waits."""
    clock = WorkClock()
    sockets = NewSockets(clock=clock, patience=patience)
    made: list[int] = []
    waits: list[Waiting] = []
    arrived: list[float] = []
    left: set[int] = set()
    for kind, value in events:
        if kind == "arrive":
            clock.now += float(value)
            n = len(waits)
            _ticket, wait = sockets.arrive(partial(made.append, n))
            waits.append(wait)
            arrived.append(clock.now)
        elif kind == "leave" and waits:
            n = int(value) % len(waits)
            if n not in made:
                waits[n].cancel()
                left.add(n)
        elif kind == "ticket":
            clock.now += float(value)
            waiting = [n for n in range(len(waits)) if n not in left and n not in made]
            before = len(made)
            sockets.make_one()
            if not waiting:
                assert len(made) == before
                continue
            assert len(made) == before + 1
            oldest = waiting[0]
            expected = oldest if clock.now - arrived[oldest] < patience else waiting[-1]
            assert made[-1] == expected
    assert len(made) == len(set(made)) and not set(made) & left


def test_a_new_client_is_made_and_opened_ahead_of_a_storm_past_its_patience() -> None:
    """100 sockets wait to be made (a budget of nothing, the test's turns) and, by the
    test's clock, have waited past the patience when a client comes: its socket is the
    first made, and it logs in and opens; 10 of the storm that leave meanwhile are never
    made; the rest are served afterwards, every one newest first."""

    class Counted(AmqpProtocol):
        made: list[int] = []  # the peers' ports in the order made

        def _make(self, transport: asyncio.Transport) -> None:
            Counted.made.append(transport.get_extra_info("peername")[1])
            super()._make(transport)

    async def main() -> None:
        ctx = make_context()
        pump = Loop()
        clock = WorkClock()
        ctx.turns = TurnBudget(lambda: pump.call_soon, budget=0.0)
        ctx.new_sockets = sockets = NewSockets(clock=clock, patience=3.0)
        server = await asyncio.get_running_loop().create_server(lambda: Counted(ctx), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        started: list[bool] = []
        storm: list[asyncio.StreamWriter] = []

        async def storm_socket() -> None:
            reader, writer = await asyncio.open_connection(HOST, port)
            storm.append(writer)
            writer.write(b"AMQP\x00\x00\x09\x01")
            if await reader.read(1):  # connection.start's first byte
                started.append(True)

        async def turning() -> None:
            while True:
                pump.turn()
                await asyncio.sleep(0.001)

        tasks = [asyncio.ensure_future(storm_socket()) for _ in range(100)]
        turner: asyncio.Future[None] | None = None
        try:
            await poll_until_async(lambda: len(sockets) == 100 and len(storm) == 100, timeout=30)
            for writer in storm[:10]:  # the oldest ten give up
                writer.close()
            await poll_until_async(lambda: sum(w.gone for w in sockets._waiting) == 10, 30)
            clock.now = 10.0  # the storm has waited 10 s: the broker is behind
            dialled = asyncio.ensure_future(connect(HOST, port, user="guest", password="guest"))
            await poll_until_async(lambda: len(sockets) == 101, timeout=30)  # it waits too
            turner = asyncio.ensure_future(turning())
            client = await dialled
            await client.close()
            storm_ports = {w.get_extra_info("sockname")[1] for w in storm}
            assert Counted.made[0] not in storm_ports  # the client's, made first
            await poll_until_async(lambda: len(started) == 90, timeout=60)  # served too
            assert len(Counted.made) == 91  # the client and the storm that stayed
            left = {w.get_extra_info("sockname")[1] for w in storm[:10]}
            assert not left & set(Counted.made)
            assert sockets.made_newest_first == 91  # every one past the patience
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
