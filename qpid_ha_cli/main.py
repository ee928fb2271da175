"""``qpid-ha``: the operator's command line for a broker's HA status.

It talks to a broker's management API (``-b host:port``): ``ping``; ``status`` (with
``--expect``, ``--is-primary``, ``--all``); ``query``; ``ready``;
``replicate QUEUE REMOTE_BROKER``; ``in-sync`` (the primary's in-sync set; ``--commit``
is the cluster manager's); and ``promote``, which, as in Qpid, is a cluster-manager command
refused without ``--cluster-manager``. ``drill`` runs a fail-over drill (``--nemesis``: on
a cluster of its own in network namespaces). ``vhosts list|add|delete`` manages the
broker's virtual hosts (:mod:`qpid_ha_cli.vhosts`); ``definitions export|import`` its
definitions in RabbitMQ's JSON (:mod:`qpid_ha_cli.definitions`).

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
from typer._click.exceptions import ClickException, NoArgsIsHelpError
from typer.core import TyperGroup
from typer.exceptions import Abort

from broker.management.client import ManagementError
from common.exit_status import CommandError, ExitStatus
from common.url import parse_url
from common.version import version_line
from qpid_ha_cli import (
    acl,
    admin,
    check,
    cluster_store,
    definitions,
    manage,
    store_backup,
    users,
    vhosts,
)
from qpid_ha_cli.command_line import (
    OwnOptionsCommand,
    format_params,
    hoist_global_options,
    usage_line,
)
from qpid_ha_cli.context import (
    DEFAULT_MGMT_PORT,
    CliSettings,
    Environment,
    environment,
    with_default_credentials,
)
from qpid_ha_cli.drill.command import drill

if TYPE_CHECKING:  # typer's vendored click: the type TyperGroup.invoke takes
    from collections.abc import Sequence

    from typer._click import Context, HelpFormatter

    from ha_agent.zk_auth import ZkAuth
    from ha_agent.zk_tls import ZkTls

__all__ = ["DEFAULT_MGMT_PORT", "ExitStatus", "QpidHaGroup", "app", "exit_status_of", "main"]

PROGRAM = "qpid-ha"
#: Commands that name themselves in their error lines (the drill was a program of its own).
ERROR_PREFIX = {"drill": "qpid-ha drill"}

#: What the commands raise on purpose; anything else is a bug and keeps its traceback
#: (:class:`~qpid_ha_cli.cluster_view.ClusterViewError`, ZooKeeper or the cluster not there,
#: is a CommandError that exits 3).
CommandFailure = CommandError | ManagementError


def exit_status_of(error: CommandFailure) -> ExitStatus:
    """The one mapping of qpid-ha's errors to exit codes."""
    if isinstance(error, CommandError):
        return error.status
    return ExitStatus.UNREACHABLE if error.unreachable else ExitStatus.ERROR


class QpidHaGroup(TyperGroup):
    """qpid-ha's root group: runs the command and turns its failure into one line on the
    environment's stderr, ``PROGRAM: error: MESSAGE``, and its exit code (httpie's
    ``raw_main``). Click's usage errors become one line and exit 2 as well
    (:func:`~qpid_ha_cli.command_line.usage_line`); global options given after the verb
    are read as if given before it (:func:`~qpid_ha_cli.command_line.hoist_global_options`).
    """

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        given = sys.argv[1:] if args is None else list(args)
        given = hoist_global_options(given, list(self.commands))
        if not standalone_mode:
            return super().main(given, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(given, prog_name, complete_var, False, **extra)
        except NoArgsIsHelpError as error:
            typer.echo(error.ctx.get_help() if error.ctx is not None else "")
            sys.exit(ExitStatus.USAGE)
        except ClickException as error:
            program = prog_name or PROGRAM
            ctx = getattr(error, "ctx", None)
            verb = ctx.info_name if ctx is not None and ctx.parent is not None else None
            program = ERROR_PREFIX.get(verb or "", program)
            env = environment(ctx) if ctx is not None else Environment()
            named = next((a for a in given if a in self.commands), None)
            path = f"{prog_name or PROGRAM}{f' {named}' if named else ''}"
            env.err(usage_line(error, program, path))
            sys.exit(error.exit_code)
        except Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(ExitStatus.ERROR)
        sys.exit(code if isinstance(code, int) else ExitStatus.SUCCESS)

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        format_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (CommandError, ManagementError) as error:
            prefix = ERROR_PREFIX.get(ctx.invoked_subcommand or "", PROGRAM)
            environment(ctx).err(f"{prefix}: error: {error}")
            raise typer.Exit(exit_status_of(error)) from None


app = typer.Typer(
    cls=QpidHaGroup,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help, wrapped to the terminal, never cut at 80 columns
    help="Check and manage qpidd brokers (Qpid's qpid-ha verbs). Exit codes: 0 done, 1 the"
    " check did not hold or the broker refused, 2 bad usage, 3 broker or ZooKeeper"
    " unreachable.",
)
app.command(cls=OwnOptionsCommand)(drill)  # qpid-ha drill: qpid_ha_cli/drill/
app.add_typer(check.app)  # ping, status, query, ready
app.add_typer(manage.app)  # promote, in-sync, replicate
app.add_typer(admin.app)  # connections, disconnect, stop-member
app.add_typer(users.app)  # users add|delete|list|passwd|roles: the users file
app.add_typer(acl.app)  # acl show|reload
app.add_typer(vhosts.app)  # vhosts list|add|delete
app.add_typer(definitions.app)  # definitions export|import: RabbitMQ's JSON
app.add_typer(cluster_store.app)  # shutdown --all, store status|mark-clean DIR
app.add_typer(store_backup.app)  # backup --to DIR, restore DIR --data-dir D


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line(PROGRAM))
        raise typer.Exit(ExitStatus.SUCCESS)


