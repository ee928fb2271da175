"""``qpid-ha``: the operator's command line for a broker's HA status.

It talks to a broker's management API (``-b host:port``): ``ping``; ``status`` (with
``--expect``, ``--is-primary``, ``--all``); ``query``; ``ready``;
``replicate QUEUE REMOTE_BROKER``; ``in-sync`` (the primary's in-sync set; ``--commit``
is the cluster manager's); and ``promote``, which, as in Qpid, is a cluster-manager command
refused without ``--cluster-manager``. ``drill`` runs a fail-over drill (``--nemesis``: on
a cluster of its own in network namespaces).

The verbs live in one module per group, each with its own ``typer.Typer()`` joined here
with ``add_typer``: :mod:`qpid_ha_cli.check` (ping, status, query, ready),
:mod:`qpid_ha_cli.manage` (promote, in-sync, replicate) and :mod:`qpid_ha_cli.drill.command`. The
global options become a :class:`~qpid_ha_cli.context.CliSettings` in ``ctx.obj``; tests
pass an :class:`~qpid_ha_cli.context.Environment` (streams, client factories) as ``obj``.

Exit codes (:class:`common.exit_status.ExitStatus`, mapped from errors in one place,
:func:`exit_status_of` called by :class:`QpidHaGroup`): 0 success, 1 the expectation did
not hold or the broker refused, 2 bad usage, 3 the broker (or ZooKeeper) is unreachable.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from broker.management.client import ManagementError
from common.exit_status import CommandError, ExitStatus
from common.url import parse_url
from qpid_ha_cli import check, manage, users
from qpid_ha_cli.cluster_view import ClusterViewError
from qpid_ha_cli.context import CliSettings, Environment, environment
from qpid_ha_cli.drill.command import drill

if TYPE_CHECKING:  # typer's vendored click: the type TyperGroup.invoke takes
    from typer._click import Context

__all__ = ["DEFAULT_MGMT_PORT", "ExitStatus", "QpidHaGroup", "app", "exit_status_of", "main"]

DEFAULT_MGMT_PORT = 8672
PROGRAM = "qpid-ha"
#: Commands that name themselves in their error lines (the drill was a program of its own).
ERROR_PREFIX = {"drill": "qpid-ha drill"}

#: What the commands raise on purpose; anything else is a bug and keeps its traceback.
CommandFailure = CommandError | ManagementError | ClusterViewError


def exit_status_of(error: CommandFailure) -> ExitStatus:
    """The one mapping of qpid-ha's errors to exit codes."""
    if isinstance(error, CommandError):
        return error.status
    if isinstance(error, ManagementError):
        return ExitStatus.UNREACHABLE if error.unreachable else ExitStatus.ERROR
    return ExitStatus.UNREACHABLE  # ClusterViewError: ZooKeeper or the cluster not there


class QpidHaGroup(TyperGroup):
    """qpid-ha's root group: runs the command and turns its failure into one line on the
    environment's stderr, ``PROGRAM: error: MESSAGE``, and its exit code (httpie's
    ``raw_main``). Click's own usage errors and ``typer.Exit`` pass through untouched."""

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (CommandError, ManagementError, ClusterViewError) as error:
            prefix = ERROR_PREFIX.get(ctx.invoked_subcommand or "", PROGRAM)
            environment(ctx).err(f"{prefix}: error: {error}")
            raise typer.Exit(exit_status_of(error)) from None


app = typer.Typer(
    cls=QpidHaGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Check and manage qpidd brokers (Qpid's qpid-ha verbs).",
)
app.command()(drill)  # qpid-ha drill: qpid_ha_cli/drill/
app.add_typer(check.app)  # ping, status, query, ready
app.add_typer(manage.app)  # promote, replicate
app.add_typer(users.app)  # users add|delete|list|passwd|roles: the users file


@app.callback()
def main_options(
    ctx: typer.Context,
    broker: Annotated[
        str,
        typer.Option(
            "-b",
            "--broker",
            help="management address of the broker, \\[user/password@]host\\[:port]",
        ),
    ] = f"localhost:{DEFAULT_MGMT_PORT}",
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.001, help="seconds to wait for an answer")
    ] = 10.0,
    cluster_manager: Annotated[
        bool,
        typer.Option(
            "--cluster-manager",
            help="allow cluster-manager commands (promote); for the resource manager only",
        ),
    ] = False,
    zk: Annotated[
        str | None,
        typer.Option("--zk", help="ZooKeeper ensemble: status --all from the agents' records"),
    ] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="cluster name (with --zk)")
    ] = None,
) -> None:
    try:
        url = parse_url(broker, default_port=DEFAULT_MGMT_PORT)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'-b' / '--broker'") from exc
    if len(url.addresses) != 1:
        raise typer.BadParameter(
            f"expected one broker address, got {len(url.addresses)}",
            param_hint="'-b' / '--broker'",
        )
    if (zk is None) != (cluster is None):
        raise typer.BadParameter("--zk and --cluster go together", param_hint="'--zk'")
    given = ctx.obj if isinstance(ctx.obj, Environment) else Environment()
    ctx.obj = CliSettings(
        broker=url,
        timeout=timeout,
        cluster_manager=cluster_manager,
        zk=zk,
        cluster=cluster,
        env=given,
    )


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(ExitStatus.INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    main()
