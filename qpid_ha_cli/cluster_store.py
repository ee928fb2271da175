"""``qpid-ha shutdown --all`` (a clean all-stop) and ``qpid-ha store status|mark-clean DIR``
(a store read, or marked clean by hand, without a broker): seed 002's clean shutdown and
manual recovery, the procedures in docs/store.md.

Contract
========

- ``shutdown --all``: stops every member of the ``-b`` broker's cluster (found as
  ``connections --all`` finds them: several ``-b`` addresses, comma separated, else each
  member's host on ``-b``'s port) so that their stores end at the same point, clean, with
  the same new shutdown-id: (1) the primary stops serving clients (``POST /api/ha/shutdown``
  with ``quiesce``: it stops listening and closes every client connection, keeping its
  backups' links); (2) each backup is waited for until it is ready and holds, on every
  durable queue it replicates, what the primary holds, then stopped; (3) the primary is
  stopped. Each stop is ``POST /api/ha/shutdown`` with the shutdown-id (cluster-manager role)
  and waits until that member's management API no longer answers (``--timeout`` each).
  Prints one line a step and the shutdown-id. Refused before anything stops (exit 1): a
  member whose management address is unknown, no primary or more than one. A backup not
  caught up within ``--timeout`` is stopped without the shutdown-id (its store is clean but
  not part of the all-stop) and the command exits 1 after stopping the rest.
- ``store status DIR``: the store's status (``empty``, ``clean``, ``dirty``, or ``in use by
  pid N`` while a broker holds its lock), its store-id, cluster-id and shutdown-id, its
  segments and bytes, and the stores moved aside; ``--json`` as one object. Reads only:
  safe while a broker runs. No such directory: one line, exit 2.
- ``store mark-clean DIR``: the operator's way out when every store is dirty (seed 002's
  manual recovery): marks the stopped store clean with a new shutdown-id, after a warning
  on stderr of what that means. Refused, one line and exit 2: no such directory, not a
  data directory (no store-id), a broker holds its lock. A store clean already is left as
  it is (its shutdown-id is kept: it may be one all-stop's).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

import typer

from broker.management.client import ManagementError
from common.exit_status import CommandError, ExitStatus
from common.polling import PollTimeout, poll_until
from qpid_ha_cli.admin import Member, _call, _members, _unknown, wait_stopped
from qpid_ha_cli.command_line import command_settings
from qpid_ha_cli.context import CliSettings, environment, settings

# The store's modules are imported by the verbs that use them, not at every qpid-ha start
# (an OCF monitor runs one or two): tests/test_start_up.py.
if TYPE_CHECKING:
    from broker.store.data_dir import StoreInfo

__all__ = ["MARK_CLEAN_WARNING", "app"]

app = typer.Typer(rich_markup_mode=None)
store_app = typer.Typer(
    rich_markup_mode=None,
    no_args_is_help=True,
    help="Read a data directory's store, or mark it clean, without a broker.",
)
app.add_typer(store_app, name="store")

_PRIMARY_STATES = ("active", "recovering")

MARK_CLEAN_WARNING = (
    "warning: {dir} is marked clean: a restarted cluster will recover from this store as it"
    " is and prefer it to dirty ones; messages confirmed on another store after this broker"
    " stopped are lost if this one is chosen. Mark only the store you chose as the best"
    " (docs/store.md, manual recovery)."
)


# -- qpid-ha shutdown --all ---------------------------------------------------------------
@app.command("shutdown", **command_settings())
def shutdown(
    ctx: typer.Context,
    all_members: Annotated[
        bool, typer.Option("--all", help="every member of the cluster (required)")
    ] = False,
) -> None:
    """Stop the whole cluster cleanly: every store ends clean with the same shutdown-id.

    The primary first stops serving clients, each backup is stopped once it holds what
    the primary holds, then the primary. A restart can then recover from any of the
    stores. Give every member's management address in -b (comma separated) unless they
    all use -b's port.
    """
    if not all_members:
        raise CommandError(
            "shutdown stops every member of the cluster: add --all (stop-member stops one)",
            ExitStatus.USAGE,
        )
    s = settings(ctx)
    members = _members(s)
    unknown = [m for m in members if m.mgmt is None]
    if unknown:
        raise CommandError("; ".join(_unknown(m) for m in unknown) + ": nothing stopped")
    primaries = [m for m in members if m.state in _PRIMARY_STATES]
    if len(primaries) != 1:
        listed = ", ".join(f"{m.url} ({m.state})" for m in members) or "none"
        raise CommandError(
            f"a clean all-stop needs one primary, found {len(primaries)} (members: {listed}):"
            " nothing stopped"
        )
    primary = primaries[0]
    backups = [m for m in members if m is not primary]
    from broker.store.identity import new_id

    shutdown_id = new_id()
    s.env.out(f"shutdown-id {shutdown_id}")
    answer = _shutdown_call(s, primary, shutdown_id, quiesce=True)
    s.env.out(
        f"{primary.url} (primary) serves no clients now"
        f" ({answer.get('clients_closed', 0)} connections closed)"
    )
    late: list[str] = []
    try:
        for backup in backups:
            if _wait_caught_up(s, primary, backup):
                _stop(s, backup, shutdown_id, "backup")
            else:
                late.append(backup.url)
                s.env.out(f"{backup.url} (backup) did not catch up in {s.timeout:g} s")
                _stop(s, backup, None, "backup, without the shutdown-id")
        _stop(s, primary, shutdown_id, "primary")
    except (CommandError, ManagementError) as exc:
        raise CommandError(
            f"{exc}; the primary {primary.url} serves no clients any more: run shutdown --all"
            " again, or stop-member it and start it again"
        ) from None
    s.env.out(f"stopped {len(members)} brokers; stores clean with shutdown-id {shutdown_id}")
    if late:
        raise CommandError(
            f"not caught up, stopped without the shutdown-id: {', '.join(late)}"
            " (their stores are clean but not part of this all-stop)"
        )


def _shutdown_call(
    s: CliSettings, member: Member, shutdown_id: str, *, quiesce: bool
) -> dict[str, Any]:
    body = {"cluster_manager": True, "shutdown_id": shutdown_id, "quiesce": quiesce}
    return dict(_call(s, member, "/api/ha/shutdown", body))


def _stop(s: CliSettings, member: Member, shutdown_id: str | None, role: str) -> None:
    if shutdown_id is None:
        body = {"broker_id": member.broker_id} if member.broker_id else {}
        _call(s, member, "/api/admin/stop", body)
    else:
        _shutdown_call(s, member, shutdown_id, quiesce=False)
    wait_stopped(s, member)
    s.env.out(f"stopped {member.url} ({role})")


def _wait_caught_up(s: CliSettings, primary: Member, backup: Member) -> bool:
    """Until ``backup`` is ready and holds, on every durable queue it replicates, as many
    messages as the primary (which changes no more: it serves no clients)."""

    def caught_up() -> bool:
        ha = _call(s, backup, "/api/ha")
        if ha.get("state") != "ready":
            return False
        held = {q["name"]: q for q in _call(s, primary, "/api/queues") if q.get("durable")}
        primary_ha = _call(s, primary, "/api/ha?queues=summary")
        if primary_ha.get("held_confirms"):
            return False
        for queue in ha.get("queues") or []:
            name = queue.get("name")
            if name not in held:
                continue  # not durable: no store keeps it
            if not queue.get("caught_up") or queue.get("messages") != held[name]["messages"]:
                return False
        return True

    try:
        poll_until(caught_up, s.timeout, "the backup to catch up", interval=0.05)
    except PollTimeout:
        return False
    return True


# -- qpid-ha store status|mark-clean DIR ------------------------------------------------------
def _read(directory: str) -> StoreInfo:
    from broker.store.data_dir import DataDirError, inspect

    try:
        return inspect(directory)
    except DataDirError as exc:
        raise CommandError(str(exc), ExitStatus.USAGE) from None


def _lines(info: StoreInfo) -> list[str]:
    status = f"in use by pid {info.in_use_by}" if info.in_use_by is not None else info.status
    lines = [
        f"store: {info.path}",
        f"status: {status}",
        f"store-id: {info.store_id or 'none'}",
        f"cluster-id: {info.cluster_id or 'none'}",
        f"shutdown-id: {info.shutdown_id or 'none'}",
        f"segments: {info.segments} ({info.bytes} bytes)",
    ]
    if info.moved_aside:
        lines.append(f"moved aside: {', '.join(info.moved_aside)}")
    return lines


@store_app.command("status", **command_settings())
def store_status(
    ctx: typer.Context,
    directory: Annotated[str, typer.Argument(metavar="DIR", help="the broker's --data-dir")],
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Print a store's status (empty, clean, dirty or in use), its ids and size.

    Reads only: safe while a broker runs on DIR.
    """
    info = _read(directory)
    env = environment(ctx)
    if as_json:
        data = {**asdict(info), "path": str(info.path), "moved_aside": list(info.moved_aside)}
        env.out(json.dumps(data, indent=2, sort_keys=True))
        return
    for line in _lines(info):
        env.out(line)


