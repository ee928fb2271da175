"""The nemesis drill's run: build the cluster, then for each cycle and nemesis: wait until
settled, start the drill's clients, inject, heal, wait until settled again, stop
publishing, drain, check; at the end (and on errors, Ctrl-C or SIGTERM) stop everything.

:Status: Beta (the nemesis drill; root only)

Contract
========

- The clients are the drill's own (:class:`~qpid_ha_cli.drill.run.DrillRun`: pika, a
  publisher with confirms and a consumer with acks on the brokers' URL list, or on the
  virtual IP), one run per cycle on a fresh queue, started from a thread that joined the
  client host's namespace, so their sockets live there. The consumer starts only once the
  fault is healed and the cluster settled: every message confirmed during the fault is
  still in the queue then, so the new primary must have it.
- While a cycle runs, a sampler asks every broker for its state every 100 ms and counts
  the samples in which two say they are primary.
- After a cycle, the two-primary time comes from every broker's and agent's JSON log and
  the drill's own notes (:mod:`~qpid_ha_cli.nemesis.checks`); the outage is the drill's
  longest time between two confirms.
- The run stops after the first failing cycle (lost, two primaries, an error), keeping
  every log under the work directory for the post-mortem.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from common.log import get_logger
from common.polling import PollTimeout, poll_until
from qpid_ha_cli.drill.core import DrillCheck
from qpid_ha_cli.drill.run import DrillRun, Unreachable
from qpid_ha_cli.drill.settings import DrillSettings, parse_drill_url
from qpid_ha_cli.nemesis.checks import CycleResult, overlap_seconds, primary_spans
from qpid_ha_cli.nemesis.cluster import VIP, Cluster
from qpid_ha_cli.nemesis.nemeses import NEMESES, Context, Timing, nemesis_named
from qpid_ha_cli.nemesis.processes import AMQP_PORT
from qpid_ha_cli.nemesis.topology import Host, TopologyError, enter

__all__ = ["NemesisRun", "NemesisSettings", "read_events"]


@dataclass(frozen=True)
class NemesisSettings:
    nemeses: tuple[str, ...]
    cycles: int
    session_timeout: float
    link_heartbeat_interval: float
    rate: float
    workdir: Path
    via_vip: bool = False
    amqp10: bool = False  # an AMQP 1.0 drill (Proton) beside the 0-9-1 one


def read_events(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a log (a half-written last line skipped)."""
    events = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


class HeldBackDrillRun(DrillRun):
    """The drill's run with its consumer held back until :meth:`consume`: while a fault
    is on, every confirmed message stays in the queue, so one the new primary lacks is
    counted lost (a live consumer would have taken it off the old primary already, and
    the old primary may confirm a message that left its queue without its backups).

    It overrides the shell's consumer thread's body (``DrillRun._consumer``) to wait first:
    a ``consumer_start`` event in :class:`DrillRun` itself would be the clean way.
    """

    def __init__(self, settings: DrillSettings, protocol: str = "0-9-1") -> None:
        super().__init__(settings, protocol=protocol)
        self.consuming = threading.Event()

    def consume(self) -> None:
        self.consuming.set()

    def _consumer(self) -> None:
        self.consuming.wait()
        super()._consumer()


class ClientDrill:
    """One drill run on ``host``'s namespace, in a thread; publishes until :meth:`finish`."""

    def __init__(
        self, host: Host, url: str, rate: float, timing: Timing, name: str,
        protocol: str = "0-9-1",
    ) -> None:  # fmt: skip
        settings = DrillSettings(
            url=parse_drill_url(f"amqp:guest/guest@{url}")[0],
            rate=rate,
            duration=None,
            count=None,
            drain_timeout=60.0,
            connect_timeout=timing.failover + 30,
            scenario=name,
        )
        if protocol == "1.0":
            settings.queue += ".amqp10"
        self.host = host
        self.run = HeldBackDrillRun(settings, protocol)
        self.check: DrillCheck | None = None
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="nemesis-drill", daemon=True)

    def _main(self) -> None:
        try:
            enter(self.host.namespace)  # the drill's threads start from here: they follow
            self.check = self.run.run()
        except BaseException as exc:  # handed to finish()
            self.failure = exc

    def start(self) -> ClientDrill:
        self.thread.start()
        return self

    @property
    def confirmed(self) -> int:
        return self.run.core.confirmed_count

    def started(self) -> bool:
        """Its first confirms came (or its thread ended)."""
        return self.confirmed >= 20 or not self.thread.is_alive()

    def finish(self, timeout: float = 120.0) -> DrillCheck:
        """Stop publishing (the count becomes 0: already reached), consume, drain, return
        the check."""
        self.run.settings.count = 0
        self.run.consume()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError(f"the drill did not finish within {timeout:.0f} s")
        if self.failure is not None:
            raise self.failure
        assert self.check is not None
        return self.check


