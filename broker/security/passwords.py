"""Salted, slow password hashes (scrypt) in a PHC-style string; verification in constant time.

Also RabbitMQ's own (``rabbit_password_hashing_sha256``), so that users exported from
RabbitMQ log in here with their passwords (:class:`RabbitSha256Hash`): base64 of a 4-byte
salt followed by SHA-256(salt + UTF-8 password). It is fast, hence weak against guessing
from a stolen hash: users made here get scrypt unless asked for RabbitMQ's form
(docs/security.md). In a users file it is written ``$rabbit-sha256$BASE64``.

A users file never holds a password, only ``$scrypt$ln=14,r=8,p=1$SALT$HASH`` (salt and
hash in unpadded standard base64): :func:`hash_password` makes one with a fresh 16-byte
salt, :func:`verify_password` checks a password against one. ``ln`` is log2 of scrypt's
cost N; the parameters travel with the hash so they can be raised later without breaking
old entries. :func:`parse_hash` refuses malformed strings and parameters outside
:data:`LIMITS` (a users file must not be able to make one login take minutes or gigabytes).

Cost: at ln=14, r=8 (16 MiB) one verification takes about 50 ms of one core. The broker
verifies on the event loop, so :class:`~broker.security.users.UserDatabase` remembers each
user's last verified password as a keyed HMAC and checks repeat logins in microseconds;
only a new or wrong password pays the hash.

Pure functions (plus ``os.urandom`` for salts), no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_LOG_N",
    "LIMITS",
    "RABBIT_SHA256",
    "PasswordHash",
    "PasswordHashError",
    "RabbitSha256Hash",
    "StoredHash",
    "hash_password",
    "parse_hash",
    "rabbit_sha256",
    "verify_password",
]

SCHEME = "scrypt"
DEFAULT_LOG_N = 14
DEFAULT_R = 8
DEFAULT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
#: Accepted parameter ranges: (lowest, highest) for ln, r and p.
LIMITS = {"ln": (10, 20), "r": (1, 32), "p": (1, 16)}

#: RabbitMQ's name of its default hashing algorithm (definitions' ``hashing_algorithm``).
RABBIT_SHA256 = "rabbit_password_hashing_sha256"
RABBIT_PREFIX = "$rabbit-sha256$"
RABBIT_SALT_BYTES = 4

_FORMAT = re.compile(
    r"^\$scrypt\$ln=(\d{1,2}),r=(\d{1,2}),p=(\d{1,2})\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$"
)


class PasswordHashError(ValueError):
    """A stored hash is malformed or its parameters are out of range."""


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """A parsed ``$scrypt$`` string."""

    log_n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    def encode(self) -> str:
        salt = _b64(self.salt)
        digest = _b64(self.digest)
        return f"${SCHEME}$ln={self.log_n},r={self.r},p={self.p}${salt}${digest}"

    def derive(self, password: str) -> bytes:
        n = 1 << self.log_n
        return hashlib.scrypt(
            password.encode("utf-8"),
            salt=self.salt,
            n=n,
            r=self.r,
            p=self.p,
            maxmem=256 * self.r * n + (1 << 20),
            dklen=len(self.digest),
        )


@dataclass(frozen=True, slots=True)
class RabbitSha256Hash:
    """RabbitMQ's salted SHA-256: ``salt`` (4 bytes) and SHA-256(salt + password)."""

    salt: bytes
    digest: bytes

    def encode(self) -> str:
        return RABBIT_PREFIX + self.rabbit_form()

    def rabbit_form(self) -> str:
        """The ``password_hash`` of RabbitMQ's definitions (padded standard base64)."""
        return base64.b64encode(self.salt + self.digest).decode("ascii")

    @classmethod
    def parse(cls, text: str) -> RabbitSha256Hash:
        """From RabbitMQ's ``password_hash``. :raises PasswordHashError: not base64 of a
        4-byte salt and a 32-byte SHA-256."""
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise PasswordHashError("not base64") from None
        if len(raw) != RABBIT_SALT_BYTES + 32:
            raise PasswordHashError(
                f"{len(raw)} bytes, not a {RABBIT_SALT_BYTES}-byte salt and a SHA-256 (36)"
            )
        return cls(raw[:RABBIT_SALT_BYTES], raw[RABBIT_SALT_BYTES:])

    def derive(self, password: str) -> bytes:
        return hashlib.sha256(self.salt + password.encode("utf-8")).digest()


#: A stored password hash of either scheme.
StoredHash = PasswordHash | RabbitSha256Hash


def rabbit_sha256(password: str, salt: bytes | None = None) -> RabbitSha256Hash:
    """RabbitMQ's hash of ``password`` (a fresh random salt unless given)."""
    if not password:
        raise ValueError("empty password")
    salt = salt or os.urandom(RABBIT_SALT_BYTES)
    return RabbitSha256Hash(salt, hashlib.sha256(salt + password.encode("utf-8")).digest())


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def parse_hash(text: str) -> StoredHash:
    """A ``$scrypt$`` or ``$rabbit-sha256$`` string.

    :raises PasswordHashError: naming what is wrong (never echoing the string)."""
    if text.strip().startswith(RABBIT_PREFIX):
        return RabbitSha256Hash.parse(text.strip()[len(RABBIT_PREFIX) :])
    return parse_scrypt(text)


def parse_scrypt(text: str) -> PasswordHash:
    """A ``$scrypt$`` string. :raises PasswordHashError: naming what is wrong."""
    match = _FORMAT.match(text.strip())
    if match is None:
        raise PasswordHashError("not a $scrypt$ln=N,r=R,p=P$SALT$HASH password hash")
    log_n, r, p = (int(match.group(i)) for i in (1, 2, 3))
    for name, value in (("ln", log_n), ("r", r), ("p", p)):
        low, high = LIMITS[name]
        if not low <= value <= high:
            raise PasswordHashError(f"scrypt parameter {name}={value} outside {low}..{high}")
    try:
        salt, digest = _unb64(match.group(4)), _unb64(match.group(5))
    except (binascii.Error, ValueError):
        raise PasswordHashError("salt or hash is not base64") from None
    if len(salt) < 8 or len(digest) < 16:
        raise PasswordHashError("salt or hash too short")
    return PasswordHash(log_n, r, p, salt, digest)


def hash_password(
    password: str,
    *,
    log_n: int = DEFAULT_LOG_N,
    r: int = DEFAULT_R,
    p: int = DEFAULT_P,
    salt: bytes | None = None,
) -> str:
    """A new ``$scrypt$`` string for ``password`` (a fresh random salt unless given)."""
    if not password:
        raise ValueError("empty password")
    for name, value in (("ln", log_n), ("r", r), ("p", p)):
        low, high = LIMITS[name]
        if not low <= value <= high:
            raise ValueError(f"scrypt parameter {name}={value} outside {low}..{high}")
    params = PasswordHash(log_n, r, p, salt or os.urandom(SALT_BYTES), b"\0" * HASH_BYTES)
    return PasswordHash(log_n, r, p, params.salt, params.derive(password)).encode()


def verify_password(password: str, stored: StoredHash) -> bool:
    """Whether ``password`` matches ``stored`` (compared in constant time)."""
    return hmac.compare_digest(stored.derive(password), stored.digest)
