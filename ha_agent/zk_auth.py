"""ZooKeeper digest authentication for the agent (``--zk-auth``, issue 13, item 5).

With ``--zk-auth USER:PASSWORD`` (or ``@FILE`` holding that line, or the environment
variable ``QPID_HA_ZK_AUTH``) the agent's ZooKeeper session authenticates with the
``digest`` scheme and every znode it creates carries the ACL "only USER may read, write,
create, delete and administer it" (:func:`zk_security`, the keyword arguments of
``KazooClient``). Another session (another digest, or none) gets ``NoAuth`` on those
znodes: nobody steers the cluster uninvited. Every agent of a cluster (and anyone reading
it with ``qpid-ha --zk``) must use the same credentials. Without ``--zk-auth`` znodes are
open (ZooKeeper's default ``world:anyone``), as before.

The root every cluster shares, ``/qpid-ha``, is not one cluster's: :func:`ensure_shared_root`
creates it (when missing) readable and creatable by anyone, so that the first agent with
``--zk-auth`` on an ensemble does not lock the other clusters out of it (it did: they got
NoAuth creating their own cluster's znode). Each cluster's znode and all below it are its
user's alone.

The password is never logged: :class:`ZkAuth`'s ``repr`` hides it.

:func:`zk_security` also takes the TLS settings (:mod:`ha_agent.zk_tls`): one set of
``KazooClient`` keyword arguments for every client the agent and ``qpid-ha`` make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from kazoo.security import make_acl, make_digest_acl

from common.zk_access import parse_digest
from ha_agent.zk_layout import ROOT
from ha_agent.zk_tls import ZkTls

__all__ = ["ZkAuth", "ensure_shared_root", "parse_zk_auth", "zk_security"]


@dataclass(frozen=True)
class ZkAuth:
    user: str
    password: str = field(repr=False)


def parse_zk_auth(text: str) -> ZkAuth:
    """``USER:PASSWORD`` or ``@FILE`` (first line). :raises ValueError: naming the problem,
    never the password (:func:`common.zk_access.parse_digest`, the console's parser too)."""
    digest = parse_digest(text, "--zk-auth")
    return ZkAuth(digest.user, digest.password)


def zk_security(auth: ZkAuth | None, tls: ZkTls | None = None) -> dict[str, Any]:
    """``KazooClient`` keyword arguments: the digest credentials and the default ACL of
    the znodes the session creates (none without ``auth``), TLS options with ``tls``."""
    options = {} if tls is None else tls.kazoo_options()
    if auth is None:
        return options
    return {
        **options,
        "auth_data": [("digest", f"{auth.user}:{auth.password}")],
        "default_acl": [make_digest_acl(auth.user, auth.password, all=True)],
    }


def ensure_shared_root(client: KazooClient, auth: ZkAuth | None) -> None:
    """With ``auth``: create ``/qpid-ha`` (when missing) readable and creatable by anyone,
    everything else for ``auth``'s user only, before the session creates anything below it
    (``makepath`` would give it the session's digest-only ACL). A failure is left to the
    callers' own retries (the root then comes with their first ``makepath``)."""
    if auth is None:
        return
    acl = [
        make_acl("world", "anyone", read=True, create=True),
        make_digest_acl(auth.user, auth.password, all=True),
    ]
    try:
        client.create(ROOT, b"", acl=acl)
    except NodeExistsError:
        pass
    except KazooException:
        return
