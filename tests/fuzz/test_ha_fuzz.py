"""The HA path against real brokers (issue 24, items 4 and 5), a few seconds of ``make test``.

One primary and two ready backups (real ``qpidd`` processes on loopback, started side by
side), shared by:

- the replication model's end-to-end variant: hypothesis draws a few short sequences of
  declares, binds and unbinds (queue and exchange-to-exchange), deletes, purges, confirmed
  publishes, gets with ack, reject and requeue, and transactions (publishes and acks, commit
  or rollback), sent with pika; after each sequence (a quiescent point: its connection
  closed) both backups' state (queues with arguments and message counts, exchanges,
  bindings, read through ``/api/...``) equals the primary's and both are reported in sync;
  every confirmed publish was confirmed;
- a short run of the fuzzer (:mod:`tests.fuzz.ha_fuzz`; the long run is
  ``bench/ha_fuzz.py``, figures in docs/reliability.md): no finding.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pika.adapters.blocking_connection import BlockingChannel

from common.polling import poll_until
from tests.fuzz.cluster_check import LINK_HEARTBEAT, LogScan, quiescent_check
from tests.fuzz.ha_fuzz import run
from tests.ha.cluster import Cluster

#: Seconds of fuzzing in ``make test`` (HA_FUZZ_SECONDS to run longer by hand).
FUZZ_SECONDS = float(os.environ.get("HA_FUZZ_SECONDS", "2.5"))
FUZZ_SEED = int(os.environ.get("HA_FUZZ_SEED", "20261129"))


def _start_side_by_side(cluster: Cluster) -> None:
    """Start every broker at once (a start is mostly waiting: three in a row took 8 s on a
    loaded machine), each given 45 s (three starting together on a loaded machine share its
    CPUs); if one fails, all again one after the other (``Cluster.start``: new ports if one
    was taken meanwhile)."""
    errors: list[BaseException] = []

    def start(i: int) -> None:
        try:
            cluster.brokers[i].start(timeout=45)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(len(cluster.brokers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        cluster.stop()
        cluster.start()


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("fuzz"), 3, LINK_HEARTBEAT)
    _start_side_by_side(cluster)
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        poll_until(lambda: sum(b["in_sync"] for b in cluster.ha(0)["backups"]) == 2, 15)
        yield cluster
    finally:
        cluster.stop()


# -- the model, end to end ------------------------------------------------------------------
QUEUES = ["m.q", "m.t.a=b", "m.é", "m.<img src=x>"]
EXCHANGES = ["m.x", "m.topic"]
KEYS = ["k", "k.#", "*"]

STEPS = st.one_of(
    st.tuples(
        st.just("declare_queue"),
        st.sampled_from(QUEUES),
        st.sampled_from([{}, {"qpid.replicate": "configuration"}, {"x-max-length": 3}]),
    ),
    st.tuples(st.just("declare_exchange"), st.sampled_from(EXCHANGES), st.just(None)),
    st.tuples(
        st.just("bind"),
        st.sampled_from(QUEUES),
        st.tuples(st.sampled_from(EXCHANGES), st.sampled_from(KEYS)),
    ),
    st.tuples(
        st.just("unbind"),
        st.sampled_from(QUEUES),
        st.tuples(st.sampled_from(EXCHANGES), st.sampled_from(KEYS)),
    ),
    st.tuples(
        st.sampled_from(["bind_exchange", "unbind_exchange"]),
        st.sampled_from(EXCHANGES),
        st.tuples(st.sampled_from(EXCHANGES), st.sampled_from(KEYS)),
    ),
    st.tuples(st.sampled_from(["delete_queue", "purge"]), st.sampled_from(QUEUES), st.just(None)),
    st.tuples(st.just("delete_exchange"), st.sampled_from(EXCHANGES), st.just(None)),
    st.tuples(
        st.just("publish"),
        st.sampled_from(["", *EXCHANGES]),
        st.tuples(st.sampled_from([*QUEUES, "k", "k.x"]), st.binary(max_size=8)),
    ),
    st.tuples(
        st.just("get"), st.sampled_from(QUEUES), st.sampled_from(["ack", "reject", "requeue"])
    ),
    st.tuples(
        st.just("tx"),
        st.sampled_from(QUEUES),
        st.tuples(st.integers(0, 3), st.booleans(), st.booleans()),  # publishes, ack, commit
    ),
)


class Driver:
    """A pika connection with a confirm channel and a transactional channel, reopened
    after a refusal (a refused step changes nothing)."""

    def __init__(self, cluster: Cluster) -> None:
        self.connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", cluster.ports[0])
        )
        self.channel = self._confirm_channel()
        self.tx_channel = self._tx_channel()
        self.confirmed = 0

    def _confirm_channel(self) -> BlockingChannel:
        channel = self.connection.channel()
        channel.confirm_delivery()
        return channel

    def _tx_channel(self) -> BlockingChannel:
        channel = self.connection.channel()
        channel.tx_select()
        return channel

    def step(self, step: tuple[str, str, Any]) -> None:
        try:
            self._step(*step)
        except pika.exceptions.ChannelClosedByBroker as closed:
            assert closed.reply_code in (404, 405, 406), closed
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError):
            pass  # mandatory publishes nobody took: answered, nothing stored
        if not self.channel.is_open:
            self.channel = self._confirm_channel()
        if not self.tx_channel.is_open:
            self.tx_channel = self._tx_channel()

    def _step(self, kind: str, name: str, arg: Any) -> None:
        channel = self.channel
        if kind == "declare_queue":
            channel.queue_declare(name, durable=True, arguments=arg)
        elif kind == "declare_exchange":
            channel.exchange_declare(name, "topic", durable=True)
        elif kind == "bind":
            channel.queue_bind(name, arg[0], arg[1])
        elif kind == "unbind":
            channel.queue_unbind(name, arg[0], arg[1])
        elif kind == "bind_exchange":
            channel.exchange_bind(name, arg[0], arg[1])
        elif kind == "unbind_exchange":
            channel.exchange_unbind(name, arg[0], arg[1])
        elif kind == "delete_queue":
            channel.queue_delete(name)
        elif kind == "purge":
            channel.queue_purge(name)
        elif kind == "delete_exchange":
            channel.exchange_delete(name)
        elif kind == "publish":
            channel.basic_publish(name, arg[0], arg[1], mandatory=True)
            self.confirmed += 1  # basic_publish returned: confirmed (a nack raises)
        elif kind == "get":
            method, _, _ = channel.basic_get(name)
            if method is not None:
                if arg == "ack":
                    channel.basic_ack(method.delivery_tag)
                else:
                    channel.basic_reject(method.delivery_tag, requeue=arg == "requeue")
        elif kind == "tx":
            self._transaction(name, *arg)

    def _transaction(self, queue: str, publishes: int, ack: bool, commit: bool) -> None:
        tx = self.tx_channel
        for n in range(publishes):
            tx.basic_publish("", queue, f"tx-{n}".encode())
        if ack:
            method, _, _ = tx.basic_get(queue)
            if method is not None:
                tx.basic_ack(method.delivery_tag)
        if commit:
            tx.tx_commit()
        else:
            tx.tx_rollback()

    def close(self) -> None:
        self.connection.close()


@settings(
    max_examples=int(os.environ.get("E2E_MODEL_EXAMPLES", "10")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(steps=st.lists(STEPS, min_size=1, max_size=12))
def test_the_backups_hold_what_the_primary_holds_at_every_quiescent_point(
    trio: Cluster, steps: list[tuple[str, str, Any]]
) -> None:
    scan = LogScan(trio.brokers)
    driver = Driver(trio)
    try:
        for step in steps:
            driver.step(step)
    finally:
        driver.close()
    assert quiescent_check(trio, 0, [1, 2], timeout=15) == []
    assert [line for line in scan.scan() if "Traceback" in line or "logged" in line] == []


# -- the fuzzer, briefly -------------------------------------------------------------------
def test_a_short_fuzz_run_finds_nothing(trio: Cluster) -> None:
    figures = run(trio, seconds=FUZZ_SECONDS, seed=FUZZ_SEED, batch=24, concurrency=3)
    assert figures.findings == [], (figures.summary(), figures.findings[:20])
    assert figures.quiescent_checks >= 1
    assert figures.amqp.sessions["valid"] > 0 and figures.amqp.sessions["garbled"] > 0
    assert figures.amqp.confirms > 0 and figures.tracebacks == 0
