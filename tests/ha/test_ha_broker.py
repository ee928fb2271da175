"""The HA role's rules that need no second broker: promote refusals, admission, fencing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from broker.core.confirms import PublisherConfirms
from broker.core.errors import ReplyCode
from broker.ha import primary_start
from broker.ha.ha_broker import HaBroker, PromoteError
from broker.ha.id_era import ERA_SHIFT
from broker.ha.names import PROMOTING_PROPERTY, STATUS_PROPERTY
from broker.ha.role_events import CaughtUp, LinkUp
from broker.ha.state import HaState
from broker.options import parse_options
from common.slices import run_steps
from tests.amqp.helpers import Client, make_context
from tests.ha.test_primary import publish


def ha_broker(tmp_path: Path) -> tuple[HaBroker, list[str]]:
    options = parse_options(
        [
            "--ha-cluster=yes",
            "--ha-brokers-url=127.0.0.1:1",
            "--ha-replicate=all",
            f"--data-dir={tmp_path}",
        ]
    )
    ctx = make_context()
    fenced: list[str] = []
    return (
        HaBroker(ctx.vhost, ctx, options, amqp_port=lambda: 5672, on_fenced=fenced.append),
        fenced,
    )


def test_promote_from_catch_up_is_refused(tmp_path: Path) -> None:
    ha, _ = ha_broker(tmp_path)
    ha.handle(LinkUp("primary:5672", 0))  # joining -> catch-up
    with pytest.raises(PromoteError, match="still catching up"):
        asyncio.run(ha.promote())
    assert ha.state is HaState.CATCHUP


def test_promote_with_an_older_epoch_is_refused(tmp_path: Path) -> None:
    ha, _ = ha_broker(tmp_path)
    ha.handle(LinkUp("primary:5672", 7))  # epoch 7 seen, catch-up
    ha.handle(CaughtUp())  # ready
    assert ha.epoch_store.current == 7
    with pytest.raises(PromoteError, match="older than epoch 7"):
        asyncio.run(ha.promote(epoch=6))


def test_promote_of_a_new_cluster_takes_the_next_epoch_durably(tmp_path: Path) -> None:
    ha, _ = ha_broker(tmp_path)
    assert asyncio.run(ha.promote()) is HaState.ACTIVE  # nobody else reachable: new cluster
    assert ha.epoch == 1
    again, _ = ha_broker(tmp_path)
    assert again.epoch == 1  # kept in the data directory


def test_a_new_primary_numbers_messages_in_its_own_era(tmp_path: Path) -> None:
    """Ids are never reused: at epoch E every queue goes on from E << 40 (issue 12: a store
    recovered after a restart may end below ids used before it)."""
    ha, _ = ha_broker(tmp_path)
    queue = ha.vhost.declare_queue("q")
    queue.last_position = 7  # as recovered from a store
    asyncio.run(ha.promote(epoch=5))
    assert queue.last_position == 5 << ERA_SHIFT


def open_connection(ha: HaBroker, properties: dict[str, Any]) -> Client:
    client = Client(ha.context)
    client.send_bytes(b"AMQP\x00\x00\x09\x01")
    client.take()
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties=properties, mechanism="PLAIN", response="\0guest\0guest"
        ),
    )
    client.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=0, heartbeat=0))
    client.send(0, commands.Connection.Open(virtual_host="/"))
    return client


def test_backup_refuses_clients_but_admits_admin(tmp_path: Path) -> None:
    ha, _ = ha_broker(tmp_path)
    client = open_connection(ha, {})
    close = client.expect(commands.Connection.Close)
    assert close.reply_code == ReplyCode.NOT_ALLOWED and "not the primary" in close.reply_text
    admin = open_connection(ha, {"qpid.ha-admin": True})
    admin.expect(commands.Connection.OpenOk)


class LoggedEvents:
    """The broker context's log lines: (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.lines.append((level, event, fields))


def test_a_backup_logs_its_refusal_of_a_client_at_info_with_the_peer(tmp_path: Path) -> None:
    """Sending a client on to the primary is normal operation: info, saying who it was
    (its address: refused before its login, it has no user)."""
    ha, _ = ha_broker(tmp_path)
    ha.context.log = log = LoggedEvents()
    client = open_connection(ha, {})
    client.expect(commands.Connection.Close)
    [(level, _, fields)] = [line for line in log.lines if line[1] == "protocol_error"]
    assert level == "info"
    assert fields["peer"] == client.conn.peer and fields["user"] is None
    assert fields["reply_code"] == ReplyCode.NOT_ALLOWED
    assert fields["reply_text"].startswith("HA backup: not the primary (state joining)")


def test_primary_fences_itself_on_a_newer_epoch(tmp_path: Path) -> None:
    ha, fenced = ha_broker(tmp_path)
    asyncio.run(ha.promote(epoch=3))
    client = open_connection(ha, {})
    client.expect(commands.Connection.OpenOk)
    link = open_connection(ha, {"qpid.ha-backup": True, "qpid.ha-epoch": 4})
    assert link.expect(commands.Connection.Close).reply_code == ReplyCode.NOT_ALLOWED
    assert fenced and "epoch 4" in fenced[0]
    refused = open_connection(ha, {})
    assert refused.expect(commands.Connection.Close).reply_code == ReplyCode.NOT_ALLOWED


