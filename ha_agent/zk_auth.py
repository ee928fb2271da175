"""ZooKeeper digest authentication for the agent (``--zk-auth``, issue 13, item 5).

With ``--zk-auth USER:PASSWORD`` (or ``@FILE`` holding that line, or the environment
variable ``QPID_HA_ZK_AUTH``) the agent's ZooKeeper session authenticates with the
``digest`` scheme and every znode it creates carries the ACL "only USER may read, write,
create, delete and administer it" (:func:`zk_security`, the keyword arguments of
``KazooClient``). Another session (another digest, or none) gets ``NoAuth`` on those
znodes: nobody steers the cluster uninvited. Every agent of a cluster (and anyone reading
it with ``qpid-ha --zk``) must use the same credentials. Without ``--zk-auth`` znodes are
open (ZooKeeper's default ``world:anyone``), as before.

The password is never logged: :class:`ZkAuth`'s ``repr`` hides it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.security import make_digest_acl

__all__ = ["ZkAuth", "parse_zk_auth", "zk_security"]


@dataclass(frozen=True)
class ZkAuth:
    user: str
    password: str = field(repr=False)


def parse_zk_auth(text: str) -> ZkAuth:
    """``USER:PASSWORD`` or ``@FILE`` (first line). :raises ValueError: naming the problem,
    never the password."""
    source = "--zk-auth"
    if text.startswith("@"):
        path = text[1:]
        try:
            text = Path(path).read_text(encoding="utf-8").splitlines()[0].strip()
        except (OSError, UnicodeDecodeError, IndexError) as exc:
            raise ValueError(f"--zk-auth: cannot read {path!r}: {type(exc).__name__}") from None
        source = f"--zk-auth file {path!r}"
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise ValueError(f"{source}: expected USER:PASSWORD")
    return ZkAuth(user, password)


def zk_security(auth: ZkAuth | None) -> dict[str, Any]:
    """``KazooClient`` keyword arguments: the digest credentials and the default ACL of
    the znodes the session creates (empty without ``auth``)."""
    if auth is None:
        return {}
    return {
        "auth_data": [("digest", f"{auth.user}:{auth.password}")],
        "default_acl": [make_digest_acl(auth.user, auth.password, all=True)],
    }
