"""``qpid-ha vhosts list|add|delete``: the broker's virtual hosts (issue 14).

- ``list``: each vhost, one a line: its name, queues, exchanges, messages and connections
  (``GET /api/vhosts``).
- ``add NAME``: create the vhost with its built-in exchanges (``PUT /api/vhosts/NAME``);
  a vhost that exists is left as it is ("exists").
- ``delete NAME``: delete the vhost, its queues (their messages), exchanges and bindings;
  its connections are closed with 320 (``DELETE /api/vhosts/NAME``). ``/`` stays.

In an HA cluster both changes go to the primary (a backup refuses them: exit 1) and reach
the backups by replication. A bad name (empty, over 255 bytes, a NUL) is USAGE 2 before
any call; a missing vhost or a refusal is exit 1, an unreachable broker 3
(:mod:`qpid_ha_cli.main`).
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated

import typer

from common.exit_status import CommandError, ExitStatus
from qpid_ha_cli.context import settings

__all__ = ["app"]

app = typer.Typer(
    name="vhosts",
    help="The broker's virtual hosts: list, add or delete them.",
    rich_markup_mode=None,
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(help="the vhost's name (as clients open it)")]


def _path(name: str) -> str:
    from broker.core.vhosts import check_vhost_name  # the broker's core: here, not at start

    try:
        check_vhost_name(name)
    except ValueError as exc:
        raise CommandError(str(exc), ExitStatus.USAGE) from None
    return "/api/vhosts/" + urllib.parse.quote(name, safe="")


@app.command("list")
def list_vhosts(ctx: typer.Context) -> None:
    """Each vhost: its queues, exchanges, ready messages and open connections."""
    s = settings(ctx)
    for vhost in s.call("/api/vhosts"):
        s.env.out(
            f"{vhost.get('name')}  queues={vhost.get('queues')}"
            f" exchanges={vhost.get('exchanges')} messages={vhost.get('messages')}"
            f" connections={vhost.get('connections')}"
        )


@app.command()
def add(ctx: typer.Context, name: Name) -> None:
    """Create a vhost (with the amq.* exchanges and the default exchange)."""
    path = _path(name)
    s = settings(ctx)
    before = {v.get("name") for v in s.call("/api/vhosts")}
    s.call(path, method="PUT")
    s.env.out(f"vhost {name}: {'exists' if name in before else 'created'}")


@app.command()
def delete(ctx: typer.Context, name: Name) -> None:
    """Delete a vhost and everything in it; its connections are closed (320)."""
    path = _path(name)
    s = settings(ctx)
    answer = s.call(path, method="DELETE")
    s.env.out(f"vhost {name}: deleted ({answer.get('connections_closed', 0)} connections closed)")