@pytest.mark.parametrize("state", ["joining", "catch-up", "ready"])
def test_a_backup_stops_on_any_failed_store_write(tmp_path: Path, state: str) -> None:
    """Not only when an acknowledgement waited on the failed write: one registered later
    (a batch held behind a staged transaction) would cover records that write lost."""
    ha, fenced = ha_broker(tmp_path)
    if state != "joining":
        ha.handle(LinkUp("primary:5672", 3))  # catch-up
    if state == "ready":
        ha.handle(CaughtUp())
    assert ha.state.value == state
    ha.store_write_failed("No space left on device (ENOSPC)")
    assert fenced == ["the store cannot write: No space left on device (ENOSPC)"]


def test_a_primary_goes_on_after_a_failed_store_write(tmp_path: Path) -> None:
    """Its journal nacked the publishes the write held; the next write may work."""
    ha, fenced = ha_broker(tmp_path)
    assert asyncio.run(ha.promote()) is HaState.ACTIVE
    ha.store_write_failed("No space left on device (ENOSPC)")
    assert fenced == []


def test_a_promotions_expected_backup_is_guarded_in_slices_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: the era and an expected backup's marks on every queue (its guard made at
    the queue's first use: 10,000 guards at once were 50-100 ms a backup) come in slices,
    here a slice a turn of the loop (no CPU budget a turn), all of them before the state
    says primary: nothing a client publishes misses a guard."""
    monkeypatch.setattr(primary_start, "PROMOTION_TURN_CPU", 0.0)
    ha, _ = ha_broker(tmp_path)
    count = 2 * primary_start.PASS_SLICE + 100  # the era and the marks in three slices
    for i in range(count):
        ha.vhost.declare_queue(f"s{i}")
    queues = list(ha.vhost.queues.values())
    # at each turn of the loop meanwhile: the state, queues in the new era, queues marked
    seen: list[tuple[HaState, int, int]] = []

    async def promote() -> None:
        promoting = asyncio.create_task(ha.promote(epoch=2, in_sync=["b1"]))
        while not promoting.done():
            in_era = sum(q.last_position == 2 << ERA_SHIFT for q in queues)
            marked = sum(q.before_use is not None for q in queues)
            seen.append((ha.state, in_era, marked))
            await asyncio.sleep(0)
        await promoting

    asyncio.run(promote())
    assert ha.state is HaState.RECOVERING  # b1, expected, has not connected
    # the era and the marks came a slice a turn, the state said primary only after both
    assert any(0 < in_era < count for _, in_era, _ in seen)
    assert any(0 < marked < count for _, _, marked in seen)
    assert all(marked == count for state, _, marked in seen if state.is_primary)
    assert all(q.last_position == 2 << ERA_SHIFT for q in ha.vhost.queues.values())
    assert ha.primary is not None
    assert ha.primary.backups["b1"].guards == {}  # none used yet
    assert publish(ha.vhost, f"s{count - 1}", PublisherConfirms()).settled is False
    assert list(ha.primary.backups["b1"].guards) == [f"s{count - 1}"]


def test_the_status_says_the_replication_position_with_or_without_its_rows(
    tmp_path: Path,
) -> None:
    """``replication_position`` is the queues' last ids summed, what the agent compares;
    without rows (``GET /api/ha?queues=summary``, the console's sampler with nobody
    viewing) the status has no row per queue."""
    ha, _ = ha_broker(tmp_path)
    for i, last in enumerate((3, 4, 0)):
        ha.vhost.declare_queue(f"s{i}").last_position = last  # as recovered from a store
    whole = run_steps(ha.status_steps())
    assert [(q["name"], q["last_id"]) for q in whole["queues"]] == [("s0", 3), ("s1", 4), ("s2", 0)]
    assert whole["replication_position"] == 7
    summary = run_steps(ha.status_steps(rows=False))
    assert "queues" not in summary and summary["replication_position"] == 7
    assert {k: v for k, v in whole.items() if k != "queues"} == summary


def test_connection_start_says_promoting_only_while_a_promotion_is_under_way(
    tmp_path: Path,
) -> None:
    """Issue 25: a member dialling a backup whose promotion has begun reads
    ``qpid.ha-promoting`` in connection.start (and dials it again after the shortest pause,
    broker.ha.redial); before the promotion, once it is primary, or after a refused one, the
    property is absent (a release before it never sends it)."""
    ha, _ = ha_broker(tmp_path)
    ha.handle(LinkUp("primary:5672", 1))
    ha.handle(CaughtUp())  # ready
    assert PROMOTING_PROPERTY not in ha.server_properties()
    seen: list[tuple[str, object]] = []

    async def promote() -> None:
        promoting = asyncio.create_task(ha.promote(epoch=2))
        while not promoting.done():
            properties = ha.server_properties()
            seen.append((properties[STATUS_PROPERTY], properties.get(PROMOTING_PROPERTY)))
            await asyncio.sleep(0)
        await promoting

    asyncio.run(promote())
    assert ("ready", True) in seen  # the epoch's fsync, in a thread: turns of the loop
    assert all(promoting is None for status, promoting in seen if status != "ready")
    assert all(promoting is True for status, promoting in seen[1:] if status == "ready")
    assert ha.state.is_primary and PROMOTING_PROPERTY not in ha.server_properties()
    refused, _ = ha_broker(tmp_path / "refused")
    refused.handle(LinkUp("primary:5672", 1))  # catch-up: refused
    with pytest.raises(PromoteError):
        asyncio.run(refused.promote())
    assert PROMOTING_PROPERTY not in refused.server_properties()
