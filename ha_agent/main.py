"""``qpid-ha-agent``: the command line of the agent (one per node).

Exit codes (:class:`common.exit_status.ExitStatus`): SUCCESS 0 after SIGTERM/SIGINT or once its
supervised broker stopped for a cluster shutdown; ERROR 1 a ``--designated-primary`` refused (one
line saying why, :mod:`ha_agent.designated`); USAGE 2
for a bad option value (one line naming it), and when ZooKeeper grants a session timeout far
from ``--session-timeout`` (one line naming both, :mod:`ha_agent.session_grant`). Option
errors become exit codes in one place, :func:`run`'s ``except CommandError``; the refused
grant, known only once the agent runs, after its thread ends.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer._click.exceptions import ClickException
from typer.core import TyperCommand

from common.exit_status import CommandError, ExitStatus
from common.log import configure_logging
from common.version import version_line
from ha_agent.agent import Agent
from ha_agent.designated import DesignatedPrimary
from ha_agent.kazoo_log import route_kazoo_logging
from ha_agent.settings import AgentSettings
from ha_agent.vip import parse_vip
from ha_agent.zk_auth import parse_zk_auth
from ha_agent.zk_tls import tls_refusal, zk_tls

PROGRAM = "qpid-ha-agent"


class AgentCommand(TyperCommand):
    """The agent's command: click's usage errors (a missing or unknown option, a value of
    the wrong type) are one line, ``qpid-ha-agent: error: MESSAGE (see 'qpid-ha-agent
    --help')``, and exit 2, as the agent's own checks and ``qpid-ha`` do, not rich's box."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except ClickException as error:
            message = " ".join(error.format_message().split())
            typer.echo(f"{PROGRAM}: error: {message} (see '{PROGRAM} --help')", err=True)
            sys.exit(error.exit_code)
        sys.exit(code if isinstance(code, int) else ExitStatus.SUCCESS)


app = typer.Typer(add_completion=False, rich_markup_mode=None)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line(PROGRAM))
        raise typer.Exit(ExitStatus.SUCCESS)


