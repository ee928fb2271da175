"""The users file: one user a line, a salted slow hash and roles, never a password.

Format (``qpid-ha users`` writes it; comments and blank lines are kept out)::

    # name:hash:roles
    alice:$scrypt$ln=14,r=8,p=1$SALT$HASH:monitoring
    agent:$scrypt$ln=14,r=8,p=1$SALT$HASH:cluster-manager,monitoring
    app:$scrypt$ln=14,r=8,p=1$SALT$HASH:

The hash is :mod:`broker.security.passwords`'s (scrypt, or RabbitMQ's salted SHA-256 as
``$rabbit-sha256$BASE64``); roles are :mod:`broker.security.roles`'s
(empty: AMQP only). A line whose second field is not a hash is refused with its line
number (a plain-text password from the old ``name:password`` format included: hash it with
``qpid-ha users passwd``). Errors never echo a password or a hash.

:class:`UserDatabase` is immutable: the broker reads one at start (``--sasl-users``; again
on SIGHUP or ``qpid-ha users reload``: :mod:`broker.broker_security`) or
uses :meth:`UserDatabase.default` (guest/guest with every role, from loopback only by
``--loopback-users``). ``qpid-ha users`` edits copies (:meth:`UserDatabase.with_user`,
:meth:`UserDatabase.without`) and writes them with :func:`save` (atomically, mode 0600).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker.security.passwords import (
    PasswordHashError,
    StoredHash,
    hash_password,
    parse_hash,
    verify_password,
)
from broker.security.roles import ALL_ROLES, Role, parse_roles

__all__ = ["User", "UserDatabase", "check_name", "load", "save"]

HEADER = "# qpidd users: name:scrypt-hash:roles (written by qpid-ha users; no passwords)\n"


# A hash nobody's password matches, verified for unknown users so that the time taken does
# not tell which user names exist.
@functools.cache
def _nobody() -> StoredHash:
    return parse_hash(hash_password("\0nobody\0", salt=b"qpidd-no-user-salt"))


def check_name(name: str) -> str:
    """:raises ValueError: for a user name that cannot be a users-file line's first field."""
    if not name or ":" in name or name != name.strip() or "\n" in name or name.startswith("#"):
        raise ValueError(f"invalid user name {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: StoredHash
    roles: frozenset[Role] = frozenset()

    def line(self) -> str:
        roles = ",".join(sorted(role.value for role in self.roles))
        return f"{self.name}:{self.password_hash.encode()}:{roles}\n"


class UserDatabase:
    """User names, their password hashes and roles. Immutable."""

    def __init__(self, users: Iterable[User]) -> None:
        self._users: dict[str, User] = {}
        for user in users:
            check_name(user.name)
            if user.name in self._users:
                raise ValueError(f"user {user.name!r} is listed twice")
            self._users[user.name] = user
        # user -> HMAC(key, password) of the last password verified for that user: repeat
        # logins skip the slow hash. The key is random per database, in memory only.
        self._key = os.urandom(32)
        self._verified: dict[str, bytes] = {}

    @classmethod
    def from_passwords(
        cls, passwords: Mapping[str, str], roles: Iterable[Role] = ALL_ROLES, *, log_n: int = 10
    ) -> UserDatabase:
        """Users with these passwords, hashed now (tests and the default user: ``log_n``
        low, as nothing is stored)."""
        granted = frozenset(roles)
        return cls(
            User(name, parse_hash(hash_password(password, log_n=log_n)), granted)
            for name, password in passwords.items()
        )

    @classmethod
    def default(cls) -> UserDatabase:
        """The single user ``guest`` with password ``guest`` and every role (RabbitMQ's
        default user; ``--loopback-users`` keeps it to loopback)."""
        return cls.from_passwords({"guest": "guest"})

    @classmethod
    def parse(cls, text: str, source: str = "<users>") -> UserDatabase:
        """Read ``name:hash:roles`` lines.

        :raises ValueError: naming ``source`` and the line number of a bad line.
        """
        users: list[User] = []
        seen: set[str] = set()
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{source}:{lineno}"
            name, colon, rest = line.partition(":")
            name = name.strip()
            if not colon or not name:
                raise ValueError(f"{where}: expected name:hash:roles")
            stored, _, roles_text = rest.partition(":")
            if not stored.strip().startswith("$"):
                raise ValueError(
                    f"{where}: user {name!r} has no password hash (a plain-text password?"
                    " set it with: qpid-ha users passwd)"
                )
            try:
                password_hash = parse_hash(stored)
                roles = parse_roles(roles_text)
                check_name(name)
            except (PasswordHashError, ValueError) as exc:
                raise ValueError(f"{where}: user {name!r}: {exc}") from None
            if name in seen:
                raise ValueError(f"{where}: user {name!r} is listed twice")
            seen.add(name)
            users.append(User(name, password_hash, roles))
        return cls(users)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> UserDatabase:
        return load(path)

    def format(self) -> str:
        return HEADER + "".join(self._users[name].line() for name in sorted(self._users))

    # -- editing (copies) --------------------------------------------------------------
    def with_user(self, user: User) -> UserDatabase:
        """A copy with ``user`` added or replaced."""
        return UserDatabase([*(u for u in self._users.values() if u.name != user.name), user])

    def without(self, name: str) -> UserDatabase:
        """A copy without ``name``. :raises KeyError: if there is no such user."""
        if name not in self._users:
            raise KeyError(name)
        return UserDatabase(u for u in self._users.values() if u.name != name)

    # -- checks ------------------------------------------------------------------------
    def _tag(self, password: str) -> bytes:
        return hmac.new(self._key, password.encode("utf-8"), hashlib.sha256).digest()

    def tag(self, password: str) -> bytes:
        """``password`` under this database's in-memory key (HMAC-SHA-256, microseconds):
        equal tags, equal passwords; it reveals nothing without the key, which never leaves
        the process. The logins hashing at once share by it
        (:mod:`broker.security.password_checks`)."""
        return self._tag(password)

    def check_remembered(self, name: str, password: str) -> bool:
        """Whether ``password`` is the one last verified for ``name`` (microseconds, no
        hash): False means "not known yet", pay :meth:`check`."""
        known = self._verified.get(name)
        return known is not None and hmac.compare_digest(self._tag(password), known)

    def check(self, name: str, password: str) -> bool:
        """Whether ``password`` is ``name``'s (constant time in the password). Slow (the
        scrypt hash) unless remembered: the broker calls it in a thread
        (:mod:`broker.security.password_checks`); safe to, as it only adds to a dict."""
        user = self._users.get(name)
        if user is None:
            verify_password(password, _nobody())
            return False
        tag = self._tag(password)
        if self.check_remembered(name, password):
            return True
        if not verify_password(password, user.password_hash):
            return False
        self._verified[name] = tag
        return True

    def roles(self, name: str) -> frozenset[Role]:
        user = self._users.get(name)
        return frozenset() if user is None else user.roles

    def get(self, name: str) -> User | None:
        return self._users.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._users

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._users))

    def __len__(self) -> int:
        return len(self._users)

    def __repr__(self) -> str:
        return f"UserDatabase(users={sorted(self._users)!r})"


def load(path: str | os.PathLike[str]) -> UserDatabase:
    """Read a users file. :raises ValueError: unreadable or a bad line (naming the file)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise ValueError(f"cannot read users file {str(path)!r}: {reason}") from None
    except UnicodeDecodeError:
        raise ValueError(f"cannot read users file {str(path)!r}: not UTF-8 text") from None
    return UserDatabase.parse(text, source=str(path))


def save(users: UserDatabase, path: str | os.PathLike[str]) -> None:
    """Write ``users`` to ``path`` atomically (a temporary file renamed), mode 0600, with
    the owner and group of the file it replaces: root changing the file of a broker that
    runs as another user (qpidd) leaves it readable by that broker."""
    target = Path(path)
    try:
        owner: os.stat_result | None = target.stat()
    except FileNotFoundError:
        owner = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(users.format())
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        if owner is not None and (owner.st_uid, owner.st_gid) != (os.geteuid(), os.getegid()):
            with contextlib.suppress(PermissionError):  # only root may give files away
                os.chown(tmp, owner.st_uid, owner.st_gid)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
