"""A backup that cannot open its link says why (issue 10, item 6), without I/O.

- :class:`~broker.ha.redial.DialFailures`: which failed dials get a log line (a new reason
  at once, otherwise at most once per interval per address, with a ``repeated`` count) and
  which failure ``/api/ha`` shows; the clock is a number passed in.
- :func:`~broker.ha.dial_failure.describe_dial_failure`: each failure as one line.
- :func:`~broker.amqp.client.handshake.choose_mechanism`: when the link logs in with
  ANONYMOUS instead of its mechanism (docs/ha-design.md, "The link").
- :meth:`BackupLink._dial_failed` and :meth:`BackupLink.link_error` with a fake clock.

The end-to-end side (real brokers) is tests/ha/test_link_errors.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from broker.amqp.client import ConnectionFailed, ConnectionRefusedByBroker
from broker.amqp.client.handshake import NoUsableMechanism, choose_mechanism
from broker.ha.backup import BackupLink, OwnAddress
from broker.ha.dial_failure import NotPrimary, describe_dial_failure
from broker.ha.redial import DialFailures, DialRefused
from common.url import Address

A = "10.0.0.1:5672"
B = "10.0.0.2:5672"
MINUTE = 60.0


# -- DialFailures --------------------------------------------------------------------------
def test_a_new_reason_is_logged_at_once_and_the_same_one_once_a_minute() -> None:
    failures = DialFailures(MINUTE)
    first = failures.failed(A, "connection refused", 0.0)
    assert first is not None and first.repeated == 0
    assert first.failure.reason == "connection refused" and first.failure.count == 1
    assert [failures.failed(A, "connection refused", t) for t in (1.0, 30.0, 59.9)] == [None] * 3
    again = failures.failed(A, "connection refused", 60.0)
    assert again is not None and again.repeated == 4  # 1.0, 30.0, 59.9 and this one
    assert again.failure.count == 5 and again.failure.since == 0.0
    assert failures.failed(A, "connection refused", 61.0) is None


def test_a_changed_reason_is_logged_at_once_and_restarts_the_count() -> None:
    failures = DialFailures(MINUTE)
    failures.failed(A, "connection refused", 0.0)
    failures.failed(A, "connection refused", 1.0)
    line = failures.failed(A, "login refused: ACCESS_REFUSED - bad", 2.0)
    assert line is not None and line.repeated == 0
    assert line.failure.count == 1 and line.failure.since == 2.0


def test_addresses_are_limited_apart() -> None:
    failures = DialFailures(MINUTE)
    assert failures.failed(A, "connection refused", 0.0) is not None
    assert failures.failed(B, "connection refused", 0.5) is not None
    assert failures.failed(A, "connection refused", 1.0) is None
    assert failures.failed(B, "connection refused", 1.5) is None


def test_a_link_that_came_up_makes_the_next_failure_news() -> None:
    failures = DialFailures(MINUTE)
    failures.failed(A, "connection refused", 0.0)
    failures.succeeded()
    assert failures.current() is None
    line = failures.failed(A, "connection refused", 1.0)
    assert line is not None and line.repeated == 0 and line.failure.count == 1


def test_the_failure_shown_is_the_latest_that_is_not_routine() -> None:
    failures = DialFailures(MINUTE)
    assert failures.current() is None
    failures.failed(B, "not a primary (joining)", 0.0, routine=True)
    shown = failures.current()
    assert shown is not None and shown.reason == "not a primary (joining)" and shown.routine
    failures.failed(A, "login refused: ACCESS_REFUSED - no", 1.0)
    failures.failed(B, "not a primary (joining)", 2.0, routine=True)
    shown = failures.current()
    assert shown is not None and (shown.address, shown.count) == (A, 1)
    failures.failed(B, "connection refused", 3.0)
    shown = failures.current()
    assert shown is not None and (shown.address, shown.reason) == (B, "connection refused")


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval"):
        DialFailures(-1.0)


# (address, reason, seconds since the previous dial) or None: a link came up.
Step = tuple[str, str, float] | None
steps = st.lists(
    st.one_of(
        st.none(),
        st.tuples(
            st.sampled_from([A, B]),
            st.sampled_from(["connection refused", "login refused", "not a primary (ready)"]),
            st.floats(min_value=0.0, max_value=45.0, allow_nan=False),
        ),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_never_more_than_one_line_per_address_per_minute_unless_the_reason_changed(
    script: list[Step],
) -> None:
    failures = DialFailures(MINUTE)
    now = 0.0
    last_reason: dict[str, str] = {}  # per address, since the last link came up
    last_line: dict[str, float] = {}
    counted: dict[str, int] = {}  # failures counted in lines, per address and streak
    streak: dict[str, int] = {}  # failures of the current reason, per address
    for step in script:
        if step is None:
            failures.succeeded()
            last_reason.clear()
            counted.clear()
            streak.clear()
            continue
        address, reason, pause = step
        now += pause
        changed = last_reason.get(address) != reason
        line = failures.failed(address, reason, now, routine=reason.startswith("not"))
        if changed:
            assert line is not None and line.repeated == 0, "a new reason is always logged"
            counted[address] = streak[address] = 1
        else:
            streak[address] += 1
            if line is not None:
                assert now - last_line[address] >= MINUTE, "two lines within a minute"
                counted[address] += line.repeated
        if line is not None:
            last_line[address] = now
            assert line.failure.count == streak[address]
        last_reason[address] = reason
        # nothing lost: every failure is in a line or still waiting for one
        assert counted[address] + failures.unlogged(address) == streak[address]
        shown = failures.current()
        assert shown is not None and shown.reason in last_reason.values()


# -- describe_dial_failure -------------------------------------------------------------------
ADDRESS = Address("127.0.0.1", 5673)


def _failed(text: str, cause: BaseException | None = None) -> ConnectionFailed:
    exc = ConnectionFailed(text)
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    ("exc", "reason", "routine"),
    [
        (
            ConnectionRefusedByBroker(
                403, "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN."
            ),
            "login refused: ACCESS_REFUSED - Login was refused using authentication mechanism"
            " PLAIN.",
            False,
        ),
        (
            ConnectionRefusedByBroker(
                530,
                "NOT_ALLOWED - HA backup: not the primary (state catch-up); clients connect to"
                " amqp:tcp:127.0.0.1:5672",
            ),
            "not a primary (catch-up)",
            True,
        ),
        (
            ConnectionRefusedByBroker(530, "HA broker fenced: not serving"),
            "refused: NOT_ALLOWED - HA broker fenced: not serving",
            False,
        ),
        (ConnectionRefusedByBroker(599, "odd"), "refused: 599 - odd", False),
        (NotPrimary("joining"), "not a primary (joining)", True),
        (NotPrimary("standalone"), "not a primary (standalone)", False),
        (NotPrimary(None), "not a primary (not an HA broker)", False),
        (DialRefused("older epoch 3 < 4"), "older epoch 3 < 4", False),
        (
            _failed(
                "127.0.0.1:5673: [Errno 111] Connect call failed",
                ConnectionRefusedError(111, "Connect call failed"),
            ),
            "connection refused",
            False,
        ),
        (
            _failed("127.0.0.1:5673: no open connection within 2.0 s"),
            "no open connection within 2.0 s",
            False,
        ),
        (
            NoUsableMechanism("the broker offers PLAIN AMQPLAIN, not ANONYMOUS"),
            "cannot log in: the broker offers PLAIN AMQPLAIN, not ANONYMOUS",
            False,
        ),
    ],
)
def test_each_failure_is_one_line(exc: Exception, reason: str, routine: bool) -> None:
    assert describe_dial_failure(ADDRESS, exc) == (reason, routine)


# -- choose_mechanism -----------------------------------------------------------------------
AUTH_ON = ["PLAIN", "AMQPLAIN"]
AUTH_OFF = ["PLAIN", "AMQPLAIN", "ANONYMOUS"]


@pytest.mark.parametrize(
    ("offered", "mechanism", "user", "password", "fallback", "chosen"),
    [
        (AUTH_ON, "PLAIN", "guest", "guest", False, "PLAIN"),
        (AUTH_OFF, "PLAIN", "guest", "guest", True, "PLAIN"),  # credentials go where chosen
        (AUTH_OFF, "AMQPLAIN", "guest", "guest", True, "AMQPLAIN"),
        (AUTH_OFF, "PLAIN", None, None, True, "ANONYMOUS"),  # --auth no, no ha-username
        (AUTH_OFF, "ANONYMOUS", None, None, False, "ANONYMOUS"),
        (["ANONYMOUS"], "PLAIN", "guest", "guest", True, "ANONYMOUS"),  # auth off here too
        (["ANONYMOUS", "EXTERNAL"], "AMQPLAIN", None, None, True, "ANONYMOUS"),
    ],
)
def test_the_mechanism_chosen(
    offered: list[str],
    mechanism: str,
    user: str | None,
    password: str | None,
    fallback: bool,
    chosen: str,
) -> None:
    assert choose_mechanism(offered, mechanism, user, password, anonymous_fallback=fallback) == (
        chosen
    )


@pytest.mark.parametrize(
    ("offered", "mechanism", "user", "fallback", "message"),
    [
        (AUTH_ON, "PLAIN", None, True, "PLAIN needs a user and a password, and the broker"),
        (AUTH_ON, "ANONYMOUS", None, True, "the broker offers PLAIN AMQPLAIN, not ANONYMOUS"),
        (["ANONYMOUS"], "PLAIN", "guest", False, "the broker offers ANONYMOUS, not PLAIN"),
        ([], "PLAIN", "guest", True, "the broker offers no mechanism, not PLAIN"),
    ],
)
def test_no_usable_mechanism_says_why(
    offered: list[str], mechanism: str, user: str | None, fallback: bool, message: str
) -> None:
    password = None if user is None else "secret"
    with pytest.raises(NoUsableMechanism, match=message) as caught:
        choose_mechanism(offered, mechanism, user, password, anonymous_fallback=fallback)
    assert "secret" not in str(caught.value)


@given(
    offered=st.lists(st.sampled_from(["PLAIN", "AMQPLAIN", "ANONYMOUS", "EXTERNAL"])),
    mechanism=st.sampled_from(["PLAIN", "AMQPLAIN", "ANONYMOUS"]),
    credentials=st.booleans(),
    fallback=st.booleans(),
)
def test_a_password_goes_only_over_the_mechanism_chosen(
    offered: list[str], mechanism: str, credentials: bool, fallback: bool
) -> None:
    user, password = ("guest", "guest") if credentials else (None, None)
    try:
        chosen = choose_mechanism(offered, mechanism, user, password, anonymous_fallback=fallback)
    except NoUsableMechanism:
        return
    assert chosen in offered
    assert chosen in (mechanism, "ANONYMOUS")
    if chosen != mechanism:
        assert fallback


# -- BackupLink's side, with a fake clock ------------------------------------------------------
@dataclass
class FakeOwner:
    logged: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    broker_id: str = "b1"
    url: str = "127.0.0.1:5674"  # this backup; ADDRESS is the primary's
    epoch: int = 0

    def link_up(self, address: Address, primary_epoch: int) -> None: ...

    def caught_up(self) -> None: ...

    def link_down(self, reason: str) -> None: ...

    def store_failed(self, reason: str) -> None: ...

    def check_history(self, primary_epoch: int, base_epoch: int | None, address: str) -> str | None:
        return None

    def log(self, event: str, **fields: Any) -> None:
        self.logged.append((event, fields))

    def member_grant(self, epoch: int, duration: float) -> None:
        pass

    def member_asked(self, epoch: int) -> None:
        pass


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def every_level() -> Iterator[None]:
    """Debug lines too, whatever level an earlier test in this process configured (its
    filtering logger would drop them before capture_logs sees them)."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        structlog.configure(**saved)


