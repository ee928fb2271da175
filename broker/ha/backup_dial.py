"""Backup side, asyncio shell: dialling a primary as a backup (the link's first step).

:func:`connect_as_backup` opens an AMQP connection flagged as an HA backup's replication
link (client properties ``qpid.ha-backup``, its broker id, its address and epoch);
:class:`NotPrimary` is the refusal of a broker that answered but is not an HA primary; and
:func:`describe_dial_failure` turns any failed dial into one line and says whether it is
routine (a broker not yet the primary, normal while a cluster starts). Split from
:mod:`broker.ha.backup` (the link), which uses them, as does
:mod:`broker.ha.remote_queue_replication`.

THREAD UNSAFE: runs on the broker's event loop.
"""

from __future__ import annotations

import re
import ssl
from typing import Any

from broker.amqp.client import AmqpClient, ConnectionRefusedByBroker, connect
from broker.amqp.client.handshake import NoUsableMechanism
from broker.core.errors import ReplyCode
from broker.ha.names import BACKUP_PROPERTY, BROKER_ID_PROPERTY, EPOCH_PROPERTY, URL_PROPERTY
from broker.ha.redial import DialRefused
from broker.ha.state import HaState
from common.url import Address

__all__ = ["PRIMARY_STATES", "NotPrimary", "connect_as_backup", "describe_dial_failure"]

PRIMARY_STATES = (HaState.RECOVERING.value, HaState.ACTIVE.value)
#: States of a broker that may yet become the primary: refusals from them are routine.
_BACKUP_STATES = (HaState.JOINING.value, HaState.CATCHUP.value, HaState.READY.value)
#: The text of a backup's 530 refusal (:meth:`~broker.ha.ha_broker.HaBroker.admit`).
_NOT_PRIMARY = re.compile(r"^HA backup: not the primary \(state (?P<state>[\w-]+)\)")


class NotPrimary(DialRefused):
    """The broker dialled answered but is not an HA primary; ``state`` is its HA status
    (None: not an HA broker)."""

    def __init__(self, state: str | None) -> None:
        super().__init__(f"not a primary ({state or 'not an HA broker'})")
        self.state = state


def describe_dial_failure(address: Address, exc: Exception) -> tuple[str, bool]:
    """``(reason, routine)`` of a failed dial: one line for the log and ``/api/ha``, and
    whether it is normal while a cluster starts or fails over (the broker dialled is a
    backup, not yet the primary)."""
    if isinstance(exc, NotPrimary):
        return str(exc), exc.state in _BACKUP_STATES
    if isinstance(exc, ConnectionRefusedByBroker):
        try:
            name = ReplyCode(exc.reply_code).name
        except ValueError:
            name = str(exc.reply_code)
        text = exc.reply_text.removeprefix(f"{name} - ")  # our broker's "NAME - text"
        match = _NOT_PRIMARY.match(text)
        if exc.reply_code == ReplyCode.NOT_ALLOWED and match:
            return f"not a primary ({match['state']})", True
        what = "login refused" if exc.reply_code == ReplyCode.ACCESS_REFUSED else "refused"
        return f"{what}: {name} - {text}", False
    if isinstance(exc, NoUsableMechanism):
        return f"cannot log in: {exc}", False
    cause = exc.__cause__
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused", False
    text = " ".join(str(exc).split())
    return text.removeprefix(f"{address.host}:{address.port}: ") or type(exc).__name__, False


async def connect_as_backup(
    address: Address,
    *,
    user: str | None,
    password: str | None,
    mechanism: str,
    heartbeat: float,
    product: str,
    broker_id: str,
    url: str,
    epoch: int | None = None,
    anonymous_fallback: bool = False,
    tls: ssl.SSLContext | None = None,
) -> AmqpClient:
    """Open a replication link to ``address``, flagged as an HA backup connection
    (``anonymous_fallback``: see :func:`~broker.amqp.client.handshake.choose_mechanism`);
    an ``ssl:`` address is dialled with TLS (``tls``, else the system's CAs)."""
    properties: dict[str, Any] = {
        "product": product,
        BACKUP_PROPERTY: True,
        BROKER_ID_PROPERTY: broker_id,
        URL_PROPERTY: url,
    }
    if epoch is not None:
        properties[EPOCH_PROPERTY] = epoch
    return await connect(
        address.host,
        address.port,
        user=user,
        password=password,
        mechanism=mechanism,
        client_properties=properties,
        heartbeat=max(1, int(heartbeat)),
        timeout=max(1.0, min(10.0, heartbeat)),
        anonymous_fallback=anonymous_fallback,
        tls=(tls or ssl.create_default_context()) if address.scheme == "ssl" else None,
    )
