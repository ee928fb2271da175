"""The verbs of ``qpid-ha`` that change a broker: ``promote`` (cluster managers only, as in
Qpid), ``in-sync`` (shows the primary's in-sync set; ``--commit`` is the cluster manager's)
and ``replicate``.

A cluster manager that keeps the in-sync set itself (the OCF agent keeps it in Pacemaker's
CIB) reads it with ``in-sync --ids``, commits exactly the set it stored with ``in-sync
--commit --members ID,... --epoch E`` and promotes with ``promote --in-sync ID,...``.
Broker ids on the command line are comma separated; ``''`` is the empty set.

Contract
========

- Each is one POST on the broker's management API; the answer is printed in one line on
  the environment's stdout (:mod:`qpid_ha_cli.context`).
- A broker a qpid-ha-agent manages refuses ``promote`` (HTTP 409, ERROR 1 and the broker's
  reason in one line): its agent promotes it; ``promote --force`` overrides that, for when
  no agent runs any more (``docs/agent.md``).
- ``promote`` and ``in-sync --commit`` without the global ``--cluster-manager`` are refused
  before any call: USAGE 2; so is a bad ``replicate --vhost`` name (empty, too long, a NUL).
  Every failure is raised and mapped to its exit code and one line in
  :mod:`qpid_ha_cli.main`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from common.exit_status import CommandError, ExitStatus
from qpid_ha_cli.command_line import command_settings
from qpid_ha_cli.context import settings

__all__ = ["app"]

app = typer.Typer(rich_markup_mode=None)

#: What a broker id may hold on the command line (a uuid4, as brokers make them): no comma,
#: no white space, so the agents can pass a set as one word or one line.
BROKER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")


def broker_ids(option: str, text: str) -> list[str]:
    """The broker ids of a comma-separated option value, sorted, without duplicates; ``''``
    is the empty set. A bad id is USAGE 2 naming the option."""
    if text == "":
        return []
    ids = text.split(",")
    for item in ids:
        if BROKER_ID.fullmatch(item) is None:
            raise CommandError(
                f"{option}: {item!r} is not a broker id (letters, digits, '.', '_', ':' and"
                " '-', comma separated; '' for none)",
                ExitStatus.USAGE,
            )
    return sorted(set(ids))


@app.command(**command_settings())
def promote(
    ctx: typer.Context,
    epoch: Annotated[
        int | None, typer.Option("--epoch", min=0, help="fencing epoch of this promotion")
    ] = None,
    in_sync: Annotated[
        str | None,
        typer.Option(
            "--in-sync",
            metavar="ID,...",
            help="the committed in-sync set (broker ids, comma separated; '' for none): the"
            " backups the new primary expects and guards",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="promote a broker a qpid-ha-agent manages (it refuses otherwise): only when"
            " no agent runs any more; beside a primary of the agents it makes two primaries",
        ),
    ] = False,
) -> None:
    """Promote the broker to primary. Cluster managers only: needs --cluster-manager.

    Promoting by hand can create two primaries, which loses data: leave it to the cluster
    manager (qpid-ha-agent, Pacemaker). A manager that keeps the in-sync set passes it with
    --in-sync; without it the new primary expects the backups it last saw ready.

    A broker a qpid-ha-agent manages refuses (exit 1): its agent promotes it. --force
    overrides that, for when the agents are all gone: with an agents' primary still
    serving, the two primaries both confirm and confirmed messages can be lost.
    """
    s = settings(ctx)
    if not s.cluster_manager:
        raise CommandError(
            "promote is a cluster-manager command: only the cluster resource manager should"
            " run it (add --cluster-manager if you are one)",
            ExitStatus.USAGE,
        )
    members = None if in_sync is None else broker_ids("--in-sync", in_sync)
    body: dict[str, Any] = {"cluster_manager": True}
    if epoch is not None:
        body["epoch"] = epoch
    if members is not None:
        body["in_sync"] = members
    if force:
        body["force"] = True
    answer = s.call("/api/ha/promote", body)
    s.env.out(f"{answer.get('state')} (epoch {answer.get('epoch')})")


@app.command("in-sync", **command_settings())
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
    members: Annotated[
        str | None,
        typer.Option(
            "--members",
            metavar="ID,...",
            help="with --commit and --epoch: commit exactly this set (broker ids, comma"
            " separated; '' for none), the one the cluster manager has stored",
        ),
    ] = None,
    epoch: Annotated[
        int | None,
        typer.Option("--epoch", min=0, help="with --commit and --members: the set's epoch"),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="with --commit: commit on a broker a qpid-ha-agent manages (refused without:"
            " its agent keeps the set; only when no agent runs any more)",
        ),
    ] = False,
    ids: Annotated[
        bool,
        typer.Option(
            "--ids",
            help="print for scripts: 'EPOCH ID...' (the set the primary wants) and"
            " 'pending ID...' (gone backups whose confirms wait for a committed removal)",
        ),
    ] = False,
) -> None:
    """Show the primary's in-sync set: backups in sync, and those gone whose confirms wait.

    A backup that goes away while in sync keeps its publishers' confirms held until the
    cluster manager commits its removal: qpid-ha-agent does it in ZooKeeper by itself. A
    cluster run without agents commits with --commit, only once the backups that went
    away can no longer be promoted (stopped, or known to be behind). A cluster manager that
    stores the set itself (the OCF agent, in Pacemaker's CIB) commits what it stored:
    --commit --members ID,... --epoch E, so the primary releases only the backups that set
    excludes. A broker a qpid-ha-agent manages refuses a commit by hand (exit 1): its agent
    keeps the set in ZooKeeper; --force overrides, only when no agent runs any more.
    """
    s = settings(ctx)
    given = (members is not None, epoch is not None)
    if any(given) and not all(given):
        raise CommandError("--members and --epoch go together", ExitStatus.USAGE)
    if members is not None and not commit:
        raise CommandError("--members and --epoch are for --commit", ExitStatus.USAGE)
    if force and not commit:
        raise CommandError("--force is for --commit", ExitStatus.USAGE)
    if ids and commit:
        raise CommandError("--ids shows the set; it does not go with --commit", ExitStatus.USAGE)
    chosen = None if members is None else broker_ids("--members", members)
    if commit and not s.cluster_manager:
        raise CommandError(
            "in-sync --commit is a cluster-manager command: committing the removal of a"
            " backup that may still be promoted loses confirmed messages (add"
            " --cluster-manager if you are the cluster manager)",
            ExitStatus.USAGE,
        )
    ha = s.call("/api/ha?queues=summary")
    in_sync = ha.get("in_sync")
    if not isinstance(in_sync, dict):
        raise CommandError(
            f"this broker is not the primary ({ha.get('state')}): the in-sync set is a"
            " primary's; ask the primary",
            ExitStatus.ERROR,
        )
    wanted = [str(i) for i in in_sync.get("wanted") or []]
    pending = [str(i) for i in in_sync.get("pending_removal") or []]
    if ids:
        s.env.out(" ".join([str(ha.get("epoch")), *wanted]))
        s.env.out(" ".join(["pending", *pending]))
        return
    urls = {b.get("id"): b.get("url") for b in ha.get("backups") or []}

    def names(found: list[str]) -> str:
        return ", ".join(f"{urls.get(i) or '?'} ({i})" for i in found) or "none"

    if commit:
        body = {
            "cluster_manager": True,
            "epoch": ha.get("epoch") if epoch is None else epoch,
            "members": wanted if chosen is None else chosen,
        }
        if force:
            body["force"] = True
        answer = s.call("/api/ha/in-sync", body)
        s.env.out(f"released: {names(list(answer.get('released') or []))}")
        return
    s.env.out(f"in sync: {names(wanted)}")
    s.env.out(f"waiting for removal: {names(pending)}")


@app.command(**command_settings())
def replicate(
    ctx: typer.Context,
    queue: Annotated[str, typer.Argument(help="the queue to copy")],
    remote_broker: Annotated[
        str, typer.Argument(help="AMQP address host:port of the broker that has it")
    ],
    vhost: Annotated[
        str,
        typer.Option(
            "--vhost",
            help="the virtual host the queue is in, on both brokers (default /)",
        ),
    ] = "/",
) -> None:
    """Replicate QUEUE from REMOTE_BROKER to this broker, outside a cluster.

    Both brokers need ha-queue-replication=yes; with --vhost the queue of that virtual
    host (which must exist on both) is copied into the same one here.
    """
    from broker.core.vhosts import check_vhost_name  # the broker's core: here, not at start

    try:
        check_vhost_name(vhost)
    except ValueError as exc:
        raise CommandError(f"--vhost: {exc}", ExitStatus.USAGE) from None
    s = settings(ctx)
    answer = s.call("/api/ha/replicate", {"queue": queue, "broker": remote_broker, "vhost": vhost})
    where = "" if answer.get("vhost", "/") == "/" else f" in vhost {answer.get('vhost')}"
    s.env.out(f"replicating {answer.get('queue')}{where} from {answer.get('remote')}")
