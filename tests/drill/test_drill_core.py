"""The drill's sans-I/O core: accounts, gap detection, connection events (no sockets, no
clock: time is passed in), URL parsing and the exit codes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.log import LOG_FIELDS, LOG_SCHEMA_VERSION
from common.url import Address
from qpid_ha_cli.drill.command import ExitStatus as DrillExit
from qpid_ha_cli.drill.core import ROLES, DrillCore, DrillEvent, format_ts
from qpid_ha_cli.drill.settings import parse_drill_url
from qpid_ha_cli.main import ExitStatus
from tests.drill.log_schema import problems

T0 = 1_795_000_000.0  # UNIX seconds, November 2026


def as_logged(event: DrillEvent, epoch: int | None = None) -> dict[str, object]:
    """The event as common.log writes it: the common fields, then the event's own."""
    common = {
        "ts": format_ts(T0),
        "level": event.level,
        "event": event.event,
        "node": "drill",
        "cluster": None,
        "epoch": epoch,
        "component": "drill",
        "schema": LOG_SCHEMA_VERSION,
    }
    assert tuple(common) == LOG_FIELDS
    return {**common, **event.fields}


def assert_valid(events: list[DrillEvent]) -> None:
    for event in events:
        assert problems(as_logged(event)) == [], event


# -- examples -----------------------------------------------------------------------------


def test_every_message_confirmed_and_received_once() -> None:
    core = DrillCore(0.05)
    for i in range(10):
        number = core.publish(T0 + i * 0.01)
        assert number == i
        assert core.confirmed(number, T0 + i * 0.01 + 0.001) == []
    assert not core.drained()
    for i in reversed(range(10)):
        core.delivered(i)
    assert core.drained()
    check = core.check()
    assert (check.sent, check.confirmed, check.received, check.lost, check.duplicated) == (
        10,
        10,
        10,
        0,
        0,
    )
    assert check.ok and check.unconfirmed == 0 and check.max_gap_ms == pytest.approx(10.0)
    assert check.line().startswith("drill OK: sent 10, confirmed 10, received 10, lost 0,")
    (finished,) = core.finished()
    assert finished.event == "drill_finished" and finished.level == "info"
    assert_valid(core.finished())


def test_confirmed_but_never_received_is_lost_and_fails() -> None:
    core = DrillCore()
    for i in range(3):
        core.confirmed(core.publish(T0 + i), T0 + i)
    core.delivered(0)
    core.delivered(0)
    check = core.check()
    assert (check.received, check.lost, check.duplicated) == (1, 2, 1)
    assert not check.ok and check.line().startswith("drill FAILED:")
    assert core.finished()[0].level == "error"


def test_a_low_rate_is_no_gap_but_a_stall_is() -> None:
    core = DrillCore(0.05)
    core.confirmed(core.publish(T0), T0 + 0.002)
    # one message a second: 1 s between confirms, 2 ms waiting each time: no gap
    core.confirmed(core.publish(T0 + 1), T0 + 1.002)
    assert core.check().gaps == 0
    # the next waits 400 ms for its confirm
    number = core.publish(T0 + 2)
    (gap,) = core.confirmed(number, T0 + 2.4)
    assert gap.event == "confirm_gap" and gap.level == "warning"
    assert gap.fields["stall_ms"] == pytest.approx(400.0)
    assert gap.fields["gap_ms"] == pytest.approx(1398.0)
    assert gap.fields["last_confirm_ts"] == format_ts(T0 + 1.002)
    assert gap.fields["first_confirm_ts"] == format_ts(T0 + 2.4)
    assert gap.fields["message"] == number
    assert_valid([gap])


