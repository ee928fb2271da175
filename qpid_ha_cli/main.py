"""``qpid-ha``: the operator's command line for a broker's HA status.

It talks to a broker's management API (``-b host:port``): ``ping``; ``status`` (with
``--expect``, ``--is-primary``, ``--all``); ``query``; ``ready``;
``replicate QUEUE REMOTE_BROKER``; and ``promote``, which, as in Qpid, is a
cluster-manager command refused without ``--cluster-manager``.

Exit codes (one place, :class:`ExitStatus`): 0 success, 1 the expectation did not hold,
2 bad usage, 3 the broker is unreachable.
"""

from __future__ import annotations

import json
import sys
from enum import IntEnum
from typing import Annotated, Any

import typer

from broker.management.client import ManagementClient, ManagementError
from common.url import BrokerUrl, parse_url
from qpid_ha_cli.cluster_view import ClusterViewError, format_cluster, read_cluster
from qpid_ha_cli.drill import drill

DEFAULT_MGMT_PORT = 8672


class ExitStatus(IntEnum):
    SUCCESS = 0
    ERROR = 1
    USAGE = 2
    UNREACHABLE = 3


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Check and manage qpidd brokers (Qpid's qpid-ha verbs).",
)
app.command()(drill)  # qpid-ha drill: qpid_ha_cli/drill.py


class Settings:
    broker: BrokerUrl
    timeout: float = 10.0
    cluster_manager: bool = False
    zk: str | None = None
    cluster: str | None = None


settings = Settings()


def _fail(message: str, code: ExitStatus) -> typer.Exit:
    typer.echo(f"qpid-ha: error: {message}", err=True)
    return typer.Exit(int(code))


def _get(path: str, body: dict[str, Any] | None = None) -> Any:
    client = ManagementClient(settings.broker, settings.timeout)
    try:
        return client.call(path, body)
    except ManagementError as exc:
        code = ExitStatus.UNREACHABLE if exc.unreachable else ExitStatus.ERROR
        raise _fail(str(exc), code) from exc


@app.callback()
def main_options(
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
    settings.broker = url
    settings.timeout = timeout
    settings.cluster_manager = cluster_manager
    if (zk is None) != (cluster is None):
        raise typer.BadParameter("--zk and --cluster go together", param_hint="'--zk'")
    settings.zk, settings.cluster = zk, cluster


@app.command()
def ping() -> None:
    """Check that the broker answers; exit 0 when it does."""
    _get("/api/status")


PRIMARY_STATES = ("active", "recovering")


@app.command()
def status(
    expect: Annotated[
        str | None,
        typer.Option(
            "--expect",
            help="exit 1 unless in this state; 'primary' means active or recovering",
        ),
    ] = None,
    is_primary: Annotated[
        bool, typer.Option("--is-primary", help="exit 1 unless the broker is the primary")
    ] = False,
    show_all: Annotated[
        bool, typer.Option("--all", help="show every member of the cluster")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Print the broker's HA state (and with --all, every member's).

    With --zk and --cluster, --all shows the cluster as the agents record it in ZooKeeper:
    members, states, epochs, the primary and the virtual IP owner.
    """
    if settings.zk is not None and settings.cluster is not None:
        if not show_all:
            raise _fail("with --zk, use status --all", ExitStatus.USAGE)
        _zk_status(settings.zk, settings.cluster, as_json)
        return
    data = _get("/api/status")
    state = str(data.get("ha_state", "unknown"))
    if show_all:
        ha = _get("/api/ha") if state != "standalone" else {}
        members = list(ha.get("members") or [])
        if as_json:
            typer.echo(json.dumps(members, indent=2, sort_keys=True))
        else:
            typer.echo(f"{'ADDRESS':<28} {'STATE':<12} ID")
            for member in members:
                typer.echo(f"{member['url']:<28} {member['state']:<12} {member['id']}")
            if ha.get("public_url"):
                typer.echo(f"public URL (for clients): {ha['public_url']}")
    elif as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        typer.echo(state)
    wanted = "primary" if is_primary else expect
    if wanted is not None:
        holds = state in PRIMARY_STATES if wanted == "primary" else state == wanted
        if not holds:
            raise typer.Exit(int(ExitStatus.ERROR))


def _zk_status(hosts: str, cluster: str, as_json: bool) -> None:
    try:
        view = read_cluster(hosts, cluster, settings.timeout)
    except ValueError as exc:
        raise _fail(str(exc), ExitStatus.USAGE) from exc
    except ClusterViewError as exc:
        raise _fail(str(exc), ExitStatus.UNREACHABLE) from exc
    if as_json:
        typer.echo(json.dumps(view, indent=2, sort_keys=True))
    else:
        for line in format_cluster(view):
            typer.echo(line)


@app.command()
def query(
    show_all: Annotated[bool, typer.Option("--all", help="include every member")] = False,
) -> None:
    """Print the broker's HA status in detail (JSON)."""
    data = _get("/api/ha")
    if not show_all:
        data = {k: v for k, v in data.items() if k != "members"}
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


@app.command()
def ready() -> None:
    """Exit 0 for a ready backup or a primary, 1 otherwise."""
    state = str(_get("/api/status").get("ha_state", ""))
    typer.echo(state)
    if state not in ("ready", *PRIMARY_STATES):
        raise typer.Exit(int(ExitStatus.ERROR))


@app.command()
def promote(
    epoch: Annotated[
        int | None, typer.Option("--epoch", min=0, help="fencing epoch of this promotion")
    ] = None,
) -> None:
    """Promote the broker to primary. Cluster managers only: needs --cluster-manager.

    Promoting by hand can create two primaries, which loses data: leave it to the cluster
    manager (qpid-ha-agent, Pacemaker).
    """
    if not settings.cluster_manager:
        raise _fail(
            "promote is a cluster-manager command: only the cluster resource manager should"
            " run it (add --cluster-manager if you are one)",
            ExitStatus.USAGE,
        )
    body: dict[str, Any] = {"cluster_manager": True}
    if epoch is not None:
        body["epoch"] = epoch
    answer = _get("/api/ha/promote", body)
    typer.echo(f"{answer.get('state')} (epoch {answer.get('epoch')})")


@app.command()
def replicate(
    queue: Annotated[str, typer.Argument(help="the queue to copy")],
    remote_broker: Annotated[
        str, typer.Argument(help="AMQP address host:port of the broker that has it")
    ],
) -> None:
    """Replicate QUEUE from REMOTE_BROKER to this broker, outside a cluster.

    Both brokers need ha-queue-replication=yes.
    """
    answer = _get("/api/ha/replicate", {"queue": queue, "broker": remote_broker})
    typer.echo(f"replicating {answer.get('queue')} from {answer.get('remote')}")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
