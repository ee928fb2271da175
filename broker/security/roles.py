"""Management roles and what each may do (issue 13, item 4). Pure data and functions.

Three roles, named as RabbitMQ names its management tags where they match:

- ``monitoring``: read everything (``GET``): status, queues, exchanges, bindings,
  connections, HA status, replications; not the users nor the definitions (they show
  users and password hashes: the administrator's, checked by their endpoints).
- ``administrator``: read, and change objects and connections: declare and delete queues
  and exchanges, close a connection, start a queue replication.
- ``cluster-manager``: read, and steer the cluster: ``promote``, the ``lease``, the
  ``in-sync`` set, stopping a broker (seed 001's "--cluster-manager": only the cluster
  manager, normally the HA agent, may promote).

A hot backup (``POST /api/store/backup``) copies every stored message: either managing
role may take one, monitoring may not.

A user with no role may use AMQP but not the management API (403), as RabbitMQ's users
without tags. The default user ``guest`` (from loopback only) has all three, so the agent,
``qpid-ha``, the OCF agent and ``make demo`` work on a first install.

:func:`required_permission` maps a management request to the permission it needs and
:func:`allows` says whether a set of roles grants it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ALL_ROLES",
    "Permission",
    "Role",
    "allows",
    "parse_roles",
    "required_permission",
]


class Role(StrEnum):
    MONITORING = "monitoring"
    ADMINISTRATOR = "administrator"
    CLUSTER_MANAGER = "cluster-manager"


class Permission(StrEnum):
    READ = "read"  #: GET anything
    CONFIGURE = "configure"  #: objects and connections
    STEER = "steer"  #: promote, lease, in-sync set, stop a broker
    BACKUP = "backup"  #: copy the store (every message in it): the two managing roles


ALL_ROLES = frozenset(Role)

_GRANTS: dict[Role, frozenset[Permission]] = {
    Role.MONITORING: frozenset({Permission.READ}),
    Role.ADMINISTRATOR: frozenset({Permission.READ, Permission.CONFIGURE, Permission.BACKUP}),
    Role.CLUSTER_MANAGER: frozenset({Permission.READ, Permission.STEER, Permission.BACKUP}),
}

#: Non-GET requests that steer the cluster (the cluster manager's).
_STEER_PATHS = frozenset(
    {
        "/api/ha/promote",
        "/api/ha/lease",
        "/api/ha/in-sync",
        "/api/ha/members",
        "/api/admin/stop",
        "/api/ha/shutdown",
    }
)
#: Non-GET requests that copy the store (a hot backup: administrator or cluster manager).
_BACKUP_PATHS = frozenset({"/api/store/backup"})


def parse_roles(text: str) -> frozenset[Role]:
    """``monitoring,administrator`` -> roles. :raises ValueError: naming an unknown role."""
    roles = set()
    for word in text.split(","):
        word = word.strip()
        if not word:
            continue
        try:
            roles.add(Role(word))
        except ValueError:
            known = ", ".join(r.value for r in Role)
            raise ValueError(f"unknown role {word!r} (known: {known})") from None
    return frozenset(roles)


def required_permission(method: str, path: str) -> Permission:
    """What a management request needs: GET/HEAD read, the cluster manager's POSTs steer,
    any other change configure."""
    if method.upper() in ("GET", "HEAD", "OPTIONS"):
        return Permission.READ
    if path.rstrip("/") in _STEER_PATHS:
        return Permission.STEER
    if path.rstrip("/") in _BACKUP_PATHS:
        return Permission.BACKUP
    return Permission.CONFIGURE


def allows(roles: frozenset[Role], permission: Permission) -> bool:
    return any(permission in _GRANTS[role] for role in roles)
