"""``qpid-ha drill --nemesis ...``: the nemesis drill's entry, called by the drill command.

:Status: Beta (root only)

- :func:`missing_requirements` (pure over what it is given) names what the drill needs and
  this machine lacks: root, ``ip``, ``nft``, ``java``, ZooKeeper's jar, ``qpidd``,
  ``qpid-ha-agent``. :func:`run_nemesis` refuses to run when anything is missing: one line,
  exit 2 (USAGE).
- It parses ``--nemesis`` (a comma-separated list of :data:`~qpid_ha_cli.nemesis.nemeses.NEMESES`)
  and ``--cycles``, logs to ``<work dir>/drill.log``, runs, prints the table and the verdict,
  and writes ``<work dir>/results.json`` (settings, cycles, summary) for the benchmark.
- Exit codes: 0 every cycle OK; 1 a confirmed message lost, two primaries or a cycle's error;
  2 usage or a missing requirement; 130 Ctrl-C or SIGTERM (everything stopped and removed
  first; results.json and the table of the cycles that finished still written). A cluster that
  never settles at the start is one line, exit 1, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.exit_status import CommandError, ExitStatus
from common.log import configure_logging, set_log_context
from common.polling import PollTimeout
from qpid_ha_cli.nemesis.checks import CycleResult, summary
from qpid_ha_cli.nemesis.nemeses import NEMESES
from qpid_ha_cli.nemesis.processes import AGENT, QPIDD, ZOOKEEPER_JAR
from qpid_ha_cli.nemesis.report import table, verdict
from qpid_ha_cli.nemesis.run import NemesisRun, NemesisSettings

__all__ = ["missing_requirements", "parse_nemeses", "run_nemesis"]


def missing_requirements(
    euid: int, which: Callable[[str], str | None], exists: Callable[[str], bool]
) -> list[str]:
    """What the nemesis drill needs and is not there (empty: ready to run)."""
    missing = [] if euid == 0 else ["root (network namespaces and nft)"]
    missing += [tool for tool in ("ip", "nft", "java") if which(tool) is None]
    missing += [path for path in (str(ZOOKEEPER_JAR), QPIDD, AGENT) if not exists(path)]
    return missing


def parse_nemeses(text: str) -> tuple[str, ...]:
    """``kill,partition`` as names. :raises ValueError: an unknown or empty one."""
    names = tuple(n.strip() for n in text.split(","))
    bad = [n for n in names if n not in NEMESES]
    if bad:
        raise ValueError(f"unknown nemesis {bad[0]!r}: expected some of {','.join(NEMESES)}")
    return names


def run_nemesis(
    out: Callable[[str], None],
    nemeses: str,
    cycles: int,
    session_timeout: float,
    link_heartbeat_interval: float,
    rate: float,
    work_dir: str | None,
    via_vip: bool,
    amqp10: bool = False,
) -> ExitStatus:
    """Check, run, report. :raises CommandError: USAGE for a bad value or what is missing."""
    try:
        names = parse_nemeses(nemeses)
    except ValueError as exc:
        raise CommandError(f"--nemesis: {exc}", ExitStatus.USAGE) from None
    if cycles < 1:
        raise CommandError(f"--cycles: must be at least 1, got {cycles}", ExitStatus.USAGE)
    if not session_timeout > 0 or not link_heartbeat_interval > 0:
        raise CommandError(
            "--session-timeout and --link-heartbeat-interval must be > 0", ExitStatus.USAGE
        )
    missing = missing_requirements(os.geteuid(), shutil.which, os.path.exists)
    if missing:
        raise CommandError(f"the nemesis drill needs {', '.join(missing)}", ExitStatus.USAGE)
    workdir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="qpid-ha-nemesis-"))
    workdir.mkdir(parents=True, exist_ok=True)
    configure_logging(
        level="info",
        fmt="json",
        file=str(workdir / "drill.log"),
        node="nemesis",
        component="nemesis",
        cluster="nemesis",
    )
    # every line of this run's drill.log (its clients' too) says which run it is: two runs
    # of the same cluster name are told apart by it (analytics), never by name alone
    set_log_context(run_id=uuid.uuid4().hex[:12])
    settings = NemesisSettings(
        names, cycles, session_timeout, link_heartbeat_interval, rate, workdir, via_vip, amqp10
    )
    out(
        f"nemesis drill: {','.join(names)} x {cycles}, session timeout {session_timeout} s, "
        f"link heartbeat {link_heartbeat_interval} s, {rate:g} msg/s; logs in {workdir}"
    )
    run = NemesisRun(settings)
    try:
        results = run.run()
    except PollTimeout as exc:  # the cluster never settled at the start
        raise CommandError(
            f"the drill's cluster did not settle: {exc} (logs in {workdir})", ExitStatus.ERROR
        ) from None
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM: everything is stopped; say what the finished cycles showed.
        _report(out, run, settings, run.results, workdir)
        out("interrupted: the cycles above are the ones that finished")
        raise
    return _report(out, run, settings, results, workdir)


def _report(
    out: Callable[[str], None],
    run: NemesisRun,
    settings: NemesisSettings,
    results: list[CycleResult],
    workdir: Path,
) -> ExitStatus:
    """Write results.json, print the table and the verdict; the exit status."""
    names, cycles = settings.nemeses, settings.cycles
    report: dict[str, Any] = {
        "namespace_prefix": run.cluster.lan.prefix,
        "settings": {
            "nemeses": list(names),
            "cycles": cycles,
            "session_timeout": settings.session_timeout,
            "link_heartbeat_interval": settings.link_heartbeat_interval,
            "rate": settings.rate,
            "via_vip": settings.via_vip,
            "amqp10": settings.amqp10,
        },
        "cycles": [r.fields() for r in results],
        "summary": summary(results),
    }
    (workdir / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    out(table(results))
    out(verdict(results))
    ok = results and all(r.ok for r in results) and len(results) == cycles * len(names)
    return ExitStatus.SUCCESS if ok else ExitStatus.ERROR