@store_app.command("mark-clean", **command_settings())
def store_mark_clean(
    ctx: typer.Context,
    directory: Annotated[str, typer.Argument(metavar="DIR", help="the broker's --data-dir")],
) -> None:
    """Mark a stopped broker's store clean (manual recovery after a total failure).

    Use it only on the store chosen as the best (docs/store.md): a restarted cluster
    recovers from a clean store as it is, and messages confirmed on another store after
    this one stopped are lost if this one is chosen.
    """
    info = _read(directory)
    env = environment(ctx)
    if info.store_id is None:
        raise CommandError(
            f"{directory} is not a data directory a broker used (no store-id)",
            ExitStatus.USAGE,
        )
    if info.in_use_by is not None:
        raise CommandError(
            f"{directory} is in use by pid {info.in_use_by}: stop that broker first",
            ExitStatus.USAGE,
        )
    if info.status == "clean":
        env.out(f"{directory} is clean already (shutdown-id {info.shutdown_id or 'none'})")
        return
    from broker.store.data_dir import DataDirError, mark_clean

    try:
        shutdown_id = mark_clean(directory)
    except DataDirError as exc:
        raise CommandError(str(exc), ExitStatus.USAGE) from None
    env.err(MARK_CLEAN_WARNING.format(dir=directory))
    env.out(f"{directory} marked clean (shutdown-id {shutdown_id})")
