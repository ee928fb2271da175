"""The member lease in the HA broker, without sockets: where it is checked (admission,
output, confirms), what a format-2 link does to it, and a promotion's wait."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pamqp import commands

from broker.amqp.framing import HEARTBEAT_FRAME
from broker.core.errors import ReplyCode
from broker.ha.ha_broker import HaBroker
from broker.ha.names import BACKUP_PROPERTY, BROKER_ID_PROPERTY, FORMATS_PROPERTY, URL_PROPERTY
from broker.options import parse_options
from tests.amqp.helpers import FakeClock, make_context
from tests.ha.test_ha_broker import LoggedEvents, open_connection

LEASE = 2.0


def ha_broker(tmp_path: Path) -> tuple[HaBroker, FakeClock, LoggedEvents]:
    options = parse_options(
        [
            "--ha-cluster=yes",
            "--ha-brokers-url=127.0.0.1:1",
            "--ha-replicate=all",
            f"--data-dir={tmp_path}",
            f"--ha-member-lease={LEASE}",
            f"--ha-member-lease-max={LEASE}",  # a fixed lease: the fake clock's jumps
            "--ha-clock-drift=0.01",
        ]
    )
    clock = FakeClock()
    ctx = make_context(clock)
    ha = HaBroker(ctx.vhost, ctx, options, amqp_port=lambda: 5672, on_fenced=lambda _: None)
    ha.log_ = log = LoggedEvents()
    return ha, clock, log


def link(formats: str, backup: str = "b1") -> dict[str, Any]:
    return {
        BACKUP_PROPERTY: True,
        BROKER_ID_PROPERTY: backup,
        URL_PROPERTY: f"{backup}:5672",
        FORMATS_PROPERTY: formats,
    }


def refusal(ha: HaBroker) -> str | None:
    client = open_connection(ha, {})
    frames = client.take()
    closes = [f for _, f in frames if isinstance(f, commands.Connection.Close)]
    if not closes:
        return None
    assert closes[0].reply_code == ReplyCode.NOT_ALLOWED
    return str(closes[0].reply_text)


def events(log: LoggedEvents, name: str) -> list[dict[str, Any]]:
    return [fields for _, event, fields in log.lines if event == name]


def grant(ha: HaBroker, backup: str = "b1") -> None:
    seq, needed = ha.lease.leases.requested(backup, ha.now())
    assert needed
    ha.lease.lease_granted(backup, seq)


def test_the_primary_serves_only_while_every_member_grants(tmp_path: Path) -> None:
    ha, clock, log = ha_broker(tmp_path)
    asyncio.run(ha.promote(epoch=1, in_sync=["b1"]))
    ha.lease.set_changed()
    assert ha.lease.leases.members == {"b1"} and ha.lease.leases.enabled
    # b1 never asked (no link yet: dead, or not back): it holds no grant it could take
    # over by, so the agent's lease alone governs and clients are admitted
    assert ha.may_confirm() and refusal(ha) is None
    open_connection(ha, link("1-3")).expect(commands.Connection.OpenOk)  # its link: admitted
    _, needed = ha.lease.leases.requested("b1", ha.now())  # asked: counted from now on
    # its first request counts from its sending (it held no counted grant): the primary
    # serves on while the answer comes (it refused clients until then)
    assert needed and ha.may_confirm() and refusal(ha) is None
    clock.now += LEASE  # never answered: its count lapses as an answered one would
    assert not ha.may_confirm()
    text = refusal(ha)  # clients go elsewhere
    # refused before its login, the client is not told the members' names
    assert text is not None and text.endswith("the member lease of a member lapsed")
    assert "member lease of b1" in ha.lease.not_serving_reason()
    grant(ha)  # asked again, answered
    assert ha.may_confirm() and refusal(ha) is None
    client = open_connection(ha, {})
    client.expect(commands.Connection.OpenOk)
    assert not ha.admission.holds_output(client.conn)

    clock.now += LEASE  # the grant lapses: output held, clients refused, logged
    assert ha.admission.holds_output(client.conn) and not ha.may_confirm()
    assert client.conn.data_to_send() == b""
    # heartbeats keep flowing while the output is held (a client would drop the link)
    client.conn.heartbeat = 2
    client.conn.write(b"held frame")
    clock.now += 1.0
    client.conn.tick()
    assert client.conn.data_to_send() == HEARTBEAT_FRAME
    assert client.conn.data_to_send() == b""  # the held frame stays held
    unanswered, lapsed = events(log, "member_lease_lapsed")
    assert unanswered["member"] == lapsed["member"] == "b1"
    assert unanswered["age_ms"] == lapsed["age_ms"] == 0.0
    assert refusal(ha) is not None

    ha.commit_in_sync(1, [])  # the set without b1: serving again, at once
    assert ha.may_confirm() and refusal(ha) is None
    assert events(log, "member_lease_serving")[-1]["held_ms"] == 1000.0  # the heartbeat's second


def test_a_format_2_link_leaves_the_agents_lease_alone(tmp_path: Path) -> None:
    ha, _, _ = ha_broker(tmp_path)
    asyncio.run(ha.promote(epoch=1, in_sync=["b1"]))
    open_connection(ha, link("1-2")).expect(commands.Connection.OpenOk)
    ha.lease.set_changed()
    assert not ha.lease.leases.enabled
    assert ha.may_confirm() and refusal(ha) is None


def test_a_promoted_backup_waits_for_its_own_grant_to_lapse(tmp_path: Path) -> None:
    ha, clock, log = ha_broker(tmp_path)
    ha.member_grant(3, LEASE)  # as a backup of the primary of epoch 3
    granted_at = clock.now
    clock.now += 0.5
    asyncio.run(ha.promote(epoch=4))  # no in-sync set: the wait holds all the same
    held = LEASE * 1.01 / 0.99
    [wait] = events(log, "member_lease_promotion_wait")
    assert wait["granted_epoch"] == 3 and wait["wait_ms"] == round((held - 0.5) * 1000, 1)
    assert ha.lease_status()["promotion_wait"] == round(held - 0.5, 3)
    text = refusal(ha)
    assert text is not None and "grant to an older epoch" in text
    clock.now = granted_at + held - 0.001
    assert not ha.may_confirm()
    clock.now = granted_at + held
    assert ha.may_confirm() and refusal(ha) is None
    assert ha.lease.grants.answer(4, clock.now)["lapsed"]
    assert not ha.grants.answer(4, granted_at + 1.0)["lapsed"]


def test_a_grant_to_an_ended_epoch_is_not_waited_out_another_still_is(tmp_path: Path) -> None:
    """Issue 26: the primary of epoch 3's process exited (its agent saw it reaped:
    ``ended``), so this broker's grant to epoch 3 protects nothing and it serves at once;
    a grant to epoch 2, not named, is still waited out."""
    ha, _clock, log = ha_broker(tmp_path)
    ha.member_grant(3, LEASE)
    asyncio.run(ha.promote(epoch=4, ended=frozenset({3})))
    assert not events(log, "member_lease_promotion_wait")
    [ended] = events(log, "member_lease_grant_ended")
    assert ended["ended"] == [3] and ended["granted_epoch"] == 3 and ended["saved_ms"] > 0
    assert ha.may_confirm() and refusal(ha) is None
    status = ha.lease_status()
    assert status["promotion_wait"] == 0 and status["ended"] == [3]

    (tmp_path / "other").mkdir()
    other, _clock, log = ha_broker(tmp_path / "other")
    other.member_grant(2, LEASE)
    other.member_grant(3, LEASE)
    asyncio.run(other.promote(epoch=4, ended=frozenset({3})))
    [wait] = events(log, "member_lease_promotion_wait")
    assert wait["wait_ms"] == round(LEASE * 1.01 / 0.99 * 1000, 1)
    assert not other.may_confirm()


def test_a_client_closed_while_not_serving_gets_the_close_and_nothing_it_held(
    tmp_path: Path,
) -> None:
    """Issue 26, item 4: the broker closes the clients of a primary that does not serve;
    what it held for them (here a channel.open-ok) is dropped, connection.close goes out."""
    ha, clock, _ = ha_broker(tmp_path)
    asyncio.run(ha.promote(epoch=1, in_sync=["b1"]))
    ha.lease.set_changed()
    backup = open_connection(ha, link("1-3"))
    backup.expect(commands.Connection.OpenOk)
    grant(ha)
    client = open_connection(ha, {})
    client.expect(commands.Connection.OpenOk)
    clock.now += LEASE  # the grant lapses: the client's output is held
    client.send(1, commands.Channel.Open())
    assert ha.admission.holds_output(client.conn) and client.take() == []
    assert not ha.admission.holds_output(backup.conn)  # a link is never held nor closed

    ha.admission.let_close(client.conn)
    client.conn.drop_unsent()
    client.conn.close(ReplyCode.CONNECTION_FORCED, "HA primary not serving")
    assert [type(m) for m in client.methods()] == [commands.Connection.Close]
    assert not ha.admission.holds_output(client.conn)  # its close-ok is read as usual


def test_past_the_managers_lease_it_serves_while_every_member_grants(tmp_path: Path) -> None:
    """Issue 26, item 2: the agent's lease (ZooKeeper) runs out; every member of the
    committed set still grants: confirms, admission and the tick go on; the first lapse
    fences. An unasked member (never granted) does not let it serve past the lease."""
    ha, clock, log = ha_broker(tmp_path)
    fenced: list[str] = []
    ha._on_fenced = fenced.append
    asyncio.run(ha.promote(epoch=1, in_sync=["b1", "b2"]))
    ha.lease.set_changed()
    ha.grant_lease(1.0)
    grant(ha, "b1")
    assert ha.may_confirm()  # b2 never asked: the member lease alone would serve ...
    clock.now += 1.5
    assert not ha.may_confirm() and refusal(ha) is not None  # ... not past the lease
    grant(ha, "b2")
    grant(ha, "b1")
    assert ha.may_confirm() and refusal(ha) is None  # every member grants: it serves
    ha.tick()
    assert not fenced and ha.role.on_grants
    [on_grants] = events(log, "ha_serving_on_grants")
    assert on_grants["grants_ms"] == LEASE * 1000.0
    assert ha.lease_status()["on_grants"] is True
    for _ in range(3):  # ZooKeeper stays away; the grants keep coming
        clock.now += LEASE / 2
        grant(ha, "b1")
        grant(ha, "b2")
        ha.tick()
        assert ha.may_confirm() and not fenced
    clock.now += LEASE / 2
    grant(ha, "b1")  # b2 stops answering (SIGSTOP, cut off)
    clock.now += LEASE / 2
    assert not ha.may_confirm()  # b2's grant lapsed: nothing more goes out ...
    ha.tick()
    assert fenced == ["a member's grant lapsed after the cluster manager's lease ran out"]


def test_past_the_managers_lease_an_empty_set_fences_as_before(tmp_path: Path) -> None:
    ha, clock, _ = ha_broker(tmp_path)
    fenced: list[str] = []
    ha._on_fenced = fenced.append
    asyncio.run(ha.promote(epoch=1, in_sync=[]))
    ha.lease.set_changed()
    ha.grant_lease(1.0)
    clock.now += 1.5
    assert not ha.may_confirm()
    ha.tick()
    assert fenced == ["the cluster manager's lease ran out"]
