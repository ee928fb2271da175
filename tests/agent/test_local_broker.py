"""Which broker instance a kill means (ha_agent/local_broker.py), without processes; and
the supervisor killing only the instance named (a real child process)."""

from __future__ import annotations

import sys

import pytest

from common.polling import poll_until
from ha_agent.broker_check import LivenessView
from ha_agent.local_broker import LocalBroker
from ha_agent.loop_liveness import LoopTimes
from ha_agent.promotion import BrokerView
from ha_agent.supervisor import BrokerSupervisor


def seen(view: BrokerView | None, live: LivenessView | None = None) -> LocalBroker:
    broker = LocalBroker()
    broker.answered(0.0, 0.1, view, live)
    return broker


def test_a_primary_that_answered_is_the_one_fenced() -> None:
    broker = seen(BrokerView("active", pid=10))
    assert broker.fence_target() == 10 == broker.session_fence_target()


def test_the_promoted_instance_is_meant_after_it_died_not_its_successor() -> None:
    broker = seen(BrokerView("active", pid=10))
    broker.answered(1.0, 1.1, None, None)  # it died: no answer
    assert broker.fence_target() == 10  # the supervisor's new broker is not pid 10
    broker.answered(2.0, 2.1, BrokerView("joining", pid=11), None)  # its successor
    assert broker.fence_target() == 10 and broker.session_fence_target() == 10


def test_a_backup_that_answered_is_not_fenced_when_nothing_was_promoted() -> None:
    broker = seen(BrokerView("joining", pid=11))
    assert broker.fence_target() is None and broker.session_fence_target() is None
    broker.answered(1.0, 1.1, None, None)
    assert broker.fence_target() == 11  # no answer: the last that answered


def test_a_promotion_names_its_instance_and_resigning_forgets_it() -> None:
    broker = seen(BrokerView("ready", pid=12))
    broker.promoting(12)
    assert broker.fence_target() == 12 and broker.session_fence_target() == 12
    broker.resigned()
    assert broker.fence_target() is None


def test_a_busy_primary_serves_by_its_liveness() -> None:
    broker = seen(None, LivenessView(last_progress=0.2, ha_state="active", pid=13))
    assert broker.serves() and broker.session_fence_target() == 13
    assert broker.last_pid == 13
    silent, _reset = broker.silence(0.5)
    assert silent == pytest.approx(0.6)  # counted from its loop's last progress (at -0.1)


def test_the_supervisor_kills_only_the_instance_named() -> None:
    exits: list[int] = []
    supervisor = BrokerSupervisor(
        [sys.executable, "-c", "import time; time.sleep(60)"], on_exit=exits.append,
        min_delay=0.05,
    ).start()  # fmt: skip
    try:
        first = poll_until(lambda: supervisor.pid, 10)
        assert supervisor.kill("test", first)
        second = poll_until(lambda: (p := supervisor.pid) is not None and p != first and p, 10)
        assert not supervisor.kill("test: meant for the first", first)  # gone: nothing
        assert not supervisor.kill("test: none named", None)
        assert supervisor.pid == second
    finally:
        supervisor.stop(timeout=5)


def test_a_starved_backup_stands_by_its_last_view_a_stopped_one_does_not() -> None:
    """Its member record (:meth:`LocalBroker.standing`): a backup whose checks time out
    while its loop runs (starved: it waits for a CPU) is still the ready backup it last
    answered, not "down"; once its loop thread neither runs nor waits, it is down."""
    broker = LocalBroker(2.0)
    ready = BrokerView("ready", pid=14, broker_id="b-14")
    broker.answered(0.0, 0.1, ready)
    starved = [LoopTimes(0.2, 1.0, 1.0, 0.0), LoopTimes(1.2, 1.1, 1.9, 0.05)]
    for times in starved:
        broker.heard(times.clock, times.clock, LivenessView(0.9, "ready", pid=14, times=times))
    broker.answered(1.2, 1.6, None)  # its status timed out
    assert broker.running() and broker.standing() == ready
    stopped = LoopTimes(2.2, 1.1, 1.9, 0.05)  # neither ran nor waited since
    broker.heard(2.2, 2.2, LivenessView(1.9, "ready", pid=14, times=stopped))
    assert not broker.running() and broker.standing() is None
    restarted = LoopTimes(3.2, 0.1, 0.1, 0.0)
    broker.heard(3.2, 3.2, LivenessView(0.1, "joining", pid=15, times=restarted))
    assert broker.standing() is None  # another instance: not the view of the one before


def test_the_epochs_an_instance_itself_said_it_was_primary_of() -> None:
    """What a fence may record as ended once that instance's process is reaped (issue 26,
    ha_agent/ended.py): only what the instance answered, per pid and broker id."""
    broker = seen(BrokerView("recovering", epoch=3, pid=10, broker_id="b-10"))
    broker.answered(1.0, 1.1, BrokerView("ready", epoch=5, pid=10, broker_id="b-10"))
    broker.answered(2.0, 2.1, None, LivenessView(0.0, "active", epoch=4, pid=10))  # no id
    assert broker.served(10) == ("b-10", frozenset({3, 4}))  # never 5: a backup's epoch
    broker.saw_primary(10, "b-10", 6)  # its promotion's answer
    assert broker.served(10) == ("b-10", frozenset({3, 4, 6}))
    broker.answered(3.0, 3.1, BrokerView("active", epoch=9, pid=10, broker_id="b-11"))
    assert broker.served(10) == ("b-11", frozenset({9}))  # the pid came round: another one
    assert broker.served(None) == broker.served(11) == ("", frozenset())
