"""``qpid-ha users add|delete|list|passwd|roles``: the broker's users file (issue 13).

The file (``--users-file``, default :data:`DEFAULT_USERS_FILE`; the broker reads it with
``--sasl-users``) holds a salted scrypt hash and the management roles of each user, never a
password (:mod:`broker.security.users`). A password is read from the terminal without echo
(asked twice), or from the first line of standard input with ``--password-stdin``; it is
never an argument, so it never shows in ``ps`` or a shell history.

- ``add NAME [--role R]...``: a new user (exit 1 if NAME exists: use ``passwd``); creates
  the file if missing.
- ``delete NAME``; ``passwd NAME``; ``roles NAME [R...]`` (no roles: AMQP only).
- ``list``: each user and roles, one a line (never a hash).

- ``reload``: the broker at ``-b`` reads its ``--sasl-users`` file again (``POST
  /api/users/reload``, as SIGHUP does): a change applies without a restart. A bad file is
  refused and the running users stay (exit 1 with the broker's reason).

Every change rewrites the file atomically with mode 0600; the broker reads it at start, on
``reload`` and on SIGHUP.
Failures are raised as :class:`~common.exit_status.CommandError` (bad input 2, a missing
user 1) and become one line in :mod:`qpid_ha_cli.main`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from common.exit_status import CommandError, ExitStatus
from qpid_ha_cli.command_line import OwnOptionsCommand
from qpid_ha_cli.context import environment, settings

# The broker's security modules (scrypt, the users file) are imported by the verbs that use
# them, not at every qpid-ha start (an OCF monitor runs one or two): tests/test_start_up.py.
if TYPE_CHECKING:
    from broker.security.roles import Role
    from broker.security.users import User, UserDatabase

__all__ = ["DEFAULT_USERS_FILE", "app"]

DEFAULT_USERS_FILE = "/etc/qpidd/users"

app = typer.Typer(
    name="users",
    help="Manage the broker's users file (salted hashes and roles, never passwords).",
    rich_markup_mode=None,
    no_args_is_help=True,
)

UsersFile = Annotated[
    Path,
    typer.Option(
        "--users-file",
        "-f",
        help=f"the users file (qpidd --sasl-users); default {DEFAULT_USERS_FILE}",
        envvar="QPIDD_USERS_FILE",
    ),
]
PasswordStdin = Annotated[
    bool,
    typer.Option("--password-stdin", help="read the password from standard input's first line"),
]
RoleOption = Annotated[
    list[str] | None,
    typer.Option(
        "--role",
        "-r",
        help="monitoring, administrator or cluster-manager (repeat for several)",
    ),
]


def _read(path: Path, *, missing_ok: bool = False) -> UserDatabase:
    from broker.security.users import UserDatabase, load

    if missing_ok and not path.exists():
        return UserDatabase([])
    try:
        return load(path)
    except ValueError as exc:
        raise CommandError(str(exc), ExitStatus.USAGE) from None


def _write(users: UserDatabase, path: Path) -> None:
    from broker.security.users import save

    try:
        save(users, path)
    except OSError as exc:
        raise CommandError(
            f"cannot write users file {str(path)!r}: {exc.strerror or exc}", ExitStatus.ERROR
        ) from None


def _roles(words: list[str] | None) -> frozenset[Role]:
    from broker.security.roles import parse_roles

    try:
        return parse_roles(",".join(words or []))
    except ValueError as exc:
        raise CommandError(str(exc), ExitStatus.USAGE) from None


def _password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise CommandError("empty password", ExitStatus.USAGE)
    return password


def _name(name: str) -> str:
    from broker.security.users import check_name

    try:
        return check_name(name)
    except ValueError as exc:
        raise CommandError(str(exc), ExitStatus.USAGE) from None


def _with_password(
    users: UserDatabase, name: str, password: str, roles: frozenset[Role]
) -> UserDatabase:
    """``users`` with ``name``'s password hashed (salted scrypt) and its ``roles``."""
    from broker.security.passwords import hash_password, parse_hash
    from broker.security.users import User

    return users.with_user(User(name, parse_hash(hash_password(password)), roles))


def _user(users: UserDatabase, name: str) -> User:
    user = users.get(name)
    if user is None:
        raise CommandError(f"no such user: {name!r}", ExitStatus.ERROR)
    return user


@app.command(cls=OwnOptionsCommand)
def add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="the new user's name")],
    users_file: UsersFile = Path(DEFAULT_USERS_FILE),
    role: RoleOption = None,
    password_stdin: PasswordStdin = False,
) -> None:
    """Add a user with a password (asked, or --password-stdin) and roles."""
    name = _name(name)
    roles = _roles(role)
    users = _read(users_file, missing_ok=True)
    if name in users:
        raise CommandError(f"user {name!r} exists (use: qpid-ha users passwd)", ExitStatus.ERROR)
    _write(_with_password(users, name, _password(password_stdin), roles), users_file)
    environment(ctx).out(f"added {name}")


@app.command(cls=OwnOptionsCommand)
def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="the user to delete")],
    users_file: UsersFile = Path(DEFAULT_USERS_FILE),
) -> None:
    """Delete a user."""
    users = _read(users_file)
    _user(users, name)
    _write(users.without(name), users_file)
    environment(ctx).out(f"deleted {name}")


@app.command("list", cls=OwnOptionsCommand)
def list_users(ctx: typer.Context, users_file: UsersFile = Path(DEFAULT_USERS_FILE)) -> None:
    """List the users and their roles (never a hash)."""
    users = _read(users_file)
    env = environment(ctx)
    for name in users:
        roles = ",".join(sorted(role.value for role in users.roles(name)))
        env.out(f"{name}\t{roles or '-'}")


@app.command(cls=OwnOptionsCommand)
def passwd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="the user whose password to set")],
    users_file: UsersFile = Path(DEFAULT_USERS_FILE),
    password_stdin: PasswordStdin = False,
) -> None:
    """Set a user's password (asked, or --password-stdin)."""
    users = _read(users_file)
    user = _user(users, name)
    _write(_with_password(users, name, _password(password_stdin), user.roles), users_file)
    environment(ctx).out(f"password of {name} changed")


@app.command(cls=OwnOptionsCommand)
def roles(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="the user")],
    role: Annotated[
        list[str] | None,
        typer.Argument(help="monitoring, administrator, cluster-manager; none: AMQP only"),
    ] = None,
    users_file: UsersFile = Path(DEFAULT_USERS_FILE),
) -> None:
    """Set a user's management roles."""
    granted = _roles(role)
    users = _read(users_file)
    user = _user(users, name)
    _write(users.with_user(replace(user, roles=granted)), users_file)
    shown = ",".join(sorted(r.value for r in granted)) or "-"
    environment(ctx).out(f"roles of {name}: {shown}")


@app.command()
def reload(ctx: typer.Context) -> None:
    """Make the broker (-b) read its users file again: changes apply without a restart."""
    s = settings(ctx)
    status = s.call("/api/users/reload", {})
    s.env.out(f"reloaded {status.get('users_file')}: {status.get('users')} users")
