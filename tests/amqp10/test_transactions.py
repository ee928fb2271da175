"""AMQP 1.0 transactions without sockets: a scripted client against the sans-I/O broker
Connection (``broker/amqp10/coordinator.py``), with a fake in-sync backup (a GUARD
observer holding each message's confirm) and a fake replication barrier: the discharge's
``accepted`` goes out only once both have the transaction's work."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from broker.amqp10.performatives import (
    RECEIVER,
    SENDER,
    Accepted,
    Attach,
    Coordinator,
    Declare,
    Declared,
    Detach,
    Discharge,
    Disposition,
    Rejected,
    Source,
    TransactionalState,
    Transfer,
)
from broker.amqp10.sections import AmqpMessage, AmqpValue, Data
from broker.core.message import Message
from broker.core.queue import Queue
from broker.core.queue_contracts import ObserverRole
from tests.amqp10.helpers import Client10, make_context
from tests.core.fakes import GuardingBackup

CTL = 5


class Barrier:
    """The HA primary's barrier (ctx.barrier): replies wait until passed."""

    def __init__(self) -> None:
        self.waiting: list[Callable[[], None]] = []

    def after_replicated(self, reply: Callable[[], None], queues: Iterable[Queue] = ()) -> None:
        self.waiting.append(reply)

    def pass_all(self) -> None:
        waiting, self.waiting = self.waiting, []
        for reply in waiting:
            reply()


def client(queue: str = "q") -> tuple[Client10, Queue]:
    ctx = make_context()
    found = ctx.vhost.declare_queue(queue)
    c = Client10(ctx)
    c.connect()
    c.send(
        0,
        Attach(
            name="txn-ctrl", handle=CTL, role=SENDER, source=Source(),
            target=Coordinator(capabilities=("amqp:local-transactions",)),
            initial_delivery_count=0,
        ),
    )  # fmt: skip
    attached = c.take(Attach)
    assert isinstance(attached[0].target, Coordinator)
    assert "amqp:local-transactions" in (attached[0].target.capabilities or ())
    return c, found


def control(c: Client10, delivery_id: int, value: Any) -> Disposition | None:
    """Send a control message; its answer, if any came (other dispositions: ``c.others``)."""
    c.send(
        0,
        Transfer(
            handle=CTL, delivery_id=delivery_id, delivery_tag=b"c%d" % delivery_id,
            message_format=0, settled=False,
        ),
        AmqpMessage(body=[AmqpValue(value)]).encode(),
    )  # fmt: skip
    taken = c.take(Disposition)
    found = [d for d in taken if d.role is RECEIVER and d.first == delivery_id]
    OTHERS[:] = [d for d in taken if d not in found]
    return found[0] if found else None


OTHERS: list[Disposition] = []


def declare(c: Client10, delivery_id: int) -> bytes:
    answer = control(c, delivery_id, Declare())
    assert answer is not None and answer.settled and isinstance(answer.state, Declared)
    return bytes(answer.state.txn_id)


def post(c: Client10, handle: int, delivery_id: int, txn: bytes, body: bytes) -> Any:
    c.send(
        0,
        Transfer(
            handle=handle, delivery_id=delivery_id, delivery_tag=b"%d" % delivery_id,
            message_format=0, settled=False, state=TransactionalState(txn),
        ),
        AmqpMessage(body=[Data(body)]).encode(),
    )  # fmt: skip
    return c.take()


