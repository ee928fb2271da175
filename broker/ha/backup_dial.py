"""Backup side, asyncio shell: dialling a primary as a backup (the link's first step).

:func:`connect_as_backup` opens an AMQP connection flagged as an HA backup's replication
link (client properties ``qpid.ha-backup``, its broker id, its address and epoch, and the
replication formats it speaks: :mod:`broker.ha.link_format`). Why a dial failed, in one
line, is :mod:`broker.ha.dial_failure`. Split from :mod:`broker.ha.backup` (the link),
which uses it, as does :mod:`broker.ha.remote_queue_replication`.

THREAD UNSAFE: runs on the broker's event loop.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

from broker.amqp.client import AmqpClient, connect
from broker.ha.link_reach import ReachTimes
from broker.ha.names import (
    BACKUP_PROPERTY,
    BROKER_ID_PROPERTY,
    EPOCH_PROPERTY,
    FORMATS_PROPERTY,
    URL_PROPERTY,
)
from broker.ha.state import HaState
from common.formats import FormatRange
from common.url import Address
from common.version import REPLICATION_FORMATS

__all__ = ["DIAL_PATIENCE", "PRIMARY_STATES", "answer_bound", "connect_as_backup"]

#: The HA states of a broker a backup replicates from.
PRIMARY_STATES = (HaState.RECOVERING.value, HaState.ACTIVE.value)

#: Seconds a backup link's dial may take in all, once its peer's host accepted the TCP
#: connection: a primary busy with thousands of clients reconnecting after a fail-over
#: answers a backup's handshake late, and a dial abandoned and begun again only adds to
#: its work (soak38: 35 dials abandoned after 1 s each, the restarted backups never
#: joined). The round of dials does not wait that long (:func:`answer_bound`,
#: :func:`broker.ha.redial.dial_loop`'s lingering dials).
DIAL_PATIENCE = 30.0


def answer_bound(heartbeat: float) -> float:
    """Seconds a dial of a link whose heartbeat is ``heartbeat`` holds up its round of
    dials (a frozen peer's host accepts connections too) before it lingers."""
    return max(1.0, min(10.0, heartbeat))


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
    formats: FormatRange = REPLICATION_FORMATS,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    timeout: float | None = None,
) -> AmqpClient:
    """Open a replication link to ``address``, flagged as an HA backup connection
    (``anonymous_fallback``: see :func:`~broker.amqp.client.handshake.choose_mechanism`)
    and announcing the replication ``formats`` it speaks; an ``ssl:`` address is dialled
    with TLS (``tls``, else the system's CAs). ``on_start``: reads connection.start's
    server properties before the login, and may end the dial there by raising
    (:func:`~broker.amqp.client.handshake.connect`). ``timeout``: the whole dial's bound
    (None: :func:`answer_bound`); its TCP connection's is a quarter heartbeat whatever it."""
    properties: dict[str, Any] = {
        "product": product,
        BACKUP_PROPERTY: True,
        BROKER_ID_PROPERTY: broker_id,
        URL_PROPERTY: url,
        FORMATS_PROPERTY: formats.text,
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
        timeout=answer_bound(heartbeat) if timeout is None else timeout,
        # a cut-off host fails the dial as fast as it fails the link (broker.ha.link_reach)
        connect_timeout=ReachTimes.for_heartbeat(max(1, int(heartbeat))).connect_timeout,
        anonymous_fallback=anonymous_fallback,
        tls=(tls or ssl.create_default_context()) if address.scheme == "ssl" else None,
        on_start=on_start,
    )
