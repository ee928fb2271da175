"""An HA broker that will refuse a client at connection.open spends no password hash on it
(issue 25: every client of a fail-over dials the backup, and each dial cost a 50 ms scrypt
before the 530). Without sockets: a real HaBroker and its connections, frames in and out.

What a client sees is what it saw before: connection.tune (offering no limit, so that a
client not logged in learns none of the broker's settings), then at connection.open the
same 530 NOT_ALLOWED with the same words. What it learns is only what connection.start
already told it: the broker's HA state and public URL."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pamqp import commands

from broker.amqp import framing
from broker.amqp.state import ConnectionState
from broker.core.errors import ReplyCode
from broker.ha.ha_broker import HaBroker
from broker.ha.names import PUBLIC_URL_PROPERTY, STATUS_PROPERTY
from broker.options import parse_options
from tests.amqp.helpers import Client, FakeClock, make_context
from tests.ha.test_ha_broker import LoggedEvents

LEASE = 2.0


def ha_broker(tmp_path: Path) -> tuple[HaBroker, FakeClock, LoggedEvents]:
    options = parse_options(
        [
            "--ha-cluster=yes",
            "--ha-brokers-url=127.0.0.1:1,127.0.0.1:2",
            "--ha-public-url=amqp:tcp:10.0.0.9:5672",
            "--ha-replicate=all",
            f"--data-dir={tmp_path}",
            f"--ha-member-lease={LEASE}",
            f"--ha-member-lease-max={LEASE}",  # a fixed lease: the fake clock's jumps
            "--ha-clock-drift=0.01",
        ]
    )
    clock = FakeClock()
    ctx = make_context(clock)
    ctx.log = LoggedEvents()
    ha = HaBroker(ctx.vhost, ctx, options, amqp_port=lambda: 5672, on_fenced=lambda _: None)
    ha.log_ = LoggedEvents()
    return ha, clock, ctx.log


class Dial:
    """One client's handshake, a method at a time, noting whether a password was checked."""

    def __init__(self, ha: HaBroker, properties: dict[str, Any], password: str) -> None:
        self.client = client = Client(ha.context)
        client.send_bytes(framing.PROTOCOL_HEADER)
        self.start = client.expect(commands.Connection.Start)
        client.conn.receive_data(
            _frame(
                commands.Connection.StartOk(
                    client_properties=properties,
                    mechanism="PLAIN",
                    response=f"\0guest\0{password}",
                )
            )
        )
        #: the login waits for a password hash (the shell would run it in a thread)
        self.hashed = client.conn.login_check is not None
        if self.hashed:
            check = client.conn.login_check
            assert check is not None
            client.conn.password_checked(check.run())

    def answer(self) -> Any:
        """What came after start-ok: connection.tune, or a close."""
        [method] = self.client.methods()
        return method

    def open(self) -> Any:
        """tune-ok and open; what the broker answers to open (the tune before it, if not
        read, is passed over)."""
        self.client.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=0, heartbeat=0))
        self.client.send(0, commands.Connection.Open(virtual_host="/"))
        return self.client.methods()[-1]


def _frame(method: Any) -> bytes:
    from pamqp import frame

    return frame.marshal(method, 0)


def test_a_backup_refuses_a_client_before_its_login_with_the_words_it_used_after(
    tmp_path: Path,
) -> None:
    ha, _, log = ha_broker(tmp_path)
    for password in ("guest", "wrong"):
        dial = Dial(ha, {"product": "app"}, password)
        assert not dial.hashed  # no password hash for a client the backup will refuse
        tune = dial.answer()
        assert isinstance(tune, commands.Connection.Tune)
        # the tune offers nothing: a client not logged in learns no setting
        assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (0, 0, 0)
        close = dial.open()
        assert isinstance(close, commands.Connection.Close)
        assert close.reply_code == ReplyCode.NOT_ALLOWED
        # the same words as after a login, built only from what connection.start said
        props = dial.start.server_properties
        assert close.reply_text == (
            f"NOT_ALLOWED - HA backup: not the primary (state {props[STATUS_PROPERTY]});"
            f" clients connect to {props[PUBLIC_URL_PROPERTY]}"
        )
        assert props[PUBLIC_URL_PROPERTY] == "amqp:tcp:10.0.0.9:5672"
        assert dial.client.conn.state is ConnectionState.CLOSING
    assert ha.context.connections_refused_total == 2
    # logged as before, at info, without a user: nobody logged in
    refusals = [f for level, e, f in log.lines if e == "protocol_error" and level == "info"]
    assert len(refusals) == 2 and {f["user"] for f in refusals} == {None}
    assert not [e for _, e, _ in log.lines if e == "authentication_failed"]