def test_a_discharge_is_accepted_only_once_the_backup_and_barrier_have_the_commit() -> None:
    c, queue = client()
    backup = GuardingBackup()
    queue.observe(backup, ObserverRole.GUARD)
    barrier = Barrier()
    c.ctx.barrier = barrier
    c.attach_sender("q", handle=0)
    c.take()
    txn = declare(c, 0)
    answer = post(c, 0, 0, txn, b"one")
    assert answer == [
        Disposition(role=RECEIVER, first=0, settled=True, state=TransactionalState(txn, Accepted()))
    ]
    post(c, 0, 1, txn, b"two")
    assert queue.message_count == 0  # not before the commit
    assert control(c, 1, Discharge(txn_id=txn)) is None
    assert queue.message_count == 2
    assert len(backup.held) == 2
    backup.acknowledge_all()  # no dequeues in this one: the barrier is not asked
    assert [d.state for d in c.take(Disposition)] == [Accepted()]

    # retirement: the accepted outcome's dequeues wait for the barrier
    c.attach_receiver("q", handle=1)
    c.credit(1, 2)
    delivered = c.transfers()
    assert [t.delivery_id for t, _ in delivered] == [0, 1]
    txn = declare(c, 2)
    state = TransactionalState(txn, Accepted())
    c.send(0, Disposition(role=RECEIVER, first=0, last=1, settled=False, state=state))
    assert c.take(Disposition) == [] and queue.unacked == 2
    assert control(c, 3, Discharge(txn_id=txn)) is None
    assert queue.unacked == 0  # applied at commit...
    settled = OTHERS  # ...and the deliveries settled by the broker
    assert [(d.role, d.first, d.settled, d.state) for d in settled] == [
        (SENDER, 0, True, Accepted()), (SENDER, 1, True, Accepted()),
    ]  # fmt: skip
    barrier.pass_all()
    assert [d.state for d in c.take(Disposition)] == [Accepted()]  # the discharge


def test_rollback_unknown_ids_and_a_control_link_detached() -> None:
    c, queue = client()
    c.attach_sender("q", handle=0)
    c.take()
    txn = declare(c, 0)
    post(c, 0, 0, txn, b"dropped")
    answer = control(c, 1, Discharge(txn_id=txn, fail=True))
    assert answer is not None and answer.state == Accepted()
    assert queue.message_count == 0
    answer = control(c, 2, Discharge(txn_id=txn))  # discharged already: unknown
    assert answer is not None and isinstance(answer.state, Rejected)
    assert answer.state.error is not None
    assert answer.state.error.condition == "amqp:transaction:unknown-id"
    detached = post(c, 0, 1, b"nope", b"x")  # work in an unknown transaction
    assert [d.error and d.error.condition for d in detached if isinstance(d, Detach)] == [
        "amqp:transaction:unknown-id"
    ]

    # the control link detached: its open transaction rolls back
    c.attach_sender("q", handle=2)
    c.take()
    txn = declare(c, 3)
    post(c, 2, 2, txn, b"lost")
    c.send(0, Detach(handle=CTL, closed=True))
    assert queue.message_count == 0 and c.conn.sessions[0].transactions._open == {}


def test_a_rolled_back_retirement_leaves_the_delivery_live_and_a_lost_connection_rolls_back() -> (
    None
):
    c, queue = client()
    ctx = c.ctx
    ctx.vhost.publish(ctx.vhost.exchanges[""], Message("", "q", body=b"m"))
    c.attach_receiver("q", handle=1)
    c.credit(1, 1)
    assert len(c.transfers()) == 1
    txn = declare(c, 0)
    c.send(
        0,
        Disposition(
            role=RECEIVER, first=0, settled=False, state=TransactionalState(txn, Accepted())
        ),
    )
    answer = control(c, 1, Discharge(txn_id=txn, fail=True))
    assert answer is not None and answer.state == Accepted()
    assert queue.unacked == 1  # still the client's: it may settle it otherwise
    c.send(0, Disposition(role=RECEIVER, first=0, settled=True, state=Accepted()))
    assert queue.unacked == 0 and queue.message_count == 0

    c.attach_sender("q", handle=0)
    c.take()
    txn = declare(c, 2)
    post(c, 0, 0, txn, b"never")
    c.conn.connection_lost()
    assert queue.message_count == 0


def test_a_delivery_whose_transaction_ended_before_its_last_frame_is_refused() -> None:
    c, queue = client()
    c.attach_sender("q", handle=0)
    c.take()
    txn = declare(c, 0)
    payload = AmqpMessage(body=[Data(b"split")]).encode()
    head = Transfer(
        handle=0, delivery_id=0, delivery_tag=b"0", message_format=0, settled=False,
        more=True, state=TransactionalState(txn),
    )  # fmt: skip
    c.send(0, head, payload[:4])
    answer = control(c, 1, Discharge(txn_id=txn))
    assert answer is not None and answer.state == Accepted()  # committed: nothing in it
    c.send(0, Transfer(handle=0, more=False), payload[4:])
    detached = [d for d in c.take() if isinstance(d, Detach)]
    assert [d.error and d.error.condition for d in detached] == ["amqp:transaction:unknown-id"]
    assert queue.message_count == 0
