"""``qpid-ha drill``: the typer command. It turns the options into
:class:`~qpid_ha_cli.drill.settings.DrillSettings`, sets up logging, runs a
:class:`~qpid_ha_cli.drill.run.DrillRun` and reports its check in one line on stdout.

Contract
========

- Exit codes (:class:`common.exit_status.ExitStatus`, as every qpid-ha command): SUCCESS 0
  nothing confirmed was lost; ERROR 1 something confirmed was lost; USAGE 2 a bad option or
  value; UNREACHABLE 3 no broker of the list could be reached.
- Failures are raised as :class:`common.exit_status.CommandError`; qpid-ha's one error
  handler (:mod:`qpid_ha_cli.main`) prints them as one line, ``qpid-ha drill: error: ...``,
  on stderr.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from common.exit_status import CommandError, ExitStatus
from qpid_ha_cli.context import environment
from qpid_ha_cli.drill.core import DrillCheck
from qpid_ha_cli.drill.settings import DrillSettings, UsageError, settings_from_options

# The drill's I/O shell (pika, Proton) and logging (structlog) are imported when a drill
# runs, not at every qpid-ha start (an OCF monitor runs one or two): tests/test_start_up.py.
if TYPE_CHECKING:
    from qpid_ha_cli.drill.run import DrillRun

__all__ = ["ExitStatus", "drill"]


def drill(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            metavar="URL_LIST",
            help="fail-over URL list: amqp:guest/guest@h1:5672,h2:5672 (or the AMQP URI "
            "form amqp://guest:guest@h1:5672,h2:5672/vhost)",
        ),
    ] = None,
    broker: Annotated[
        list[str] | None,
        typer.Option(
            "--broker",
            metavar="ADDRESS",
            help="a broker address [user/password@]host[:port]; repeat for each",
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="queue to use (default: a new one, deleted at the end if empty)"
        ),
    ] = None,
    queue_type: Annotated[
        str | None,
        typer.Option(
            metavar="TYPE",
            help="the queue's x-queue-type, classic or quorum (RabbitMQ's quorum queues)",
        ),
    ] = None,
    rate: Annotated[
        str,
        typer.Option(
            metavar="PER_SECOND",
            help="messages per second, at most (one message awaits its confirm at a time);"
            " 0: as fast as confirms allow",
        ),
    ] = "100",
    duration: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="publish for this long: 10, 2.5s, 500ms (default 10 s without --count)",
        ),
    ] = None,
    count: Annotated[
        str | None, typer.Option(metavar="N", help="publish until this many messages are confirmed")
    ] = None,
    gap_threshold: Annotated[
        str,
        typer.Option(
            metavar="DURATION", help="log a confirm_gap when waiting for a confirm longer than this"
        ),
    ] = "50ms",
    drain_timeout: Annotated[
        str,
        typer.Option(
            metavar="DURATION", help="after publishing, wait this long for every confirmed message"
        ),
    ] = "30",
    connect_timeout: Annotated[
        str,
        typer.Option(metavar="DURATION", help="try the URL list this long to connect or reconnect"),
    ] = "30",
    node: Annotated[
        str, typer.Option(metavar="NAME", help="the node field of the drill's log events")
    ] = "drill",
    cluster: Annotated[
        str | None, typer.Option(metavar="NAME", help="the cluster field of the drill's log events")
    ] = None,
    scenario: Annotated[
        str | None,
        typer.Option(metavar="LABEL", help="a label for this run, logged on drill_started"),
    ] = None,
    log_file: Annotated[
        str | None,
        typer.Option(metavar="FILE", help="append JSON events to this file (default: stderr)"),
    ] = None,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="debug, info, warning, error")
    ] = "info",
    log_format: Annotated[str, typer.Option(metavar="FORMAT", help="json or console")] = "json",
    nemesis: Annotated[
        str | None,
        typer.Option(
            metavar="LIST",
            help="build a local cluster in network namespaces (root) and run these faults"
            " under the drill: kill,kill-node,pause,pause-node,partition,stale-backup,zk-loss,"
            " zk-server,zk-ensemble",
        ),
    ] = None,
    cycles: Annotated[int, typer.Option(metavar="N", help="with --nemesis: rounds")] = 1,
    session_timeout: Annotated[
        float, typer.Option(metavar="SECONDS", help="with --nemesis: the agents' setting")
    ] = 4.0,
    link_heartbeat_interval: Annotated[
        float, typer.Option(metavar="SECONDS", help="with --nemesis: the brokers' setting")
    ] = 1.0,
    work_dir: Annotated[
        str | None, typer.Option(metavar="DIR", help="with --nemesis: logs and results here")
    ] = None,
    via_vip: Annotated[
        bool, typer.Option(help="with --nemesis: clients use the virtual IP, not the URL list")
    ] = False,
    amqp10: Annotated[
        bool,
        typer.Option(
            "--amqp10",
            help="also an AMQP 1.0 publisher and consumer (Proton) beside the 0-9-1 ones, on"
            " the queue NAME.amqp10; the check covers both (with --nemesis too)",
        ),
    ] = False,
) -> None:
    """Run a fail-over drill: publish with confirms and consume over the URL list, log every
    gap, then check sent, confirmed, received, lost, duplicated. Exit 1 if anything
    confirmed was lost, 3 if no broker could be reached. With --nemesis: see
    qpid_ha_cli/nemesis/ (root; exit 1 on a loss or two primaries, 2 if a tool is missing)."""
    if nemesis is not None:
        from qpid_ha_cli.nemesis.command import run_nemesis

        status = run_nemesis(
            environment(ctx).out,
            nemesis,
            cycles,
            session_timeout,
            link_heartbeat_interval,
            float(_rate_or_usage(rate)),
            work_dir,
            via_vip,
            amqp10,
        )
        if status is not ExitStatus.SUCCESS:
            raise typer.Exit(status)
        return
    from common.log import configure_logging, set_log_context
    from qpid_ha_cli.drill.run import DrillRun

    try:
        settings = settings_from_options(
            url,
            broker or [],
            queue,
            rate,
            duration,
            count,
            gap_threshold,
            drain_timeout,
            connect_timeout,
            scenario,
            queue_type,
        )
        configure_logging(
            level=log_level,
            fmt=log_format,
            file=log_file,
            node=node,
            component="drill",
            cluster=cluster,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"--log-file: {exc.strerror or exc}: {log_file}") from None
    try:
        run = DrillRun(settings)
        run10 = DrillRun(amqp10_settings(settings), protocol="1.0") if amqp10 else None
    except ImportError as exc:
        raise UsageError(f"the drill needs pika and python-qpid-proton: {exc}") from None
    set_log_context(run_id=run.run_id)  # on every line: runs are told apart by it
    checks = run_beside(run, run10, settings)
    out = environment(ctx).out
    for protocol, check in checks:
        out(check.line() if protocol == "0-9-1" else f"AMQP 1.0 {check.line()}")
    if not all(check.ok for _, check in checks):
        raise typer.Exit(ExitStatus.ERROR)


def amqp10_settings(settings: DrillSettings) -> DrillSettings:
    """The 1.0 pair's settings: the same, on the queue ``NAME.amqp10``."""
    return dataclasses.replace(settings, queue=f"{settings.queue}.amqp10")


