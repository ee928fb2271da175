"""``qpid-ha definitions export|import``: RabbitMQ's definitions file (issue 30), as
``rabbitmqctl export_definitions`` and ``import_definitions`` do.

- ``export [FILE] [--vhost V]``: the broker's definitions (``GET /api/definitions``; a
  vhost's with ``--vhost``) written to FILE, or to standard output without one (or ``-``).
  The file holds the cluster users' password hashes: it is written with mode 0600. RabbitMQ
  3.10.8 imports it; the users it will not (this broker's scrypt hashes, kept in the file's
  ``qpidd_only`` section for qpidd's own import) are named on the error stream.
- ``import FILE [--vhost V]``: the file (``-``: standard input) sent to
  ``POST /api/definitions``; prints what was imported, then each line ignored or skipped.

Both need the administrator role; an import goes to the primary (a backup answers 409:
exit 1). A file that cannot be read or is not a JSON object is USAGE 2 before any call; a
field the broker refuses is exit 1 with its reason, naming the field
(:mod:`qpid_ha_cli.main`).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import typer

from common.exit_status import CommandError, ExitStatus
from qpid_ha_cli.context import settings

__all__ = ["app"]

app = typer.Typer(
    name="definitions",
    help="Export or import the broker's definitions (RabbitMQ's JSON).",
    rich_markup_mode=None,
    no_args_is_help=True,
)

Vhost = Annotated[
    str | None, typer.Option("--vhost", help="only this vhost's queues, exchanges, bindings")
]


def _path(vhost: str | None) -> str:
    if vhost is None:
        return "/api/definitions"
    return "/api/definitions/" + urllib.parse.quote(vhost, safe="")


@app.command("export")
def export_definitions(
    ctx: typer.Context,
    file: Annotated[
        str, typer.Argument(help="where to write it; - or none: standard output")
    ] = "-",
    vhost: Vhost = None,
) -> None:
    """Write the broker's definitions (RabbitMQ's JSON) to FILE."""
    # here, not at the top: it brings aiohttp's server (a fifth of every qpid-ha start)
    from broker.management.definitions import QPIDD_ONLY, left_for_qpidd

    s = settings(ctx)
    data = s.call(_path(vhost))
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    left = left_for_qpidd(data) if isinstance(data, dict) else []
    if left:
        s.env.err(
            f"not for RabbitMQ: {len(left)} user(s) with scrypt password hashes, which"
            f" RabbitMQ cannot import, are in the file's {QPIDD_ONLY} section (qpidd imports"
            f" them, RabbitMQ passes over it): {', '.join(left)}"
        )
    if file == "-":
        s.env.out(text.rstrip("\n"))
        return
    try:
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds hashes
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise CommandError(f"cannot write {file!r}: {exc.strerror}", ExitStatus.USAGE) from None
    s.env.out(f"definitions written to {file}")


def _read(file: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise CommandError(f"cannot read {file!r}: {reason}", ExitStatus.USAGE) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"{file!r} is not JSON: {exc}", ExitStatus.USAGE) from None
    if not isinstance(data, dict):
        raise CommandError(f"{file!r} is not a definitions file (a JSON object)", ExitStatus.USAGE)
    return data


@app.command("import")
def import_definitions(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="a definitions file; -: standard input")],
    vhost: Vhost = None,
) -> None:
    """Import a definitions file (RabbitMQ's or ours) into the broker (the primary)."""
    data = _read(file)
    s = settings(ctx)
    answer = s.call(_path(vhost), data, method="POST")
    counts = ", ".join(f"{n} {what}" for what, n in (answer.get("imported") or {}).items())
    s.env.out(f"imported: {counts}")
    for key in ("ignored", "skipped"):
        for line in answer.get(key) or []:
            s.env.out(f"{key}: {line}")
