"""``qpid-ha acl show|reload``: the broker's ACL file (issue 13, item 3).

- ``show``: the ACL file, the number of rules, the groups and when it was loaded
  (``GET /api/acl``).
- ``reload``: the broker reads its ``--acl-file`` again (``POST /api/acl/reload``, as
  SIGHUP does). A bad file is refused and the running ACL stays: exit 1 with the broker's
  reason (the file and line).

Failures (an unreachable broker 3, a refusal 1) are mapped in :mod:`qpid_ha_cli.main`.
"""

from __future__ import annotations

import json

import typer

from qpid_ha_cli.context import settings

__all__ = ["app"]

app = typer.Typer(
    name="acl",
    help="The broker's ACL file: show it, or reload it (as SIGHUP does).",
    rich_markup_mode=None,
    no_args_is_help=True,
)


@app.command()
def show(ctx: typer.Context) -> None:
    """The ACL file, its rules and groups, and when it was loaded."""
    s = settings(ctx)
    s.env.out(json.dumps(s.call("/api/acl"), indent=2))


@app.command()
def reload(ctx: typer.Context) -> None:
    """Reload the ACL file: a bad file is refused and the running ACL stays."""
    s = settings(ctx)
    status = s.call("/api/acl/reload", {})
    s.env.out(f"reloaded {status.get('acl_file')}: {status.get('rules')} rules")
