"""The member lease in the HA broker, without sockets: where it is checked (admission,
output, confirms), what a format-2 link does to it, and a promotion's wait."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pamqp import commands

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
    text = refusal(ha)  # b1 never granted: clients go elsewhere
    assert text is not None and "member lease of b1" in text
    assert not ha.may_confirm()
    open_connection(ha, link("1-3")).expect(commands.Connection.OpenOk)  # its link: admitted

    grant(ha)
    assert ha.may_confirm() and refusal(ha) is None
    client = open_connection(ha, {})
    client.expect(commands.Connection.OpenOk)
    assert not ha.admission.holds_output(client.conn)

    clock.now += LEASE  # the grant lapses: output held, clients refused, logged
    assert ha.admission.holds_output(client.conn) and not ha.may_confirm()
    assert client.conn.data_to_send() == b""
    [lapsed] = events(log, "member_lease_lapsed")
    assert lapsed["member"] == "b1" and lapsed["age_ms"] == 0.0
    assert refusal(ha) is not None

    ha.commit_in_sync(1, [])  # the set without b1: serving again, at once
    assert ha.may_confirm() and refusal(ha) is None
    assert events(log, "member_lease_serving")[-1]["held_ms"] == 0.0


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