def run_beside(
    run: DrillRun, run10: DrillRun | None, settings: DrillSettings
) -> list[tuple[str, DrillCheck]]:
    """Run the 0-9-1 drill and, when given, the 1.0 one at the same time (the 1.0 one in a
    thread); their checks, 0-9-1 first. :raises CommandError: unreachable, failed."""
    from qpid_ha_cli.drill.run import Unreachable, WorkerFailed

    results: dict[str, DrillCheck | BaseException] = {}

    def run_10() -> None:
        assert run10 is not None
        try:
            results["1.0"] = run10.run()
        except (Unreachable, WorkerFailed) as exc:
            results["1.0"] = exc

    thread = threading.Thread(target=run_10, name="drill-amqp10", daemon=True)
    if run10 is not None:
        thread.start()
    try:
        results["0-9-1"] = run.run()
    except (Unreachable, WorkerFailed) as exc:
        results["0-9-1"] = exc
    if run10 is not None:
        thread.join()
    checks: list[tuple[str, DrillCheck]] = []
    for protocol in ("0-9-1", "1.0"):
        found = results.get(protocol)
        if isinstance(found, Unreachable):
            raise CommandError(
                f"no broker of {settings.url.redacted()} could be reached: {found}",
                ExitStatus.UNREACHABLE,
            )
        if isinstance(found, WorkerFailed):
            raise CommandError(f"drill FAILED: {found}", ExitStatus.ERROR)
        if isinstance(found, DrillCheck):
            checks.append((protocol, found))
    return checks


def _rate_or_usage(rate: str) -> float:
    try:
        value = float(rate)
    except ValueError:
        raise UsageError(f"--rate: expected a number, got {rate!r}") from None
    if not value >= 0:
        raise UsageError(f"--rate: must be >= 0, got {rate!r}")
    return value
