"""StatusCheck: ask another broker its HA state without logging in.

A broker announces its HA status in the server properties of connection.start
(``qpid.ha-status``), which it sends before any authentication. Reading that frame and
hanging up is the check a joining broker makes before it agrees to be promoted (seed 001:
a joining broker may become primary only in a new cluster, where nobody is beyond joining).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

from pamqp import commands

from broker.amqp import framing
from broker.ha.names import STATUS_PROPERTY
from common.url import Address


async def check_status(address: Address, timeout: float = 2.0) -> str | None:
    """The broker's HA state, ``"standalone"`` for a broker outside a cluster, or None when
    it cannot be reached or does not speak AMQP 0-9-1."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(address.host, address.port)
            writer.write(framing.PROTOCOL_HEADER)
            head = await reader.readexactly(7)
            ftype, channel, size = struct.unpack(">BHI", head)
            if ftype != framing.FRAME_METHOD or channel != 0 or size > 1 << 20:
                return None
            payload = await reader.readexactly(size + 1)
            method = framing.unmarshal_method(payload[:-1])
            if not isinstance(method, commands.Connection.Start):
                return None
            props = dict(method.server_properties or {})
            return str(props.get(STATUS_PROPERTY) or "standalone")
    except Exception:  # unreachable, refused, garbage: the status is unknown
        return None
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
