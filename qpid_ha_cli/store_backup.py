"""``qpid-ha backup --to DIR`` and ``qpid-ha restore DIR --data-dir D``: a hot backup of a
running broker's store, and a store prepared from one (seed 004's "Backups" and "Disaster
Recovery"; the rules in :mod:`broker.store.hot_backup`, the procedure in docs/store.md).
The verbs are here; the backup directory's writing, checking and restoring is
:mod:`qpid_ha_cli.backup_dir`, imported when one of them runs.

Contract
========

- ``backup --to DIR``: asks the ``-b`` broker for a backup (``POST /api/store/backup``, the
  administrator's or the cluster manager's role) and writes ``DIR/segments/*.seg`` as they
  stream, then checks them (sizes, the broker's SHA-256, the store's recovery over them)
  and writes ``DIR/manifest.json`` last: a directory without it is a copy that did not
  finish. DIR must be new or empty (exit 2). Prints one line: the source, the point, what
  the backup holds. A stream cut short or a copy that fails its checks: exit 1, DIR left
  without a manifest. Unreachable broker: exit 3.
- ``restore DIR --data-dir D``: checks the backup (the manifest, every segment's size and
  SHA-256, the store's recovery over them, the counts the manifest recorded) and prepares
  D to start ``qpidd --data-dir D`` from: the segments in ``D/store/``, a new store-id, the
  source's ``cluster-id`` and HA epoch, and ``D/restored-from.json`` (the broker logs
  ``store_restored_from_backup`` at its first start and removes it); the store is left
  dirty (every message comes back redelivered). D must be new or empty unless
  ``--force``, which moves what D holds aside to ``D/_cluster.bak.NNNN`` (never deleted);
  refused while a broker holds D's lock. Every refusal is one line naming the problem,
  exit 2. Touches no broker: works on a new host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from common.exit_status import CommandError, ExitStatus
from qpid_ha_cli.command_line import command_settings
from qpid_ha_cli.context import counted, settings

__all__ = ["app"]

app = typer.Typer(rich_markup_mode=None)


def _empty_or_new(path: Path, what: str) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise CommandError(f"{what} {path} is not an empty directory", ExitStatus.USAGE)


@app.command(**command_settings())
def backup(
    ctx: typer.Context,
    to: Annotated[
        Path,
        typer.Option("--to", metavar="DIR", help="directory to write the backup to (new or empty)"),
    ],
) -> None:
    """Copy the broker's store to DIR at a consistent point while it serves.

    Every message confirmed before the broker answered is in the copy. Needs the
    administrator or cluster-manager role. Restore it with 'qpid-ha restore DIR'.
    """
    from qpid_ha_cli.backup_dir import BackupError, receive_backup  # the store's code

    s = settings(ctx)
    _empty_or_new(to, "--to")
    client = s.env.management_client(s.broker, s.timeout)
    try:
        with client.stream("/api/store/backup", {}) as stream:
            manifest, _state = receive_backup(stream, to)
    except BackupError as exc:
        raise CommandError(f"backup failed, {to} is incomplete: {exc}") from None
    except OSError as exc:
        raise CommandError(f"backup failed, {to} is incomplete: {exc}") from None
    source = manifest.source
    c = manifest.contents
    s.env.out(
        f"backup of {source.get('node')} (store {source.get('store_id') or '-'}) at segment"
        f" {manifest.point.sealed_segment}, {manifest.point.taken_at}:"
        f" {counted(len(manifest.segments), 'segment')}, {counted(manifest.total_bytes, 'byte')},"
        f" {counted(c.queues, 'queue')}, {counted(c.messages, 'message')} -> {to}"
    )


@app.command(**command_settings())
def restore(
    ctx: typer.Context,
    backup_dir: Annotated[
        Path, typer.Argument(metavar="DIR", help="a backup written by 'qpid-ha backup --to'")
    ],
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir", metavar="D", help="the data directory to prepare (new or empty)"
        ),
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="D may hold something: move it aside to D/_cluster.bak.NNNN"),
    ] = False,
) -> None:
    """Check a backup and prepare a data directory to start qpidd from it.

    Works offline, on any host: then start 'qpidd --data-dir D' there (see docs/store.md,
    "Whole-site loss"). Every restored message comes back marked redelivered.
    """
    from qpid_ha_cli.backup_dir import BackupError, restore_into  # the store's code

    s = settings(ctx)
    try:
        manifest, state, moved = restore_into(backup_dir, data_dir, force=force)
    except BackupError as exc:
        raise CommandError(f"bad backup {backup_dir}: {exc}", ExitStatus.USAGE) from None
    except OSError as exc:
        raise CommandError(f"cannot restore into {data_dir}: {exc}", ExitStatus.USAGE) from None
    aside = f"; what it held is in {moved}" if moved is not None else ""
    s.env.out(
        f"restored the backup of {manifest.source.get('node')} at"
        f" {manifest.point.taken_at} ({counted(len(state.queues), 'queue')},"
        f" {counted(state.message_count, 'message')}) into {data_dir}{aside};"
        f" start qpidd --data-dir {data_dir}"
    )
