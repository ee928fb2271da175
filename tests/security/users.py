"""Users files for the security tests."""

from __future__ import annotations

from pathlib import Path


def write_users(path: Path, users: dict[str, str]) -> Path:
    """A users file holding ``users`` (name -> password)."""
    path.write_text("".join(f"{name}:{password}\n" for name, password in users.items()))
    return path
