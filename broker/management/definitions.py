"""RabbitMQ's definitions file, read and written (issue 30); no I/O, no broker.

A definitions file is one JSON object (RabbitMQ 3.10's ``rabbitmqctl export_definitions``
and ``GET /api/definitions``): ``users``, ``vhosts``, ``permissions``, ``queues``,
``exchanges``, ``bindings``, and what this broker does not have: ``policies``,
``parameters``, ``global_parameters``, ``topic_permissions``. :func:`parse` checks the whole
file before anything is applied: a bad one is a :class:`DefinitionsError` naming the field
(``queues[2].durable: must be true or false``), and nothing changes. What this broker cannot
take whole is listed, never dropped in silence (:attr:`Definitions.ignored`): every policy,
parameter and topic permission, a user's ``limits``, and a queue whose ``x-queue-type`` is
not ``classic`` (declared here as a classic queue, the argument kept). A vhost's limits
(``max-connections``, ``max-queues``: :mod:`broker.core.vhost_limits`) are imported, from
the vhost's ``limits`` object or from a ``parameters`` row of component ``vhost-limits``
(where RabbitMQ keeps and exports them), and exported as RabbitMQ does, in ``parameters``.

An export is a file RabbitMQ 3.10.8 imports (``POST /api/definitions``,
``rabbitmqctl import_definitions``): users whose hash is RabbitMQ's salted SHA-256 (imported
from RabbitMQ, or made with it) are in ``users`` as RabbitMQ writes them. A user whose hash
is this broker's scrypt cannot be: RabbitMQ knows no such algorithm and refuses the whole
file for one such user. Those users and their permissions go to a section of this broker's
own, :data:`QPIDD_ONLY` (``{"reason": ..., "users": [...], "permissions": [...]}``), which
RabbitMQ's import passes over and this broker's imports as ``users`` and ``permissions``:
a round trip through qpidd loses nothing, and the file names who stays behind
(:func:`left_for_qpidd`; ``qpid-ha definitions export`` prints them).

:func:`export` builds the file from rows the caller lists (the API's
:mod:`broker.management.definitions_api`); a vhost's own file (``GET
/api/definitions/{vhost}``) has no users, vhosts or permissions and no ``vhost`` field in
its objects, as RabbitMQ's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.core.exchange import EXCHANGE_TYPES
from broker.core.vhost_limits import check_limit
from broker.core.vhosts import check_vhost_name
from broker.management.users import permission_from_fields, user_from_fields
from broker.security.cluster_users import ClusterUser, UserError, VhostPermission
from broker.security.passwords import RABBIT_SHA256

__all__ = [
    "IGNORED_SECTIONS",
    "QPIDD_ONLY",
    "BindingRow",
    "Definitions",
    "DefinitionsError",
    "ExchangeRow",
    "QueueRow",
    "parse",
    "parse_text",
]

#: Sections this broker has nothing for: listed in the import's answer, item by item.
IGNORED_SECTIONS = ("policies", "parameters", "global_parameters", "topic_permissions")
#: This broker's own section: users RabbitMQ cannot import (scrypt hashes) and their
#: permissions; RabbitMQ's import passes over a section it does not know.
QPIDD_ONLY = "qpidd_only"
#: What the section says of itself, for whoever opens the file.
QPIDD_ONLY_REASON = (
    "users whose password hash is qpidd's scrypt, which RabbitMQ cannot import, and their"
    " permissions: qpidd imports them, RabbitMQ passes over this section"
)
#: Sections that say who made the file.
_ABOUT = ("rabbit_version", "rabbitmq_version", "product_name", "product_version")
_KNOWN = (
    *_ABOUT,
    "users",
    "vhosts",
    "permissions",
    "queues",
    "exchanges",
    "bindings",
    *IGNORED_SECTIONS,
    QPIDD_ONLY,
)
MAX_NAME_BYTES = 255


class DefinitionsError(ValueError):
    """A definitions file that cannot be imported; the message names the field."""


@dataclass(frozen=True, slots=True)
class QueueRow:
    vhost: str
    name: str
    durable: bool
    auto_delete: bool
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ExchangeRow:
    vhost: str
    name: str
    type: str
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BindingRow:
    vhost: str
    source: str
    destination: str
    destination_type: str
    routing_key: str
    arguments: dict[str, Any]


@dataclass
class Definitions:
    """A checked definitions file, ready to apply in this order."""

    vhosts: list[str] = field(default_factory=list)
    users: list[ClusterUser] = field(default_factory=list)
    permissions: list[VhostPermission] = field(default_factory=list)
    exchanges: list[ExchangeRow] = field(default_factory=list)
    queues: list[QueueRow] = field(default_factory=list)
    bindings: list[BindingRow] = field(default_factory=list)
    #: Each vhost's limits, by name (applied last: the file's own queues are not refused).
    limits: dict[str, dict[str, int]] = field(default_factory=dict)
    #: What is not applied, one line an item (``policies[0] 'ha-all' in vhost '/'``).
    ignored: list[str] = field(default_factory=list)


def parse_text(text: str | bytes, vhost: str | None = None) -> Definitions:
    """:func:`parse` of a JSON text."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise DefinitionsError(f"not valid JSON: {exc}") from None
    return parse(data, vhost)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse(data: object, vhost: str | None = None) -> Definitions:
    """Check a whole definitions file. ``vhost``: a vhost's own file (its objects go to
    ``vhost``; users, vhosts and permissions are refused, as RabbitMQ's per-vhost import).

    :raises DefinitionsError: naming the first bad field."""
    if not isinstance(data, dict):
        raise DefinitionsError("the definitions must be a JSON object")
    unknown = sorted(set(data) - set(_KNOWN))
    if unknown:
        raise DefinitionsError(f"{unknown[0]}: unknown section (known: {', '.join(_KNOWN)})")
    found = Definitions()
    if vhost is not None:
        for section in ("users", "vhosts", "permissions", QPIDD_ONLY):
            if data.get(section):
                raise DefinitionsError(
                    f"{section}: not taken by a vhost's import (POST /api/definitions)"
                )
    for i, row in enumerate(_section(data, "vhosts")):
        name = _string(row, "name", f"vhosts[{i}]")
        try:
            check_vhost_name(name)
        except ValueError as exc:
            raise DefinitionsError(f"vhosts[{i}].name: {exc}") from None
        found.vhosts.append(name)
        _limits(found, name, row.get("limits"), f"vhosts[{i}].limits")
    _users(found, _section(data, "users"), "users")
    _permissions(found, _section(data, "permissions"), "permissions")
    own = data.get(QPIDD_ONLY)
    if own is not None:
        if not isinstance(own, dict):
            raise DefinitionsError(f"{QPIDD_ONLY}: must be an object")
        _users(found, _section(own, "users", QPIDD_ONLY), f"{QPIDD_ONLY}.users")
        _permissions(found, _section(own, "permissions", QPIDD_ONLY), f"{QPIDD_ONLY}.permissions")
    for i, row in enumerate(_section(data, "exchanges")):
        where = f"exchanges[{i}]"
        type_ = _string(row, "type", where)
        if type_ not in EXCHANGE_TYPES:
            known = ", ".join(sorted(EXCHANGE_TYPES))
            raise DefinitionsError(
                f"{where}.type: exchange type {type_!r} is not supported here (supported:"
                f" {known}); nothing was imported"
            )
        found.exchanges.append(
            ExchangeRow(
                _vhost(row, where, vhost),
                _name(row, "name", where),
                type_,
                _flag(row, "durable", where, True),
                _flag(row, "auto_delete", where, False),
                _flag(row, "internal", where, False),
                _table(row, "arguments", where),
            )
        )
    for i, row in enumerate(_section(data, "queues")):
        where = f"queues[{i}]"
        queue = QueueRow(
            _vhost(row, where, vhost),
            _name(row, "name", where),
            _flag(row, "durable", where, True),
            _flag(row, "auto_delete", where, False),
            _table(row, "arguments", where),
        )
        kind = queue.arguments.get("x-queue-type", "classic")
        if kind != "classic":
            found.ignored.append(
                f"{where} '{queue.name}' in vhost '{queue.vhost}': x-queue-type {kind!r}"
                " is declared as a classic queue here (the argument is kept)"
            )
        found.queues.append(queue)
    for i, row in enumerate(_section(data, "bindings")):
        where = f"bindings[{i}]"
        kind = _string(row, "destination_type", where)
        if kind not in ("queue", "exchange"):
            raise DefinitionsError(f"{where}.destination_type: must be 'queue' or 'exchange'")
        source = _name(row, "source", where)
        if source == "":
            continue  # the default exchange's implicit bindings (RabbitMQ lists none)
        found.bindings.append(
            BindingRow(
                _vhost(row, where, vhost),
                source,
                _name(row, "destination", where),
                kind,
                _string(row, "routing_key", where, ""),
                _table(row, "arguments", where),
            )
        )
    for section in IGNORED_SECTIONS:
        for i, row in enumerate(_section(data, section)):
            if section == "parameters" and row.get("component") == VHOST_LIMITS:
                where = f"parameters[{i}]"
                _limits(found, _vhost(row, where, vhost), row.get("value"), f"{where}.value")
                continue
            found.ignored.append(f"{section}[{i}] {_describe(row)}: not supported here, ignored")
    return found