@app.command(
    cls=AgentCommand,
    help="Elect, promote and fence qpidd brokers of an HA cluster through ZooKeeper.",
)
def run(
    zk: Annotated[str, typer.Option("--zk", help="ZooKeeper ensemble, host:port[,host:port...]")],
    cluster: Annotated[str, typer.Option("--cluster", help="cluster name")],
    node: Annotated[str, typer.Option("--node", help="this node's name in the cluster")],
    broker: Annotated[
        str,
        typer.Option(
            "--broker", help="management address of the local broker, [user/password@]host:port"
        ),
    ],
    broker_command: Annotated[
        str | None,
        typer.Option(
            "--broker-command", help='start and supervise the broker: "qpidd --ha-cluster=yes ..."'
        ),
    ] = None,
    broker_log: Annotated[
        str | None, typer.Option("--broker-log", help="file for the supervised broker's output")
    ] = None,
    session_timeout: Annotated[
        float,
        typer.Option(
            "--session-timeout",
            help="ZooKeeper session timeout, seconds (the servers must grant it)",
        ),
    ] = 4.0,
    check_interval: Annotated[
        float, typer.Option("--check-interval", help="seconds between health checks")
    ] = 0.5,
    cluster_size: Annotated[
        int,
        typer.Option(
            "--cluster-size", help="members to wait for before a new cluster's first promotion"
        ),
    ] = 1,
    vip: Annotated[
        str | None, typer.Option("--vip", help="virtual IP ADDR/PREFIX held by the primary's node")
    ] = None,
    vip_interface: Annotated[
        str | None, typer.Option("--vip-interface", help="interface of the virtual IP")
    ] = None,
    vip_netns: Annotated[
        str | None, typer.Option("--vip-netns", help="network namespace of that interface")
    ] = None,
    watchdog_timeout: Annotated[
        float,
        typer.Option(
            "--watchdog-timeout", help="kill and restart a broker silent this long (0: off)"
        ),
    ] = 10.0,
    broker_timeout: Annotated[
        float,
        typer.Option(
            "--broker-timeout",
            help="how long the primary's broker may leave health checks unanswered (timed"
            " out) before the agent fences it and another node takes over; a refused check"
            " (the broker is gone) fences at once (0: at the first one)",
        ),
    ] = 2.0,
    zk_auth: Annotated[
        str | None,
        typer.Option(
            "--zk-auth",
            envvar="QPID_HA_ZK_AUTH",
            help="ZooKeeper digest USER:PASSWORD or @FILE: the agent's znodes are readable"
            " and writable by that user only",
        ),
    ] = None,
    zk_ssl: Annotated[
        bool,
        typer.Option(
            "--zk-ssl",
            help="TLS to ZooKeeper (--zk names its secureClientPort), checked against the"
            " system's CAs; implied by the --zk-ssl-*-file options",
        ),
    ] = False,
    zk_ssl_ca_file: Annotated[
        str | None,
        typer.Option(
            "--zk-ssl-ca-file",
            envvar="QPID_HA_ZK_SSL_CA_FILE",
            help="CA certificates (PEM) ZooKeeper's certificate is checked against (TLS)",
        ),
    ] = None,
    zk_ssl_cert_file: Annotated[
        str | None,
        typer.Option(
            "--zk-ssl-cert-file",
            envvar="QPID_HA_ZK_SSL_CERT_FILE",
            help="client certificate (PEM) presented to ZooKeeper, with --zk-ssl-key-file",
        ),
    ] = None,
    zk_ssl_key_file: Annotated[
        str | None,
        typer.Option(
            "--zk-ssl-key-file",
            envvar="QPID_HA_ZK_SSL_KEY_FILE",
            help="the client certificate's private key (PEM)",
        ),
    ] = None,
    designated_primary: Annotated[
        bool,
        typer.Option(
            "--designated-primary",
            help="operator's override: run the broker as primary WITHOUT ZooKeeper (no quorum),"
            " refused while a --peer answers as primary; may lose what the peer confirmed"
            " alone (docs/agent.md)",
        ),
    ] = False,
    peer: Annotated[
        str | None,
        typer.Option(
            "--peer",
            help="with --designated-primary: the other brokers' management addresses,"
            " [user/password@]host:port[,...]",
        ),
    ] = None,
    log_file: Annotated[str | None, typer.Option("--log-file", help="JSON log file")] = None,
    log_format: Annotated[str, typer.Option("--log-format", help="json or console")] = "json",
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info ...")] = "info",
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="print the version and exit"
        ),
    ] = False,
) -> None:
    settings = AgentSettings(
        zk_hosts=zk,
        cluster=cluster,
        node=node,
        broker=broker,
        broker_command=broker_command,
        broker_log=broker_log,
        session_timeout=session_timeout,
        check_interval=check_interval,
        cluster_size=cluster_size,
        vip=vip,
        vip_interface=vip_interface,
        vip_netns=vip_netns,
        watchdog_timeout=watchdog_timeout,
        broker_timeout=broker_timeout,
        designated_primary=designated_primary,
        peers=tuple(p.strip() for p in (peer or "").split(",") if p.strip()),
    )
    try:
        settings.zk_auth = parse_zk_auth(zk_auth) if zk_auth else None
        settings.zk_tls = zk_tls(zk_ssl, zk_ssl_ca_file, zk_ssl_cert_file, zk_ssl_key_file)
        # kazoo would retry a refused certificate silently: say it now, in one line
        refusal = None if settings.zk_tls is None else tls_refusal(zk, settings.zk_tls)
        if refusal is not None:
            raise ValueError(refusal)
    except ValueError as exc:  # one line, exit 2, never the password
        typer.echo(f"{PROGRAM}: error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        agent = _agent(settings, log_file=log_file, log_format=log_format, log_level=log_level)
    except CommandError as error:
        typer.echo(f"{PROGRAM}: error: {error}", err=True)
        raise typer.Exit(error.status) from None

    def stop(_signum: int, _frame: object) -> None:
        agent.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    thread = threading.Thread(target=agent.run, name="agent", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
    if isinstance(agent, DesignatedPrimary) and agent.refusal:
        typer.echo(f"{PROGRAM}: error: {agent.refusal}", err=True)
        raise typer.Exit(ExitStatus.ERROR)
    if agent.refusal:  # ZooKeeper's grant is too far from --session-timeout
        typer.echo(f"{PROGRAM}: error: {agent.refusal}", err=True)
        raise typer.Exit(ExitStatus.USAGE)
    raise typer.Exit(ExitStatus.SUCCESS)


def _agent(
    settings: AgentSettings, *, log_file: str | None, log_format: str, log_level: str
) -> Agent | DesignatedPrimary:
    """Check the options, set up logging, make the agent (the designated primary's with
    ``--designated-primary``).

    :raises CommandError: USAGE, one line naming the bad value.
    """
    try:
        settings.check()
        if settings.vip is not None:
            parse_vip(settings.vip)
        configure_logging(
            level=log_level,
            fmt=log_format,
            file=log_file,
            node=settings.node,
            component="agent",
            cluster=settings.cluster,
        )
        route_kazoo_logging()  # kazoo's plain-text lines as rate-limited JSON events
        if settings.designated_primary:
            return DesignatedPrimary(settings)
        return Agent(settings)
    except ValueError as exc:
        raise CommandError(str(exc), ExitStatus.USAGE) from None
    except OSError as exc:
        raise CommandError(
            f"cannot open log file {log_file}: {exc.strerror}", ExitStatus.USAGE
        ) from None


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