def test_an_admin_and_a_link_still_log_in_on_a_backup(tmp_path: Path) -> None:
    """An HA admin connection (the agent, qpid-ha) is served by a backup: its password is
    checked; a wrong one is 403 as before, never a 530 that would hide it."""
    ha, _, _ = ha_broker(tmp_path)
    admin = Dial(ha, {"qpid.ha-admin": True}, "guest")
    assert admin.hashed and isinstance(admin.answer(), commands.Connection.Tune)
    assert isinstance(admin.open(), commands.Connection.OpenOk)
    wrong = Dial(ha, {"qpid.ha-admin": True}, "wrong")
    close = wrong.answer()
    assert wrong.hashed and close.reply_code == ReplyCode.ACCESS_REFUSED


def test_a_primary_checks_every_login(tmp_path: Path) -> None:
    ha, _, _ = ha_broker(tmp_path)
    asyncio.run(ha.promote(epoch=1))
    dial = Dial(ha, {}, "guest")
    assert dial.hashed and isinstance(dial.answer(), commands.Connection.Tune)
    assert isinstance(dial.open(), commands.Connection.OpenOk)
    wrong = Dial(ha, {}, "wrong")
    assert wrong.hashed and wrong.answer().reply_code == ReplyCode.ACCESS_REFUSED


def test_a_primary_not_serving_refuses_before_the_login_without_naming_members(
    tmp_path: Path,
) -> None:
    """A promoted broker waiting out its own grant to the older epoch, and a primary whose
    member lease lapsed, refuse clients before their login; the lapse's refusal does not
    name the members (a client not logged in never learnt them)."""
    ha, clock, _ = ha_broker(tmp_path)
    ha.member_grant(3, LEASE)  # as a backup of the primary of epoch 3
    asyncio.run(ha.promote(epoch=4, in_sync=["b1"]))
    waiting = Dial(ha, {}, "guest")
    assert not waiting.hashed and isinstance(waiting.answer(), commands.Connection.Tune)
    text = waiting.open().reply_text
    assert text.startswith("NOT_ALLOWED - HA primary not serving yet: its grant to an older")

    clock.now += 2 * LEASE  # the wait is over; b1 asked and never answering: a lapse
    ha.lease.set_changed()
    seq, needed = ha.lease.leases.requested("b1", ha.now())
    assert needed
    ha.lease.lease_granted("b1", seq)
    assert isinstance(Dial(ha, {}, "guest").open(), commands.Connection.OpenOk)
    clock.now += LEASE
    lapsed = Dial(ha, {}, "guest")
    assert not lapsed.hashed
    text = lapsed.open().reply_text
    assert text == "NOT_ALLOWED - HA primary not serving: the member lease of a member lapsed"
    assert "b1" not in text


def test_a_backup_promoted_during_the_handshake_still_refuses_the_unchecked_client(
    tmp_path: Path,
) -> None:
    """The login was skipped at start-ok; if the broker serves by connection.open, the
    client is refused all the same (its password was never checked) and dials again."""
    ha, _, _ = ha_broker(tmp_path)
    dial = Dial(ha, {}, "wrong")
    assert not dial.hashed and isinstance(dial.answer(), commands.Connection.Tune)
    asyncio.run(ha.promote(epoch=1))
    close = dial.open()
    assert close.reply_code == ReplyCode.NOT_ALLOWED
    assert "began serving during this connection's handshake" in close.reply_text
    again = Dial(ha, {}, "wrong")  # the next dial is checked: a wrong password is 403
    assert again.hashed and again.answer().reply_code == ReplyCode.ACCESS_REFUSED
