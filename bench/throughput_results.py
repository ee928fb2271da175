"""What a bench/throughput.py run measured, and how it is printed.

Contract
--------
:class:`RunResult` holds one run's figures (filled in by ``throughput_run.run_once`` through
:func:`summarise`) or, from :func:`median_of`, the medians of several runs with their counts
summed. A result is :attr:`~RunResult.ok` when nothing was lost, duplicated, foreign, nacked,
left in a queue or failed. Printing: :data:`HEAD` and :func:`row` (the table that
bench/throughput.py, bench/compare.py and bench/ha_compare.py print, one row a run),
:func:`as_json` (one JSON line a run) and :func:`print_summary` (their closing report).
:func:`interpreter` names the Python the brokers started here run on (the venv's: its
``qpidd`` is ``sys.executable``'s sibling). Pure functions of their arguments, except the
printing and :func:`interpreter`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from array import array
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "HEAD",
    "RunResult",
    "as_json",
    "interpreter",
    "median_known",
    "median_of",
    "median_value",
    "other_pct",
    "percentile",
    "print_summary",
    "row",
    "summarise",
]


@dataclass
class RunResult:
    label: str
    pairs: int
    messages: int  # expected in total
    received: int = 0
    seconds: float = 0.0
    msgs_per_s: float = 0.0
    confirm_p50_ms: float = 0.0
    confirm_p99_ms: float = 0.0
    confirm_max_ms: float = 0.0
    confirms: int = 0
    missing: int = 0
    duplicates: int = 0
    foreign: int = 0
    nacked: int = 0
    left_in_queues: int = 0
    producer_cpu_s: float = 0.0  # CPU seconds used by all producer processes together
    consumer_cpu_s: float = 0.0
    # Over the measured window (go to the last child's result), on this machine:
    window_s: float = 0.0
    clients_cpu_s: float = 0.0  # producers + consumers + this process
    broker_cpu_s: float | None = None  # None: broker PID unknown (remote or not found)
    # (with extra_pids, e.g. an HA primary's backups: all of them together)
    other_cpu_s: float | None = None  # everything else: other people's work on shared cores
    steal_s: float = 0.0  # taken by the hypervisor
    broker_us_per_msg: float | None = None
    # the part of broker_us_per_msg spent by extra_pids (an HA primary's backups); the rest
    # is the primary's
    extra_us_per_msg: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.errors
            or self.missing
            or self.duplicates
            or self.foreign
            or self.nacked
            or self.left_in_queues
        )


def interpreter() -> str:
    """This process's Python, as a benchmark reports it: version, binary, and whether it
    runs on a shared libpython (a build like pyenv's ``--enable-shared`` without
    ``--enable-optimizations``, about a fifth slower on the broker's path than Debian's
    static, PGO and LTO built ``python3``: docs/benchmarks.md)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            shared = any("libpython" in line for line in maps)
    except OSError:
        shared = None
    linked = {True: "shared libpython", False: "static", None: "libpython unknown"}[shared]
    binary = os.path.realpath(sys.executable)
    return f"{platform.python_implementation()} {platform.python_version()} ({binary}, {linked})"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sequence."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil
    return sorted_values[int(rank) - 1]


def summarise(
    res: RunResult, got: dict[tuple[str, int], dict[str, Any]], pairs: int, messages: int
) -> None:
    """Add the children's results ``got`` (by (role, index)) of a run at P=pairs to ``res``."""
    lat = array("d")
    first = []
    last = []
    for i in range(pairs):
        pr = got.get(("producer", i))
        co = got.get(("consumer", i))
        if pr is not None:
            lat.extend(pr.get("latency", ()))
            res.nacked += pr["nacked"]
            res.producer_cpu_s += pr["cpu_s"]
            if pr["first_ts"]:
                first.append(pr["first_ts"])
            if pr["published"] != messages and not res.errors:
                res.errors.append(f"producer {i} published {pr['published']} of {messages}")
        if co is not None:
            res.received += co["received"]
            res.missing += co["missing"]
            res.duplicates += co["duplicates"]
            res.foreign += co["foreign"]
            res.consumer_cpu_s += co["cpu_s"]
            if co["received"]:
                last.append(co["last_ts"])
        else:
            res.missing += messages  # unknown: count as lost
    if first and last:
        res.seconds = max(last) - min(first)
        res.msgs_per_s = res.received / res.seconds if res.seconds > 0 else 0.0
    srt = sorted(lat)
    res.confirms = len(srt)
    if srt:
        res.confirm_p50_ms = percentile(srt, 50) * 1e3
        res.confirm_p99_ms = percentile(srt, 99) * 1e3
        res.confirm_max_ms = srt[-1] * 1e3