def _link(clock: FakeClock, user: str | None = "guest", auth_here: bool = True) -> BackupLink:
    return BackupLink(
        FakeOwner(),
        vhost=None,  # type: ignore[arg-type]  # not used before a link comes up
        addresses=[ADDRESS],
        user=user,
        password=None if user is None else "guest",
        mechanism="PLAIN",
        maintenance_interval=0.1,
        heartbeat=2.0,
        flow_messages=1000,
        auth_here=auth_here,
        clock=clock,
        wall_clock=lambda: 1_800_000_000.0 + clock.now,
    )


def test_the_link_logs_each_distinct_failure_and_shows_the_last() -> None:
    clock = FakeClock()
    link = _link(clock)
    assert link.link_error() is None
    refused = ConnectionRefusedByBroker(403, "ACCESS_REFUSED - Login was refused")
    with capture_logs() as logs:
        link._dial_failed(ADDRESS, refused)
        for _ in range(9):
            clock.now += 1.0
            link._dial_failed(ADDRESS, refused)
        link._dial_failed(ADDRESS, NotPrimary("joining"))
        clock.now += MINUTE
        link._dial_failed(ADDRESS, NotPrimary("joining"))
    assert [(e["log_level"], e["reason"], e["repeated"]) for e in logs] == [
        ("warning", "login refused: ACCESS_REFUSED - Login was refused", 0),
        ("debug", "not a primary (joining)", 0),
        ("debug", "not a primary (joining)", 1),
    ]
    assert {e["event"] for e in logs} == {"ha_link_dial_failed"}
    assert {e["address"] for e in logs} == {"127.0.0.1:5673"}
    error = link.link_error()
    assert error == {
        "address": "127.0.0.1:5673",
        "reason": "not a primary (joining)",
        "since": "2027-01-15T08:16:49.000000Z",  # wall clock 1_800_001_009: clock 1009
        "count": 2,
    }


