"""The HA path's fuzzer (issue 24, item 5): a primary with two backups, fuzzed, checked.

:func:`run` starts nothing: it is given a started :class:`~tests.ha.cluster.Cluster` whose
broker ``primary`` is active and whose other brokers are ready backups. It then runs
batches until ``seconds`` have passed; a batch is ``batch`` sessions, ``concurrency`` at a
time, each one of

- a valid AMQP session (:func:`~tests.fuzz.amqp_session.valid_session`), 55 %;
- a garbled AMQP session (:func:`~tests.fuzz.amqp_session.garbled_session`), 25 %;
- a few management requests (:func:`http_requests`): declares and deletes of queues and
  exchanges with random names, arguments and bodies (JSON or not), purges, publishes and
  gets through the console's API, reads; never a promotion, an in-sync commit or a stop,
  which are the cluster manager's; 20 %.

After each batch, with every client gone, a quiescent check
(:func:`~tests.fuzz.cluster_check.quiescent_check`) and a scan of every broker's stderr and
log (:class:`~tests.fuzz.cluster_check.LogScan`). A run stops at its first failed
quiescent check (what follows would only repeat it). Every session's seed comes from the
run's seed, so a finding names the session that met it.
"""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tests.fuzz import traffic
from tests.fuzz.amqp_session import Tally, garbled_session, valid_session
from tests.fuzz.cluster_check import LogScan, quiescent_check, replicated_messages
from tests.ha.cluster import AUTH, Cluster


@dataclass
class Figures:
    """What a run did and found."""

    seed: int
    seconds: float = 0.0
    batches: int = 0
    quiescent_checks: int = 0
    #: Messages on replicated queues at the quiescent checks (each counted once a check).
    messages_compared: int = 0
    http_requests: int = 0
    http_statuses: Counter[int] = field(default_factory=Counter)
    amqp: Tally = field(default_factory=Tally)
    tracebacks: int = 0
    bad_events: int = 0
    findings: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
            "sessions": dict(self.amqp.sessions),
            "operations": self.amqp.operations + self.http_requests,
            "amqp_operations": self.amqp.operations,
            "publishes": self.amqp.publishes,
            "confirms": self.amqp.confirms,
            "nacks": self.amqp.nacks,
            "publishes_closed_before_confirm": self.amqp.closed_confirms,
            "commits": self.amqp.commits,
            "closes": {str(k): v for k, v in sorted(self.amqp.closes.items())},
            "contract_refusals": self.amqp.contract_refusals,
            "top_refusals": dict(self.amqp.reasons.most_common(12)),
            "http_requests": self.http_requests,
            "http_statuses": {str(k): v for k, v in sorted(self.http_statuses.items())},
            "batches": self.batches,
            "quiescent_checks": self.quiescent_checks,
            "messages_compared": self.messages_compared,
            "tracebacks": self.tracebacks,
            "bad_events": self.bad_events,
            "findings": len(self.findings),
        }


