"""The liveness thread (broker/liveness_server.py) on a real loopback socket: the answer,
the lease with and without its token, bad requests, and an answer in milliseconds while
another thread spins (as the loop's thread does in a CPU-heavy callback)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from broker.ha.member_lease import GrantLedger, LeaseTimes
from broker.liveness import LeaseOffers, LoopProgress, RoleNote
from broker.liveness_server import TOKEN_HEADER, LivenessServer, LoopThreadClock
from ha_agent.broker_check import liveness_view
from ha_agent.loop_liveness import LoopState, LoopTimes, loop_verdict


@pytest.fixture
def server() -> Iterator[LivenessServer]:
    progress = LoopProgress(time.monotonic(), pid=77, broker_id="b-77")
    progress.progressed(time.monotonic(), RoleNote("active", epoch=3))
    live = LivenessServer(progress, LeaseOffers(), "secret-token").start("127.0.0.1", 0)
    try:
        yield live
    finally:
        live.stop()


def call(
    server: LivenessServer, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}", data=data, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_the_liveness_answer(server: LivenessServer) -> None:
    status, answer = call(server, "/liveness")
    assert status == 200
    assert answer["alive"] is True and answer["ha_state"] == "active" and answer["epoch"] == 3
    assert answer["pid"] == 77 and answer["broker_id"] == "b-77"
    assert 0 <= answer["last_progress_ms"] < 2000


def test_a_lease_needs_the_token_and_is_taken_with_its_arrival_time(
    server: LivenessServer,
) -> None:
    before = time.monotonic()
    status, answer = call(server, "/lease", {"lease": 1.5}, {TOKEN_HEADER: "secret-token"})
    assert status == 200
    assert answer == {"state": "active", "lease": 1.5, "cluster_shutdown": None}
    seconds, received = server.offers.take()  # type: ignore[misc]
    assert seconds == 1.5 and before <= received <= time.monotonic()
    status, answer = call(server, "/lease", {"lease": 1.5}, {TOKEN_HEADER: "guess"})
    assert status == 403 and TOKEN_HEADER in answer["reason"]
    assert server.offers.take() is None


@pytest.mark.parametrize(
    ("path", "body", "status", "reason"),
    [
        ("/lease", {"lease": 0}, 400, "lease must be seconds"),
        ("/lease", {"lease": "1"}, 400, "lease must be seconds"),
        ("/lease", {"lease": 7200}, 400, "at most 3600"),
        ("/nothing", None, 404, "no such resource: GET /nothing"),
    ],
)
def test_bad_requests_get_a_clear_error(
    server: LivenessServer, path: str, body: Any, status: int, reason: str
) -> None:
    got, answer = call(server, path, body, {TOKEN_HEADER: "secret-token"})
    assert got == status and reason in answer["reason"]


def test_a_backup_refuses_a_lease(server: LivenessServer) -> None:
    server.progress.note_role(RoleNote("ready", epoch=3))
    status, answer = call(server, "/lease", {"lease": 1.0}, {TOKEN_HEADER: "secret-token"})
    assert status == 409 and "a lease is for a primary; this broker is ready" in answer["reason"]


def test_it_answers_in_milliseconds_beside_a_spinning_thread(server: LivenessServer) -> None:
    stop = threading.Event()

    def spin() -> None:  # pure Python: holds the interpreter lock as a busy loop does
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        took = []
        for _ in range(10):
            started = time.monotonic()
            status, _answer = call(server, "/liveness")
            took.append(time.monotonic() - started)
            assert status == 200
    finally:
        stop.set()
        spinner.join()
    assert sorted(took)[5] < 0.1, took  # median well under the agent's 0.4 s check


def test_the_answer_carries_the_loop_threads_clocks(server: LivenessServer) -> None:
    """Read off the loop's thread (here a thread playing it): its CPU time and run-queue
    wait grow with the wall clock while it spins (a busy or starved loop: running), and
    not while it is blocked in a system call (stopped); so does the CPU since its last
    progress while it spins."""
    ready, spun, stop = threading.Event(), threading.Event(), threading.Event()

    def loop() -> None:
        server.clock = LoopThreadClock.of_current_thread()
        server.progress.progressed(time.monotonic(), cpu=time.thread_time())
        ready.set()
        until = time.perf_counter() + 0.6
        while time.perf_counter() < until:
            pass
        spun.set()
        stop.wait()  # blocked in a system call

    def times() -> LoopTimes:
        view = liveness_view(call(server, "/liveness")[1])
        assert view is not None and view.times is not None, view
        return view.times

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        assert ready.wait(10)
        first = times()
        assert spun.wait(10)
        second = times()
        time.sleep(0.6)  # the thread blocked meanwhile (nothing to synchronise with)
        third = times()
    finally:
        stop.set()
        thread.join()
    assert first.wait is not None  # Linux says it (schedstat)
    assert second.cpu > first.cpu and second.cpu_since_progress > first.cpu_since_progress
    assert loop_verdict(first, second, 2.0).state is LoopState.RUNNING
    assert loop_verdict(second, third, 2.0).state is LoopState.STOPPED
    assert third.cpu - second.cpu < 0.05


def test_the_grant_answer_is_the_ledger_read_off_the_loop(server: LivenessServer) -> None:
    assert call(server, "/grant")[0] == 404  # not an HA member: no ledger
    ledger = GrantLedger(LeaseTimes(2.0, 0.0))
    ledger.grant(3, 2.0, time.monotonic())
    server.grants, server.formats = ledger, "1-3"
    status, answer = call(server, "/grant")
    assert status == 200 and answer["epoch"] == 3 and answer["asked_epoch"] == 4
    assert not answer["lapsed"] and 0 < answer["remaining_ms"] <= 2000
    assert answer["formats"] == "1-3" and answer["grants"][0]["epoch"] == 3
    assert call(server, "/grant?epoch=3")[1]["lapsed"]  # nothing granted before epoch 3
    for bad in ("?epoch=x", "?epoch=-1", "?other=1"):
        status, answer = call(server, "/grant" + bad)
        assert status == 400 and "epoch=N" in answer["reason"], bad