def test_a_fail_over_seen_by_both_clients() -> None:
    core = DrillCore(0.05)
    events = core.connected("publisher", "h1:5672", 1, T0)
    events += core.connected("consumer", "h1:5672", 1, T0)
    assert [e.event for e in events] == ["client_connected", "client_connected"]
    core.confirmed(core.publish(T0 + 0.1), T0 + 0.101)  # the last confirm before
    in_doubt = core.publish(T0 + 0.11)  # sent, then the primary dies
    (lost,) = core.disconnected("publisher", "h1:5672", "StreamLostError: EOF", T0 + 0.12)
    assert lost.fields == {
        "role": "publisher",
        "address": "h1:5672",
        "reason": lost.fields["reason"],
    }
    assert core.disconnected("publisher", "h1:5672", "again", T0 + 0.13) == []  # once
    core.disconnected("consumer", "h1:5672", "StreamLostError: EOF", T0 + 0.125)
    assert core.confirmed(in_doubt, T0 + 0.2) == []  # not from this connection
    (back,) = core.connected("publisher", "h2:5672", 2, T0 + 0.62)
    assert back.event == "client_reconnected"
    assert back.fields == {
        "role": "publisher",
        "address": "h2:5672",
        "epoch": 2,
        "outage_ms": pytest.approx(500.0),
    }
    assert core.epoch == 2
    (gap,) = core.confirmed(core.publish(T0 + 0.63), T0 + 0.64)  # the first confirm after
    assert gap.fields["gap_ms"] == pytest.approx(539.0)
    assert gap.fields["stall_ms"] == pytest.approx(530.0)  # since the in-doubt one was sent
    core.connected("consumer", "h2:5672", 2, T0 + 0.7)
    core.delivered(0)
    core.delivered(in_doubt)  # it made it after all
    core.delivered(2)
    check = core.check()
    assert (check.sent, check.confirmed, check.lost, check.unconfirmed) == (3, 2, 0, 1)
    assert check.unconfirmed_received == 1 and check.gaps == 1
    assert_valid([*events, lost, back, gap, *core.finished()])


def test_nacked_and_foreign_messages() -> None:
    core = DrillCore()
    core.nacked(core.publish(T0), T0 + 0.01)
    core.confirmed(core.publish(T0 + 1), T0 + 1.01)
    core.delivered(None)
    core.delivered(99)  # never sent by this drill
    core.delivered(1)
    check = core.check()
    assert (check.nacked, check.confirmed, check.foreign, check.lost, check.received) == (
        1,
        1,
        2,
        0,
        1,
    )


def test_gave_up_and_bad_roles() -> None:
    core = DrillCore()
    assert_valid(core.gave_up("consumer", "ConnectionRefused"))
    with pytest.raises(ValueError, match="unknown role"):
        core.connected("spout", "h1", None, T0)
    with pytest.raises(ValueError, match="gap threshold"):
        DrillCore(-1)


def test_timestamps_follow_the_log_schema() -> None:
    text = format_ts(T0 + 0.000123)
    assert text.endswith("Z") and len(text) == len("2026-11-22T07:42:02.123456Z")
    assert datetime.fromisoformat(text).timestamp() == pytest.approx(T0 + 0.000123)


def test_exit_codes_are_qpid_has() -> None:
    assert {e.name: e.value for e in DrillExit} == {e.name: e.value for e in ExitStatus}


@pytest.mark.parametrize(
    ("text", "hosts", "user", "password", "vhost"),
    [
        ("amqp:guest/guest@h1:5672,h2:5673", ["h1:5672", "h2:5673"], "guest", "guest", "/"),
        ("h1,h2", ["h1:5672", "h2:5672"], None, None, "/"),
        ("amqp://guest:guest@h1:5672,h2:5672", ["h1:5672", "h2:5672"], "guest", "guest", "/"),
        ("amqp://u:p%2Fs@[::1]:5673/test%2Fv", ["[::1]:5673"], "u", "p/s", "test/v"),
        ("AMQP://127.0.0.1", ["127.0.0.1:5672"], None, None, "/"),
    ],
)
def test_urls(
    text: str, hosts: list[str], user: str | None, password: str | None, vhost: str
) -> None:
    url, got_vhost = parse_drill_url(text)
    assert [str(a) for a in url.addresses] == hosts
    assert (url.user, url.password, got_vhost) == (user, password, vhost)


@pytest.mark.parametrize(
    "text", ["", "amqp://", "amqp://h1:99999", "h1:x", "amqp://a:p%40ss@h1", "amqp://a@b@"]
)
def test_bad_urls(text: str) -> None:
    with pytest.raises(ValueError, match="invalid broker"):
        parse_drill_url(text)


# -- properties ---------------------------------------------------------------------------


@dataclass
class Model:
    """What the core should count, kept the obvious way."""

    sent: int = 0
    outstanding: set[int] = field(default_factory=set)
    confirmed: set[int] = field(default_factory=set)
    nacked: set[int] = field(default_factory=set)
    deliveries: list[int] = field(default_factory=list)
    foreign: int = 0
    connected: set[str] = field(default_factory=lambda: set(ROLES))