def _path_name(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _json_body(rng: random.Random, fields: dict[str, Any]) -> bytes:
    roll = rng.random()
    if roll < 0.8:
        return json.dumps(fields, default=str).encode()
    if roll < 0.9:
        return rng.choice((b"", b"{", b"[1,2]", b"null", b'{"durable": "yes"}', b"\xff\xfe"))
    return json.dumps({"arguments": traffic.nested(rng.randint(20, 40))}).encode()


def _request(rng: random.Random) -> tuple[str, str, bytes | None]:
    """One management request: method, path, body."""
    roll = rng.random()
    vhost = "/%2F" if rng.random() < 0.7 else ""
    if roll < 0.3:
        name = traffic.queue_name(rng) or "fz.api"
        arguments = {k: v for k, v in traffic.queue_arguments(rng, name).items() if _plain(v)}
        body = {
            "durable": rng.random() < 0.5,
            "auto_delete": rng.random() < 0.1,
            "arguments": arguments,
        }
        return "PUT", f"/api/queues{vhost}/{_path_name(name)}", _json_body(rng, body)
    if roll < 0.45:
        arguments = {k: v for k, v in traffic.exchange_arguments(rng).items() if _plain(v)}
        name = traffic.exchange_name(rng) or "fz.api-x"
        body = {"type": rng.choice((*traffic.EXCHANGE_TYPES, "bogus")), "arguments": arguments}
        return "PUT", f"/api/exchanges{vhost}/{_path_name(name)}", _json_body(rng, body)
    if roll < 0.55:
        return "DELETE", f"/api/queues{vhost}/{_path_name(traffic.queue_name(rng) or 'x')}", None
    if roll < 0.6:
        return (
            "DELETE",
            f"/api/exchanges{vhost}/{_path_name(traffic.exchange_name(rng) or 'x')}",
            None,
        )
    if roll < 0.68:
        return "DELETE", f"/api/queues/{_path_name(traffic.queue_name(rng) or 'x')}/contents", None
    if roll < 0.78:
        body = {"routing_key": traffic.queue_name(rng), "payload": traffic.text(rng, 0, 50)}
        exchange = traffic.exchange_name(rng) or "amq.default"
        return "POST", f"/api/exchanges/{_path_name(exchange)}/publish", _json_body(rng, body)
    if roll < 0.86:
        body = {"count": rng.randint(0, 3), "requeue": rng.random() < 0.5}
        return (
            "POST",
            f"/api/queues/{_path_name(traffic.queue_name(rng) or 'x')}/get",
            _json_body(rng, body),
        )
    paths = [
        *("/api/queues", "/api/exchanges", "/api/bindings", "/api/ha", "/api/connections"),
        *("/api/ha/replications", "/api/status"),
        "/api/queues/%2F/" + _path_name(traffic.queue_name(rng)),
    ]
    return "GET", rng.choice(paths), None


def _plain(value: Any) -> bool:
    """Whether ``value`` survives JSON as itself (the API's arguments are JSON)."""
    return isinstance(value, str | int | bool | dict | list) or value is None


def http_requests(port: int, rng: random.Random, figures: Figures) -> list[str]:
    findings: list[str] = []
    for _ in range(rng.randint(1, 5)):
        method, path, body = _request(rng)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            headers = {"Authorization": AUTH}
            if body is not None:
                headers["Content-Type"] = "application/json"
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            figures.http_requests += 1
            figures.http_statuses[response.status] += 1
            if response.status >= 500:
                findings.append(f"{method} {path} -> {response.status}: {data[:300]!r}")
        except (OSError, http.client.HTTPException) as exc:
            findings.append(f"{method} {path}: {type(exc).__name__}: {exc}")
        finally:
            connection.close()
    return findings


def _session(port: int, mgmt_port: int, seed: int) -> tuple[int, Tally, Figures | None]:
    rng = random.Random(seed)
    roll = rng.random()
    if roll < 0.55:
        return seed, valid_session(port, rng), None
    if roll < 0.8:
        return seed, garbled_session(port, rng), None
    tally = Tally()
    tally.sessions["http"] += 1
    requests = Figures(seed)  # this thread's counts, added up by the run
    tally.findings += http_requests(mgmt_port, rng, requests)
    return seed, tally, requests


def run(
    cluster: Cluster,
    *,
    seconds: float,
    seed: int,
    primary: int = 0,
    batch: int = 40,
    concurrency: int = 4,
    settle_within: float = 20.0,
) -> Figures:
    """Fuzz for ``seconds`` (whole batches: the last one ends after), then return the figures."""
    figures = Figures(seed)
    backups = [i for i in range(len(cluster.brokers)) if i != primary]
    scan = LogScan(cluster.brokers)
    scan.scan()  # what the start logged is not the run's
    broker = cluster.brokers[primary]
    master = random.Random(seed)
    start = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        while time.monotonic() - start < seconds:
            seeds = [master.randrange(2**32) for _ in range(batch)]
            results = pool.map(lambda s: _session(broker.port, broker.mgmt_port, s), seeds)
            for session_seed, tally, requests in results:
                figures.amqp.add(tally)
                if requests is not None:
                    figures.http_requests += requests.http_requests
                    figures.http_statuses.update(requests.http_statuses)
                figures.findings += [f"session {session_seed}: {f}" for f in tally.findings]
            figures.batches += 1
            found = quiescent_check(cluster, primary, backups, settle_within)
            figures.quiescent_checks += 1
            figures.findings += [f"quiescent check {figures.quiescent_checks}: {f}" for f in found]
            figures.findings += scan.scan()
            if found:
                break
            figures.messages_compared += replicated_messages(broker.mgmt_port)
    figures.tracebacks = scan.tracebacks
    figures.bad_events = scan.bad_events
    figures.seconds = time.monotonic() - start
    return figures
