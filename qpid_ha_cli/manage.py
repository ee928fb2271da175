"""The verbs of ``qpid-ha`` that change a broker: ``promote`` (cluster managers only, as in
Qpid) and ``replicate``.

Contract
========

- Each is one POST on the broker's management API; the answer is printed in one line on
  the environment's stdout (:mod:`qpid_ha_cli.context`).
- ``promote`` without the global ``--cluster-manager`` is refused before any call: USAGE 2.
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