operation = st.one_of(
    st.tuples(st.just("publish"), st.integers(0, 0)),
    st.tuples(st.just("confirm"), st.integers(0, 40)),
    st.tuples(st.just("nack"), st.integers(0, 40)),
    st.tuples(st.just("deliver"), st.integers(-1, 45)),
    st.tuples(st.just("disconnect"), st.integers(0, 1)),
    st.tuples(st.just("connect"), st.integers(0, 1)),
)


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(st.tuples(operation, st.floats(0, 0.2)), max_size=120),
    threshold=st.floats(0, 0.1),
)
def test_accounts_whatever_the_order(
    ops: list[tuple[tuple[str, int], float]], threshold: float
) -> None:
    """lost = confirmed - received, duplicated = deliveries - distinct, whatever the order of
    publishes, confirms, deliveries, duplicates and connection losses; every event valid."""
    core = DrillCore(threshold)
    model = Model()
    now = T0
    events: list[DrillEvent] = []
    for role in ROLES:
        events += core.connected(role, "h1:5672", 1, now)
    down_since: dict[str, float] = {}
    for (kind, arg), step in ops:
        now += step
        if kind == "publish":
            assert core.publish(now) == model.sent
            model.outstanding.add(model.sent)
            model.sent += 1
        elif kind == "confirm":
            got = core.confirmed(arg, now)
            if arg in model.outstanding:
                model.outstanding.discard(arg)
                model.confirmed.add(arg)
            else:
                assert got == []
            events += got
        elif kind == "nack":
            core.nacked(arg, now)
            if arg in model.outstanding:
                model.outstanding.discard(arg)
                model.nacked.add(arg)
        elif kind == "deliver":
            number = None if arg < 0 else arg
            core.delivered(number)
            if number is not None and number < model.sent:
                model.deliveries.append(number)
            else:
                model.foreign += 1
        elif kind == "disconnect":
            role = ROLES[arg]
            got = core.disconnected(role, "h1:5672", "lost", now)
            assert len(got) == (1 if role in model.connected else 0)
            if role in model.connected:
                model.connected.discard(role)
                down_since[role] = now
                if role == "publisher":
                    model.outstanding.clear()
            events += got
        else:
            role = ROLES[arg]
            got = core.connected(role, "h2:5672", 2, now)
            if role in model.connected:
                assert got == []
            else:
                (event,) = got
                assert event.event == "client_reconnected"
                assert event.fields["outage_ms"] == pytest.approx(
                    (now - down_since[role]) * 1000, abs=1e-3
                )
                model.connected.add(role)
            events += got
    check = core.check()
    received = set(model.deliveries)
    assert check.sent == model.sent
    assert check.confirmed == len(model.confirmed)
    assert check.received == len(received)
    assert check.lost == len(model.confirmed - received)
    assert check.duplicated == len(model.deliveries) - len(received)
    assert check.nacked == len(model.nacked)
    assert check.confirmed + check.nacked + check.unconfirmed == check.sent
    assert check.foreign == model.foreign
    assert check.ok == (not (model.confirmed - received))
    assert core.drained() == check.ok
    gaps = [e for e in events if e.event == "confirm_gap"]
    assert check.gaps == len(gaps)
    for gap in gaps:
        assert gap.fields["stall_ms"] > threshold * 1000 - 1e-6
        if gap.fields["gap_ms"] is not None:
            assert gap.fields["gap_ms"] >= gap.fields["stall_ms"] - 1e-3
            assert gap.fields["last_confirm_ts"] <= gap.fields["first_confirm_ts"]
            assert gap.fields["gap_ms"] <= check.max_gap_ms + 1e-3
    assert_valid(events + core.finished())


@given(st.permutations(list(range(30)) * 2))
def test_deliveries_in_any_order_with_every_message_twice(order: list[int]) -> None:
    core = DrillCore()
    for i in range(30):
        core.confirmed(core.publish(T0 + i), T0 + i)
    for number in order:
        core.delivered(number)
    check = core.check()
    assert (check.received, check.lost, check.duplicated) == (30, 0, 30)


def test_addresses_in_events_are_host_port() -> None:
    assert str(Address("::1", 5673)) == "[::1]:5673"