@app.callback()
def main_options(
    ctx: typer.Context,
    broker: Annotated[
        str,
        typer.Option(
            "-b",
            "--broker",
            metavar="ADDRESS",
            help="management address of the broker, [user/password@]host[:port] (port"
            f" {DEFAULT_MGMT_PORT}, user guest/guest when not given); connections --all and"
            " stop-member take a comma-separated list of members",
        ),
    ] = f"localhost:{DEFAULT_MGMT_PORT}",
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", min=0.001, metavar="SECONDS", help="seconds to wait for an answer"
        ),
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
        typer.Option(
            "--zk",
            metavar="HOSTS",
            help="ZooKeeper ensemble: status --all from the agents' records (default: none,"
            " ask the broker)",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            metavar="NAME",
            help="cluster name (with --zk; default: status --all shows every cluster)",
        ),
    ] = None,
    zk_auth: Annotated[
        str | None,
        typer.Option(
            "--zk-auth",
            envvar="QPID_HA_ZK_AUTH",
            metavar="USER:PASSWORD|@FILE",
            help="with --zk: the agents' ZooKeeper digest (their --zk-auth)",
        ),
    ] = None,
    zk_ssl: Annotated[
        bool, typer.Option("--zk-ssl", help="with --zk: TLS to ZooKeeper (its secureClientPort)")
    ] = False,
    zk_ssl_ca_file: Annotated[
        str | None,
        typer.Option(
            "--zk-ssl-ca-file",
            envvar="QPID_HA_ZK_SSL_CA_FILE",
            metavar="FILE",
            help="CA (PEM) ZooKeeper's certificate is checked against; implies --zk-ssl",
        ),
    ] = None,
    zk_ssl_cert_file: Annotated[
        str | None,
        typer.Option("--zk-ssl-cert-file", metavar="FILE", help="client certificate (PEM)"),
    ] = None,
    zk_ssl_key_file: Annotated[
        str | None,
        typer.Option("--zk-ssl-key-file", metavar="FILE", help="its private key (PEM)"),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="print qpid-ha's version (the broker's release) and exit",
        ),
    ] = False,
) -> None:
    try:
        url = parse_url(broker, default_port=DEFAULT_MGMT_PORT)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'-b' / '--broker'") from exc
    if len(url.addresses) != 1 and ctx.invoked_subcommand not in admin.MEMBER_LIST_VERBS:
        raise typer.BadParameter(
            f"expected one broker address, got {len(url.addresses)}",
            param_hint="'-b' / '--broker'",
        )
    if cluster is not None and zk is None:
        raise typer.BadParameter("--cluster needs --zk", param_hint="'--cluster'")
    auth, tls = _zk_options(zk_auth, zk_ssl, zk_ssl_ca_file, zk_ssl_cert_file, zk_ssl_key_file)
    given = ctx.obj if isinstance(ctx.obj, Environment) else Environment()
    ctx.obj = CliSettings(
        broker=with_default_credentials(url),
        timeout=timeout,
        cluster_manager=cluster_manager,
        zk=zk,
        cluster=cluster,
        zk_auth=auth,
        zk_tls=tls,
        env=given,
    )


def _zk_options(
    zk_auth: str | None,
    zk_ssl: bool,
    ca_file: str | None,
    cert_file: str | None,
    key_file: str | None,
) -> tuple[ZkAuth | None, ZkTls | None]:
    """``--zk-auth`` and ``--zk-ssl*`` parsed; the agent's ZooKeeper modules (kazoo, ssl)
    are imported only when one is given, not at every qpid-ha start."""
    auth = tls = None
    if zk_auth:
        from ha_agent.zk_auth import parse_zk_auth

        try:
            auth = parse_zk_auth(zk_auth)  # never echoes the password
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--zk-auth'") from None
    if zk_ssl or ca_file or cert_file or key_file:
        from ha_agent.zk_tls import zk_tls

        try:
            tls = zk_tls(zk_ssl, ca_file, cert_file, key_file)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--zk-ssl'") from None
    return auth, tls


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(ExitStatus.INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    main()
