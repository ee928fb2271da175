"""An HA broker that will refuse an AMQP 1.0 client at ``open`` spends no password hash on
it (issue 25, as for 0-9-1 in tests/ha/test_refusal_before_login.py). Without sockets: a
real HaBroker and 1.0 connections, frames in and out.

What a client sees: ``sasl-outcome`` ok (SASL has no outcome that sends a client
elsewhere), then at ``open`` the refusal it met after a login, ``amqp:connection:redirect``
naming ``ha-public-url`` with the backup's words; a wrong password meets the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from broker.amqp10.framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER, frame
from broker.amqp10.performatives import SASL_AUTH, SASL_OK, Close, Open, SaslInit, SaslOutcome
from broker.ha.ha_broker import HaBroker
from tests.amqp10.helpers import Client10
from tests.ha.test_refusal_before_login import ha_broker

REDIRECT = "amqp:connection:redirect"


class Dial10:
    """One 1.0 client's SASL exchange, noting whether a password hash was asked for."""

    def __init__(self, ha: HaBroker, password: str) -> None:
        self.client = client = Client10(ha.context)
        client.send_bytes(SASL_HEADER)
        client.take()
        response = b"\x00guest\x00" + password.encode()
        sasl_init = SaslInit(mechanism="PLAIN", initial_response=response)
        client.conn.receive_data(frame(0, sasl_init, kind=FRAME_SASL))
        #: the login waits for a password hash (the shell would run it in a thread)
        self.hashed = client.conn.login_check is not None
        client.send_bytes(b"")  # runs the hash, if one was asked for
        (self.outcome,) = client.take(SaslOutcome)

    def open(self) -> list[Any]:
        """The AMQP header and ``open``; what the broker answers."""
        self.client.send_bytes(AMQP_HEADER)
        self.client.open()
        return self.client.take()


def test_a_backup_redirects_a_1_0_client_before_its_login(tmp_path: Path) -> None:
    ha, _, log = ha_broker(tmp_path)
    for password in ("guest", "wrong"):
        dial = Dial10(ha, password)
        assert not dial.hashed  # no password hash for a client the backup will refuse
        assert dial.outcome.code == SASL_OK
        opened, close = dial.open()
        assert isinstance(opened, Open) and isinstance(close, Close)
        error = close.error
        assert error is not None and error.condition == REDIRECT
        assert error.description == (
            "HA backup: not the primary (state joining); clients connect to amqp:tcp:10.0.0.9:5672"
        )
        info = {str(k): v for k, v in (error.info or {}).items()}
        assert info == {"hostname": "10.0.0.9", "network-host": "10.0.0.9", "port": 5672}
        assert dial.client.conn.user is None  # nobody logged in
    assert ha.context.connections_refused_total == 2
    refusals = [f for level, e, f in log.lines if e == "protocol_error" and level == "info"]
    assert len(refusals) == 2 and {f["user"] for f in refusals} == {None}
    assert not [e for _, e, _ in log.lines if e == "authentication_failed"]


def test_a_primary_checks_every_1_0_login(tmp_path: Path) -> None:
    ha, _, _ = ha_broker(tmp_path)
    asyncio.run(ha.promote(epoch=1))
    wrong = Dial10(ha, "wrong")
    assert wrong.hashed and wrong.outcome.code == SASL_AUTH
    right = Dial10(ha, "guest")
    assert right.outcome.code == SASL_OK
    (opened,) = right.open()
    assert isinstance(opened, Open) and right.client.conn.user == "guest"


def test_a_backup_promoted_during_the_1_0_handshake_still_refuses_the_unchecked_client(
    tmp_path: Path,
) -> None:
    """The login was skipped at sasl-init; if the broker serves by ``open``, the client
    is refused all the same (its password was never checked), ``amqp:connection:forced``
    (1.0 clients dial again on it), and its next dial is checked."""
    ha, _, _ = ha_broker(tmp_path)
    dial = Dial10(ha, "wrong")
    assert not dial.hashed and dial.outcome.code == SASL_OK
    asyncio.run(ha.promote(epoch=1))
    _, close = dial.open()
    assert close.error is not None and close.error.condition == "amqp:connection:forced"
    assert "began serving during this connection's handshake" in close.error.description
    again = Dial10(ha, "wrong")
    assert again.hashed and again.outcome.code == SASL_AUTH
