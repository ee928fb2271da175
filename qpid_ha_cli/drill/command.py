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

from typing import Annotated

import typer

from common.exit_status import CommandError, ExitStatus
from common.log import configure_logging, set_log_context
from qpid_ha_cli.context import environment
from qpid_ha_cli.drill.run import DrillRun, Unreachable, WorkerFailed
from qpid_ha_cli.drill.settings import UsageError, settings_from_options

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
            " under the drill: kill,kill-node,pause,pause-node,partition,stale-backup,zk-loss",
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
        )
        if status is not ExitStatus.SUCCESS:
            raise typer.Exit(status)
        return
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
    except ImportError as exc:
        raise UsageError(f"the drill needs pika (pip install pika): {exc}") from None
    set_log_context(run_id=run.run_id)  # on every line: runs are told apart by it
    try:
        check = run.run()
    except Unreachable as exc:
        raise CommandError(
            f"no broker of {settings.url.redacted()} could be reached: {exc}",
            ExitStatus.UNREACHABLE,
        ) from None
    except WorkerFailed as exc:
        raise CommandError(f"drill FAILED: {exc}", ExitStatus.ERROR) from None
    environment(ctx).out(check.line())
    if not check.ok:
        raise typer.Exit(ExitStatus.ERROR)


def _rate_or_usage(rate: str) -> float:
    try:
        value = float(rate)
    except ValueError:
        raise UsageError(f"--rate: expected a number, got {rate!r}") from None
    if not value >= 0:
        raise UsageError(f"--rate: must be >= 0, got {rate!r}")
    return value
