"""An HA broker's admission policy as a 1.0 client meets it, without sockets: a backup's
refusal is ``amqp:connection:redirect`` naming where to go (``network-host``, ``port``), a
refusal that names nowhere is ``amqp:connection:forced`` (a client with a URL list tries
its next address, as a 0-9-1 client does after 530), both logged at info; and a primary
whose member lease lapsed holds a 1.0 client's output (deliveries, dispositions) until it
serves again, as it holds a 0-9-1 client's (``holds_output``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.amqp.context import AdmittedConnection
from broker.amqp10.performatives import Close, Disposition
from broker.amqp10.sections import parse_message
from broker.core.errors import AmqpError, ReplyCode, RoutineRefusal
from tests.amqp10.helpers import Client10, make_context


class Admission:
    """A policy that refuses with ``refusal`` and holds output while ``holding``."""

    def __init__(self, refusal: AmqpError | None = None) -> None:
        self.refusal = refusal
        self.holding = False
        self.confirming = True
        self.confirms = 0

    def admit(self, connection: AdmittedConnection) -> AmqpError | None:
        return self.refusal

    def refusal_before_login(self, client_properties: Mapping[str, Any]) -> AmqpError | None:
        return None  # these tests refuse after the login (at open): admit()

    def released(self, connection: AdmittedConnection) -> None:
        pass

    def may_confirm(self) -> bool:
        return self.confirming

    def holds_output(self, connection: AdmittedConnection) -> bool:
        return self.holding

    def confirms_sent(self, connection: AdmittedConnection) -> None:
        self.confirms += 1


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.lines.append((level, event, fields))


def refused_with(refusal: AmqpError) -> tuple[Close, Log]:
    ctx = make_context()
    ctx.admission = Admission(refusal)
    ctx.log = log = Log()
    client = Client10(ctx)
    client.login()
    client.take()
    client.open()
    (close,) = client.take(Close)
    assert client.conn.should_close or not client.conn.is_open
    return close, log


def test_a_backup_redirects_a_client_to_the_primary() -> None:
    text = "HA backup: not the primary (state ready); clients connect to amqp:tcp:n1:5672"
    close, log = refused_with(
        RoutineRefusal(ReplyCode.NOT_ALLOWED, text, redirect=("10.0.0.1", 5673))
    )
    error = close.error
    assert error is not None and error.condition == "amqp:connection:redirect"
    assert error.description == text
    info = {str(k): v for k, v in (error.info or {}).items()}
    assert info == {"hostname": "10.0.0.1", "network-host": "10.0.0.1", "port": 5673}
    assert [(level, event) for level, event, _ in log.lines] == [("info", "protocol_error")]


def test_a_refusal_naming_nowhere_is_forced_so_clients_try_their_next_address() -> None:
    close, log = refused_with(RoutineRefusal(ReplyCode.NOT_ALLOWED, "HA broker fenced"))
    error = close.error
    assert error is not None and error.condition == "amqp:connection:forced"
    assert error.description == "HA broker fenced" and not error.info
    assert [level for level, event, _ in log.lines if event == "protocol_error"] == ["info"]


def test_other_refusals_keep_their_condition_and_are_warnings() -> None:
    close, log = refused_with(AmqpError(ReplyCode.ACCESS_REFUSED, "not that user"))
    assert close.error is not None and close.error.condition == "amqp:unauthorized-access"
    assert [level for level, event, _ in log.lines if event == "protocol_error"] == ["warning"]


def test_a_lapsed_member_lease_holds_deliveries_and_dispositions() -> None:
    ctx = make_context()
    ctx.vhost.declare_queue("q")
    admission = Admission()
    ctx.admission = admission
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q")
    client.attach_receiver("q", handle=1)
    client.credit(1, 10)
    client.take()
    admission.holding = True
    client.transfer(0, 0, b"held")  # unsettled: its disposition waits too
    client.flush()
    assert client.take() == [] and client.conn.data_to_send() == b""
    admission.holding = False
    client.conn.signal_output()  # the broker wakes every connection when it serves again
    sent = client.transfers()
    assert [parse_message(payload).data for _, payload in sent] == [b"held"]
    (disposition,) = client.take(Disposition)
    assert disposition.first == 0 and disposition.settled
    assert admission.confirms == 1


def test_dispositions_wait_for_may_confirm_but_deliveries_do_not() -> None:
    ctx = make_context()
    ctx.vhost.declare_queue("q")
    admission = Admission()
    admission.confirming = False
    ctx.admission = admission
    client = Client10(ctx)
    client.connect()
    client.attach_sender("q")
    client.attach_receiver("q", handle=1)
    client.credit(1, 10)
    client.take()
    client.transfer(0, 0, b"m")
    assert len(client.transfers()) == 1 and client.take(Disposition) == []
    admission.confirming = True
    client.conn.signal_output()
    assert len(client.take(Disposition)) == 1