def _users(found: Definitions, rows: list[dict[str, Any]], section: str) -> None:
    for i, row in enumerate(rows):
        where = f"{section}[{i}]"
        name = _string(row, "name", where)
        try:
            found.users.append(user_from_fields(name, row, where + "."))
        except UserError as exc:
            raise DefinitionsError(str(exc)) from None
        if row.get("limits"):
            found.ignored.append(f"{where} '{name}': limits are not supported here, ignored")


def _permissions(found: Definitions, rows: list[dict[str, Any]], section: str) -> None:
    for i, row in enumerate(rows):
        where = f"{section}[{i}]"
        try:
            found.permissions.append(
                permission_from_fields(
                    _string(row, "vhost", where), _string(row, "user", where), row, where + "."
                )
            )
        except UserError as exc:
            raise DefinitionsError(str(exc)) from None


#: The runtime parameter component RabbitMQ keeps a vhost's limits in.
VHOST_LIMITS = "vhost-limits"


def _limits(found: Definitions, vhost: str, value: object, where: str) -> None:
    """A vhost's limits, ``{name: N}`` (RabbitMQ 3.10 writes an empty list for none)."""
    if value is None or value == []:
        return
    if not isinstance(value, dict):
        raise DefinitionsError(f'{where}: must be an object of limits, e.g. {{"max-queues": 10}}')
    for name, number in value.items():
        try:
            key, checked = check_limit(name, number)
        except ValueError as exc:
            raise DefinitionsError(f"{where}: {exc}") from None
        found.limits.setdefault(vhost, {})[key] = checked


