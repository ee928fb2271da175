"""Whom an HA broker serves, sans-I/O: the refusals of its connection admission.

:meth:`broker.ha.ha_broker.HaBroker.admit` asks these at connection.open for every
connection but HA admin ones (``qpid.ha-admin``): a backup, or a primary that is fenced
or may not confirm, refuses clients with 530 NOT_ALLOWED and words that send them on to the
next address of their URL list; a replication link (``qpid.ha-backup``) is served only to
``ha-username`` (issue 13).
"""

from __future__ import annotations

from broker.core.errors import AmqpError, ReplyCode, RoutineRefusal
from broker.ha.state import HaState


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