class Sampler:
    """Asks every broker for its state every 100 ms; counts two-primary samples."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.seen: list[list[str]] = []
        # samples with two brokers in a primary state and one's lease not readable: not
        # known either way (the logs' check, two_primaries_s, decides)
        self.unknown: list[list[str]] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._main, name="nemesis-sampler", daemon=True)

    def _main(self) -> None:
        while not self._stop.wait(0.1):
            primaries, unknown = self.cluster.watch_primaries()
            if len(primaries) >= 2:
                self.seen.append(primaries)
            elif unknown and len(primaries) + len(unknown) >= 2:
                self.unknown.append(primaries + unknown)

    def start(self) -> Sampler:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)


class NemesisRun:
    """The whole drill; :meth:`run` returns every cycle's result."""

    def __init__(self, settings: NemesisSettings) -> None:
        self.settings = settings
        self.timing = Timing(settings.session_timeout, settings.link_heartbeat_interval)
        zk_servers = 3 if any(NEMESES[n].ensemble for n in settings.nemeses) else 1
        self.cluster = Cluster(
            settings.workdir, settings.session_timeout, settings.link_heartbeat_interval, zk_servers
        )
        self.log = get_logger("nemesis")
        self.drill_log = settings.workdir / "drill.log"
        self.results: list[CycleResult] = []
        self._holding = threading.Event()

    def note(self, event: str, **fields: Any) -> None:
        self.log.info(event, **fields)

    def hold(self, seconds: float) -> None:
        """The fault's length, on purpose (not a synchronisation)."""
        self._holding.wait(seconds)

    def run(self) -> list[CycleResult]:
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            began = time.monotonic()
            self.cluster.start()
            s = self.settings
            self.note(
                "nemesis_cluster_started",
                took_s=round(time.monotonic() - began, 3),
                session_timeout=s.session_timeout,
                link_heartbeat_interval=s.link_heartbeat_interval,
            )
            for cycle in range(1, s.cycles + 1):
                for name in s.nemeses:
                    result = self._cycle(cycle, name)
                    self.results.append(result)
                    self.note("nemesis_cycle_checked", **result.fields())
                    if not result.ok:
                        return self.results
            return self.results
        finally:
            # the stops below hand the primary role on: promotions after this line are the
            # drill's teardown, not faults (analytics leaves them out)
            self.note("nemesis_teardown_started", cycles=len(self.results))
            self.cluster.stop()
            signal.signal(signal.SIGTERM, previous)

    def _cycle(self, cycle: int, name: str) -> CycleResult:
        nemesis = nemesis_named(name)
        settle = self.timing.failover + 30
        try:
            primary = self.cluster.wait_settled(settle)
        except PollTimeout as exc:  # the previous cycle left it unsettled: this one fails
            return CycleResult(cycle, name, error=f"not settled before the fault: {exc}")
        result = CycleResult(cycle, name, old_primary=primary.name)
        assert self.cluster.client is not None
        url = f"{VIP}:{AMQP_PORT}" if self.settings.via_vip else self.cluster.url
        window_from = time.time()
        self.note("nemesis_cycle_started", cycle=cycle, nemesis=name, target=primary.name)
        drill = ClientDrill(
            self.cluster.client, url, self.settings.rate, self.timing, f"{name}-{cycle}"
        ).start()
        drill10 = (
            ClientDrill(
                self.cluster.client, url, self.settings.rate, self.timing, f"{name}-{cycle}",
                "1.0",
            ).start()
            if self.settings.amqp10
            else None
        )  # fmt: skip
        sampler = Sampler(self.cluster).start()
        ctx = Context(self.cluster, primary, self.timing, self.hold, self.note)
        try:
            for client in (drill, drill10):
                if client is not None:
                    poll_until(client.started, 30, "the drill's first confirms")
            try:
                nemesis.inject(ctx)
            finally:
                nemesis.heal(ctx)
            after = self.cluster.wait_settled(settle)
            result.new_primary = after.name
            self.hold(1.0)  # publish on through a settled cluster
        except (PollTimeout, TopologyError, ValueError, OSError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            sampler.stop()
            check: DrillCheck | None
            try:
                check = drill.finish()
            except (Unreachable, RuntimeError) as exc:
                result.error = result.error or f"drill: {type(exc).__name__}: {exc}"
                check = None
            if drill10 is not None:
                try:
                    check10 = drill10.finish()
                except (Unreachable, RuntimeError) as exc:
                    result.error = result.error or f"1.0 drill: {type(exc).__name__}: {exc}"
                else:  # its losses are the cycle's: the promise is the same in both
                    result.lost += check10.lost
                    result.notes["amqp10"] = {
                        "sent": check10.sent, "confirmed": check10.confirmed,
                        "received": check10.received, "lost": check10.lost,
                        "duplicated": check10.duplicated, "unconfirmed": check10.unconfirmed,
                        "max_gap_ms": check10.max_gap_ms,
                    }  # fmt: skip
        window = (window_from, time.time())
        if ctx.new_primary is not None:  # the one promoted first (then settled one)
            result.new_primary = ctx.new_primary.name
        result.notes.update(ctx.facts)
        if check is not None:
            result.sent, result.confirmed, result.received = (
                check.sent,
                check.confirmed,
                check.received,
            )
            result.lost, result.duplicated = result.lost + check.lost, check.duplicated
            result.unconfirmed, result.outage_ms = check.unconfirmed, check.max_gap_ms
        result.two_primaries_seen = len(sampler.seen)
        if sampler.seen:
            result.notes["two_primaries_sample"] = sampler.seen[0]
        if sampler.unknown:
            result.notes["two_primaries_unknown_samples"] = len(sampler.unknown)
        result.two_primaries_s = self.two_primaries(window)
        return result

    def two_primaries(self, window: tuple[float, float]) -> float:
        """Seconds in ``window`` with two brokers serving as primary, from every log."""
        drill_events = read_events(self.drill_log)
        spans = []
        for node in self.cluster.nodes:
            spans += primary_spans(
                node.name,
                read_events(node.broker_log),
                read_events(node.agent_log),
                drill_events,
                window[1],
            )
        return overlap_seconds(spans, window)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
