"""Whom an HA broker serves, sans-I/O: the refusals of its connection admission.

:meth:`broker.ha.ha_broker.HaBroker.admit` asks these at connection.open for every
connection but HA admin ones (``qpid.ha-admin``): a backup, or a primary that is fenced
or may not confirm, refuses clients with 530 NOT_ALLOWED and words that send them on to the
next address of their URL list; a replication link (``qpid.ha-backup``) is served only to
``ha-username`` (issue 13), only if it speaks a replication format this broker speaks
(:func:`link_format_refusal`), and only if that format carries every replicated object this
broker holds (:func:`link_carry_refusal`: a backup of an older release joining a cluster
whose primary accepted what only a newer format carries).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from broker.core.errors import AmqpError, ReplyCode, RoutineRefusal
from broker.core.vhost import VirtualHost
from broker.ha.link_format import NoCommonFormat, link_format
from broker.ha.names import URL_PROPERTY
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.replication_contract import Uncarried
from broker.ha.state import HaState
from common.formats import FormatRange


def client_refusal(state: HaState, not_serving: bool, public_url: str) -> AmqpError | None:
    """None when a client (or a backup's link) may connect: a primary that serves. A
    refusal is routine (:class:`RoutineRefusal`, logged at info): clients with a URL list
    meet it whenever they try a backup first."""
    if not_serving:
        return RoutineRefusal(ReplyCode.NOT_ALLOWED, "HA broker fenced: not serving")
    if state.is_primary:
        return None
    return RoutineRefusal(
        ReplyCode.NOT_ALLOWED,
        f"HA backup: not the primary (state {state.value}); clients connect to {public_url}",
    )


def link_user_refusal(link_user: str | None, user: str | None) -> AmqpError | None:
    """Replication links only from ``ha-username``: another user is refused at
    connection.open, so the backup's dial fails, says why and stays joining."""
    if link_user is None or user is None or user == link_user:
        return None
    return AmqpError(
        ReplyCode.ACCESS_REFUSED,
        f"replication links are served to user '{link_user}' only (ha-username), not '{user}'",
    )


def link_format_refusal(
    ours: FormatRange, properties: Mapping[str, Any], peer: str
) -> AmqpError | None:
    """None when a backup's link speaks a replication format this broker speaks, else the
    refusal at connection.open: 540 NOT_IMPLEMENTED, its text the one line both sides log
    (:func:`broker.ha.link_format.link_format`)."""
    try:
        link_format(ours, properties, f"backup {properties.get(URL_PROPERTY) or peer}")
    except NoCommonFormat as exc:
        return AmqpError(ReplyCode.NOT_IMPLEMENTED, str(exc))
    return None


def link_carry_refusal(
    vhosts: Iterable[VirtualHost],
    default: ReplicateLevel,
    format_: int,
    backup: str,
    uncarried: Uncarried | None = None,
) -> AmqpError | None:
    """None when replication format ``format_`` (a backup's link) carries every replicated
    object in ``vhosts``, else the refusal at connection.open: 540 NOT_IMPLEMENTED naming
    the backup, its format and the first object it could not apply (never a link that
    stalls on it: a declare-ok or confirm held, a stream that cannot be named).
    ``uncarried``: the broker's memory of earlier scans (each dial of a refused backup
    scans again)."""
    found = (uncarried or Uncarried()).first(vhosts, default, format_)
    if found is None:
        return None
    return AmqpError(
        ReplyCode.NOT_IMPLEMENTED,
        f"no common replication format carries this primary's configuration: backup {backup}"
        f" speaks replication format {format_} at most: upgrade it; {found}",
    )
