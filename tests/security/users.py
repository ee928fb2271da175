"""Users files for the security tests: hashed with scrypt's lowest accepted cost (fast)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from broker.security.passwords import hash_password, parse_hash
from broker.security.roles import Role
from broker.security.users import User, UserDatabase, save


def write_users(
    path: Path, users: dict[str, str], roles: dict[str, Iterable[Role]] | None = None
) -> Path:
    """A users file holding ``users`` (name -> password) with ``roles`` (name -> roles;
    guest gets every role unless given, the others none)."""
    roles = roles or {}
    entries = []
    for name, password in users.items():
        granted = roles.get(name, set(Role) if name == "guest" else ())
        entries.append(
            User(name, parse_hash(hash_password(password, log_n=10)), frozenset(granted))
        )
    save(UserDatabase(entries), path)
    return path