def test_its_own_address_is_not_dialled_nor_logged() -> None:
    """``ha-brokers-url`` names this broker too: it is never dialled (issue 25: a handshake
    with itself on its own loop each round), so never a line nor the failure shown."""
    link = _link(FakeClock())
    itself = Address("127.0.0.1", 5674)
    with pytest.raises(OwnAddress):
        asyncio.run(link._dial(itself))
    with capture_logs() as logs:
        link._dial_failed(itself, OwnAddress("this broker's own address"))
        link._dial_failed(ADDRESS, ConnectionRefusedByBroker(403, "ACCESS_REFUSED - no"))
        link._dial_failed(itself, OwnAddress("this broker's own address"))
    assert [e["log_level"] for e in logs] == ["warning"]
    error = link.link_error()
    assert error is not None and error["address"] == "127.0.0.1:5673"


def test_without_ha_username_the_link_may_log_in_anonymously_and_says_what_is_missing() -> None:
    clock = FakeClock()
    assert _link(clock, user=None).anonymous_fallback
    assert _link(clock, auth_here=False).anonymous_fallback
    assert not _link(clock).anonymous_fallback
    link = _link(clock, user=None)
    with capture_logs() as logs:
        link._dial_failed(ADDRESS, NoUsableMechanism("PLAIN needs a user and a password"))
    assert logs[0]["reason"] == (
        "cannot log in: PLAIN needs a user and a password (set ha-username and ha-password)"
    )
