"""The verbs of ``qpid-ha`` that change a broker: ``promote`` (cluster managers only, as in
Qpid), ``in-sync`` (shows the primary's in-sync set; ``--commit`` is the cluster manager's)
and ``replicate``.

Contract
========

- Each is one POST on the broker's management API; the answer is printed in one line on
  the environment's stdout (:mod:`qpid_ha_cli.context`).
- ``promote`` and ``in-sync --commit`` without the global ``--cluster-manager`` are refused
  before any call: USAGE 2.
  Every failure is raised and mapped to its exit code and one line in
  :mod:`qpid_ha_cli.main`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from common.exit_status import CommandError, ExitStatus
from qpid_ha_cli.context import settings

__all__ = ["app"]

app = typer.Typer()


@app.command()
def promote(
    ctx: typer.Context,
    epoch: Annotated[
        int | None, typer.Option("--epoch", min=0, help="fencing epoch of this promotion")
    ] = None,
) -> None:
    """Promote the broker to primary. Cluster managers only: needs --cluster-manager.

    Promoting by hand can create two primaries, which loses data: leave it to the cluster
    manager (qpid-ha-agent, Pacemaker).
    """
    s = settings(ctx)
    if not s.cluster_manager:
        raise CommandError(
            "promote is a cluster-manager command: only the cluster resource manager should"
            " run it (add --cluster-manager if you are one)",
            ExitStatus.USAGE,
        )
    body: dict[str, Any] = {"cluster_manager": True}
    if epoch is not None:
        body["epoch"] = epoch
    answer = s.call("/api/ha/promote", body)
    s.env.out(f"{answer.get('state')} (epoch {answer.get('epoch')})")


@app.command("in-sync")
def in_sync(
    ctx: typer.Context,
    commit: Annotated[
        bool,
        typer.Option(
            "--commit",
            help="commit the primary's in-sync set without the backups that went away,"
            " releasing the confirms held for them (cluster managers only)",
        ),
    ] = False,
) -> None:
    """Show the primary's in-sync set: backups in sync, and those gone whose confirms wait.

    A backup that goes away while in sync keeps its publishers' confirms held until the
    cluster manager commits its removal: qpid-ha-agent does it in ZooKeeper by itself. A
    cluster run without agents commits with --commit, only once the backups that went
    away can no longer be promoted (stopped, or known to be behind).
    """
    s = settings(ctx)
    if commit and not s.cluster_manager:
        raise CommandError(
            "in-sync --commit is a cluster-manager command: committing the removal of a"
            " backup that may still be promoted loses confirmed messages (add"
            " --cluster-manager if you are the cluster manager)",
            ExitStatus.USAGE,
        )
    ha = s.call("/api/ha")
    in_sync = ha.get("in_sync")
    if not isinstance(in_sync, dict):
        raise CommandError(
            f"this broker is not the primary ({ha.get('state')}): the in-sync set is a"
            " primary's; ask the primary",
            ExitStatus.ERROR,
        )
    urls = {b.get("id"): b.get("url") for b in ha.get("backups") or []}

    def names(ids: list[str]) -> str:
        return ", ".join(f"{urls.get(i) or '?'} ({i})" for i in ids) or "none"

    if commit:
        body = {"cluster_manager": True, "epoch": ha.get("epoch"), "members": in_sync["wanted"]}
        answer = s.call("/api/ha/in-sync", body)
        s.env.out(f"released: {names(list(answer.get('released') or []))}")
        return
    s.env.out(f"in sync: {names(list(in_sync.get('wanted') or []))}")
    s.env.out(f"waiting for removal: {names(list(in_sync.get('pending_removal') or []))}")


@app.command()
def replicate(
    ctx: typer.Context,
    queue: Annotated[str, typer.Argument(help="the queue to copy")],
    remote_broker: Annotated[
        str, typer.Argument(help="AMQP address host:port of the broker that has it")
    ],
) -> None:
    """Replicate QUEUE from REMOTE_BROKER to this broker, outside a cluster.

    Both brokers need ha-queue-replication=yes.
    """
    s = settings(ctx)
    answer = s.call("/api/ha/replicate", {"queue": queue, "broker": remote_broker})
    s.env.out(f"replicating {answer.get('queue')} from {answer.get('remote')}")