def median_of(runs: Sequence[RunResult]) -> RunResult:
    """A RunResult whose figures are the medians of `runs` (counts are summed)."""
    first = runs[0]
    med = RunResult(label=first.label, pairs=first.pairs, messages=first.messages)
    for name in (
        "seconds",
        "msgs_per_s",
        "confirm_p50_ms",
        "confirm_p99_ms",
        "confirm_max_ms",
        "producer_cpu_s",
        "consumer_cpu_s",
        "window_s",
        "clients_cpu_s",
        "steal_s",
    ):
        setattr(med, name, statistics.median(getattr(r, name) for r in runs))
    for name in ("broker_cpu_s", "other_cpu_s", "broker_us_per_msg", "extra_us_per_msg"):
        known = [v for v in (getattr(r, name) for r in runs) if v is not None]
        setattr(med, name, statistics.median(known) if known else None)
    for name in ("received", "confirms", "missing", "duplicates", "foreign", "nacked"):
        setattr(med, name, sum(getattr(r, name) for r in runs))
    med.left_in_queues = sum(r.left_in_queues for r in runs)
    med.errors = [e for r in runs for e in r.errors]
    return med


HEAD = (
    f"{'target':<10} {'P':>3} {'run':>4} {'msgs':>8} {'secs':>6} {'msgs/s':>9} "
    f"{'p50 ms':>8} {'p99 ms':>8} {'missing':>7} {'dup':>5} {'brk us/m':>8} {'other%':>6} status"
)
# brk us/m: broker CPU microseconds per message received (PID found from the listening port;
#           bench/ha_compare.py counts a primary's backups in).
# other%:   CPU used meanwhile by processes that are neither the broker nor this benchmark, in %
#           of one core: other people's work on shared cores; compare runs only when it is low.


def row(r: RunResult, run: str) -> str:
    status = "ok" if r.ok else "FAIL"
    if r.nacked or r.foreign or r.left_in_queues:
        status += f" (nacked={r.nacked} foreign={r.foreign} left={r.left_in_queues})"
    return (
        f"{r.label or '-':<10.10} {r.pairs:>3} {run:>4} {r.received:>8} {r.seconds:>6.2f} "
        f"{r.msgs_per_s:>9.0f} {r.confirm_p50_ms:>8.2f} {r.confirm_p99_ms:>8.2f} "
        f"{r.missing:>7} {r.duplicates:>5} {_opt(r.broker_us_per_msg, 8, 1)} "
        f"{_opt(other_pct(r), 6, 0)} {status}"
    )


def _opt(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def other_pct(r: RunResult) -> float | None:
    """The other% of ``r``: CPU of unrelated processes in % of one core, None if unknown."""
    if r.other_cpu_s is None or r.window_s <= 0:
        return None
    return r.other_cpu_s / r.window_s * 100


def as_json(r: RunResult, run: str, args: argparse.Namespace) -> str:
    d = asdict(r)
    d.update(
        run=run,
        ok=r.ok,
        size=args.size,
        window=args.window,
        prefetch=args.prefetch,
        messages_per_producer=r.messages // max(1, r.pairs),
    )
    return json.dumps(d, sort_keys=True)


def median_value(runs: Sequence[RunResult], attr: str) -> float:
    """The median of the figure ``attr`` over ``runs``."""
    return float(statistics.median(getattr(r, attr) for r in runs))


def median_known(runs: Sequence[RunResult], attr: str, digits: int = 0) -> str:
    """The median of the figure ``attr`` where known, to ``digits`` decimals, else ``-``."""
    known = [v for v in (getattr(r, attr) for r in runs) if v is not None]
    return f"{statistics.median(known):.{digits}f}" if known else "-"


def print_summary(
    title: str, results: Sequence[RunResult], *blocks: Sequence[str], run: str = "med"
) -> None:
    """The closing report: ``title``, the table of ``results`` (every row's run is ``run``),
    then each block of lines after an empty line."""
    print(title)
    print(HEAD)
    for r in results:
        print(row(r, run))
    for block in blocks:
        print()
        for line in block:
            print(line)