def _section(data: Mapping[str, Any], name: str, inside: str = "") -> list[dict[str, Any]]:
    rows = data.get(name)
    if rows is None:
        return []
    label = f"{inside}.{name}" if inside else name
    if not isinstance(rows, list):
        raise DefinitionsError(f"{label}: must be a list")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DefinitionsError(f"{label}[{i}]: must be an object")
    return rows


def _describe(row: Mapping[str, Any]) -> str:
    name = row.get("name", row.get("user", ""))
    where = f" in vhost '{row['vhost']}'" if isinstance(row.get("vhost"), str) else ""
    component = f" ({row['component']})" if isinstance(row.get("component"), str) else ""
    return f"'{name}'{component}{where}"


def _string(row: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = row.get(key, default)
    if value is None:
        raise DefinitionsError(f"{where}.{key}: required")
    if not isinstance(value, str):
        raise DefinitionsError(f"{where}.{key}: must be a string")
    return value


def _name(row: Mapping[str, Any], key: str, where: str) -> str:
    value = _string(row, key, where)
    if len(value.encode("utf-8")) > MAX_NAME_BYTES:
        raise DefinitionsError(f"{where}.{key}: longer than {MAX_NAME_BYTES} bytes")
    return value


def _vhost(row: Mapping[str, Any], where: str, vhost: str | None) -> str:
    if vhost is not None:
        return vhost
    return _string(row, "vhost", where, "/")


def _flag(row: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = row.get(key, default)
    if not isinstance(value, bool):
        raise DefinitionsError(f"{where}.{key}: must be true or false")
    return value


def _table(row: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = row.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DefinitionsError(f"{where}.{key}: must be an object")
    return dict(value)


def export(
    version: str,
    vhosts: Iterable[str] | None,
    users: Iterable[ClusterUser] | None,
    permissions: Iterable[VhostPermission] | None,
    queues: Iterable[dict[str, Any]],
    exchanges: Iterable[dict[str, Any]],
    bindings: Iterable[dict[str, Any]],
    limits: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """The definitions file (RabbitMQ's keys; ``None`` sections left out: a vhost's file).
    ``limits``: each vhost's, written as RabbitMQ's ``vhost-limits`` parameters. Users
    RabbitMQ cannot import (scrypt hashes) and their permissions go to :data:`QPIDD_ONLY`."""
    out: dict[str, Any] = {
        "rabbit_version": "3.10.8",  # the format this follows, for RabbitMQ's importer
        "product_name": "qpidd",
        "product_version": version,
    }
    rows = [u.definition() for u in users or ()]
    kept = {row["name"] for row in rows if row["hashing_algorithm"] != RABBIT_SHA256}
    if users is not None:
        out["users"] = [row for row in rows if row["name"] not in kept]
    if vhosts is not None:
        out["vhosts"] = [{"name": name, "limits": [], "metadata": {}} for name in vhosts]
    grants = [p.definition() for p in permissions or ()]
    if permissions is not None:
        out["permissions"] = [p for p in grants if p["user"] not in kept]
        out["topic_permissions"] = []
    out["parameters"] = [
        {"value": dict(named), "vhost": vhost, "component": VHOST_LIMITS, "name": "limits"}
        for vhost, named in (limits or {}).items()
    ]
    if vhosts is not None:
        out["global_parameters"] = []
    out["policies"] = []
    out["queues"] = list(queues)
    out["exchanges"] = list(exchanges)
    out["bindings"] = list(bindings)
    if kept:
        out[QPIDD_ONLY] = {
            "reason": QPIDD_ONLY_REASON,
            "users": [row for row in rows if row["name"] in kept],
            "permissions": [p for p in grants if p["user"] in kept],
        }
    return out


def left_for_qpidd(data: Mapping[str, Any]) -> list[str]:
    """The users of an export that RabbitMQ will not import (its :data:`QPIDD_ONLY`)."""
    own = data.get(QPIDD_ONLY)
    rows = own.get("users") if isinstance(own, dict) else None
    if not isinstance(rows, list):
        return []
    return [str(row.get("name")) for row in rows if isinstance(row, dict)]
