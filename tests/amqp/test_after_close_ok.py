"""Nothing follows connection.close-ok (broker/amqp/state.py: CLOSED writes nothing).

Since the broker answers a client's connection.close with close-ok and leaves the socket
for the client to close (up to ``close_timeout``), output released meanwhile (a reply held
by a barrier: the store's write, the HA backups) must not go out after close-ok."""

from __future__ import annotations

from collections.abc import Callable

from pamqp import commands, frame, header

from tests.amqp.helpers import make_context, open_client


class _Barrier:
    """A store barrier whose replies wait until :meth:`release`."""

    def __init__(self) -> None:
        self.waiting: list[Callable[[], None]] = []

    def after_replicated(self, reply: Callable[[], None]) -> None:
        self.waiting.append(reply)

    def release(self) -> None:
        waiting, self.waiting = self.waiting, []
        for reply in waiting:
            reply()


def _close() -> commands.Connection.Close:
    return commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)


def test_a_reply_released_after_close_ok_is_not_sent() -> None:
    ctx = make_context()
    barrier = _Barrier()
    ctx.store_barrier = barrier
    client = open_client(ctx)
    client.take()
    declare = frame.marshal(commands.Queue.Declare(queue="q", durable=True), 1)
    client.send_bytes(declare + frame.marshal(_close(), 0))
    assert [type(f).__name__ for _, f in client.take()] == ["CloseOk"]
    assert barrier.waiting and not client.conn.should_close  # the client closes the socket
    barrier.release()
    assert client.conn.data_to_send() == b""  # no declare-ok after close-ok


def test_a_confirm_settled_before_close_is_not_sent_after_close_ok() -> None:
    client = open_client()
    client.send(1, commands.Confirm.Select())
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    data = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    data += frame.marshal(header.ContentHeader(0, 0, commands.Basic.Properties()), 1)
    client.conn.receive_data(data + frame.marshal(_close(), 0))  # one read, one flush
    names = [type(f).__name__ for _, f in client.take()]
    assert names[-1] == "CloseOk", names
