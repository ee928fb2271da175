"""common.polling: the one poll-until helper of the tests and benchmarks."""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
from pathlib import Path

import pytest

from common.polling import (
    FIRST_CHOSEN_PORT,
    PollTimeout,
    ephemeral_range,
    free_port,
    holds_for,
    poll_until,
    poll_until_async,
    port_open,
    retry_until,
)


def test_poll_until_returns_the_first_truthy_value() -> None:
    answers = iter([0, None, "", [3]])
    assert poll_until(lambda: next(answers), 5) == [3]


def test_poll_until_names_what_it_waited_for() -> None:
    with pytest.raises(PollTimeout, match=r"^timed out after 0.05 s waiting for the moon$"):
        poll_until(lambda: False, 0.05, "the moon", interval=0.01)
    with pytest.raises(AssertionError, match="seen 2"):  # an AssertionError, described late
        poll_until(lambda: False, 0.01, lambda: f"the moon, seen {1 + 1}")


def test_poll_until_describes_a_lambda_by_its_source() -> None:
    with pytest.raises(PollTimeout, match=r"waiting for .*lambda: 1 > 2"):
        poll_until(lambda: 1 > 2, 0.01)


def test_poll_until_calls_between_with_the_time_left_instead_of_sleeping() -> None:
    lefts: list[float] = []
    calls = itertools.count()
    assert poll_until(lambda: next(calls) == 3, 5, between=lefts.append)
    assert len(lefts) == 3 and all(0 < left <= 5 for left in lefts)


def test_poll_until_lets_the_predicate_end_the_wait() -> None:
    def exited() -> bool:
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="exited"):
        poll_until(exited, 5)


def test_poll_until_async_takes_plain_and_async_predicates() -> None:
    answers = iter([False, False, True])

    async def ready() -> str | None:
        return "yes" if next(answers) else None

    async def run() -> tuple[str, int]:
        first = await poll_until_async(ready, 5)
        second = await poll_until_async(lambda: 7, 5)
        return first, second

    assert asyncio.run(run()) == ("yes", 7)
    with pytest.raises(PollTimeout, match="waiting for nothing"):
        asyncio.run(poll_until_async(lambda: 0, 0.01, "nothing"))


def test_holds_for_checks_until_the_end_and_fails_at_the_first_false() -> None:
    calls = itertools.count()
    holds_for(lambda: next(calls) >= 0, 0.05, interval=0.01)
    assert next(calls) >= 2
    answers = iter([True, True, False])
    with pytest.raises(PollTimeout, match="one primary: stopped holding after"):
        holds_for(lambda: next(answers), 5, "one primary", interval=0.001)


def test_retry_until_retries_the_named_errors_then_raises_the_last() -> None:
    attempts = iter([OSError("refused"), OSError("refused"), None])

    def connect() -> str:
        error = next(attempts)
        if error is not None:
            raise error
        return "connected"

    assert retry_until(connect, float("inf"), OSError, interval=0.001) == "connected"
    with pytest.raises(OSError, match="late"):
        retry_until(lambda: (_ for _ in ()).throw(OSError("late")), 0.0, OSError)
    with pytest.raises(ValueError):  # not among the errors: at once
        retry_until(lambda: int("x"), float("inf"), OSError)


def test_free_port_and_port_open() -> None:
    port = free_port()
    assert not port_open(port)
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        assert port_open(port)


def test_free_port_never_gives_a_port_twice() -> None:
    """The kernel may hand the same free port to binds in a row; free_port does not (two
    brokers of one test cluster once got one port on a fresh machine)."""
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_free_port_is_below_the_ephemeral_range_and_skips_a_taken_port() -> None:
    """Outgoing connections take their local ports in the ephemeral range: a port chosen
    there can be taken before the server binds it (a CI run lost a broker so)."""
    low, _high = ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert all(FIRST_CHOSEN_PORT <= port < low for port in ports)


def test_free_port_skips_a_port_something_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # a port free_port never gave
        held = taken.getsockname()[1]
        first = [held]
        real = random.randint
        monkeypatch.setattr(
            "common.polling.random.randint", lambda a, b: first.pop() if first else real(a, b)
        )
        assert free_port() != held and not first


def test_ephemeral_range_read_from_proc_or_the_linux_default(tmp_path: Path) -> None:
    table = tmp_path / "ip_local_port_range"
    table.write_text("40000\t50000\n")
    assert ephemeral_range(str(table)) == (40000, 50000)
    table.write_text("garbage\n")
    assert ephemeral_range(str(table)) == (32768, 60999)
    assert ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
