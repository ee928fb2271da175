"""Opening a client connection: :func:`connect` and the handshake.

Contract: :func:`connect` opens a TCP connection, sends the protocol header and runs the
handshake (start/start-ok with PLAIN, AMQPLAIN or ANONYMOUS, tune/tune-ok, open of vhost
``/``), all bounded by ``timeout``, and returns an open
:class:`~broker.amqp.client.connection.AmqpClient`. The mechanism is the caller's, or with
``anonymous_fallback`` ANONYMOUS when the caller's cannot be used and the broker offers it
(:func:`choose_mechanism`); a password is only ever sent over the caller's mechanism. A
broker that answers the handshake with connection.close (530 NOT_ALLOWED from a backup
that refuses clients, 403 ACCESS_REFUSED for a bad login) raises
:class:`~broker.amqp.client.errors.ConnectionRefusedByBroker`; a socket error, EOF,
time-out or garbled handshake raises :class:`~broker.amqp.client.errors.ConnectionFailed`;
the socket is closed either way.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pamqp import commands, encode
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.client.connection import _READ_LIMIT, AmqpClient
from broker.amqp.client.errors import ClientError, ConnectionFailed, ConnectionRefusedByBroker
from broker.amqp.client.wire import (
    _FRAME_END,
    _FRAME_HEAD,
    _FRAME_HEARTBEAT,
    _FRAME_METHOD,
    _U32,
    _method_frame,
    _text,
)
from broker.core.errors import AmqpError

CLIENT_PRODUCT = "qpid-ha-py client"
CLIENT_VERSION = "0.1.0"


def _sasl_response(mechanism: str, user: str | None, password: str | None) -> bytes:
    if mechanism == "ANONYMOUS":
        return b""
    if user is None or password is None:
        raise ValueError(f"{mechanism} needs a user and a password")
    if mechanism == "PLAIN":
        return b"\0" + user.encode() + b"\0" + password.encode()
    if mechanism == "AMQPLAIN":
        return encode.field_table({"LOGIN": user, "PASSWORD": password})[4:]
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}: PLAIN, AMQPLAIN or ANONYMOUS")


def _start_ok_frame(properties: dict[str, Any], mechanism: str, response: bytes) -> bytes:
    # By hand: pamqp encodes a response only as UTF-8 text, AMQPLAIN's is binary.
    payload = b"".join(
        (
            b"\x00\x0a\x00\x0b",
            encode.field_table(properties),
            framing.short_str_bytes(mechanism),
            _U32.pack(len(response)),
            response,
            framing.short_str_bytes("en_US"),
        )
    )
    return _FRAME_HEAD.pack(_FRAME_METHOD, 0, len(payload)) + payload + framing.FRAME_END_BYTE


async def _read_method(reader: asyncio.StreamReader, limit: int) -> Method:
    """The next connection method of the handshake (heartbeats are skipped)."""
    while True:
        head = await reader.readexactly(7)
        if head[:4] == b"AMQP":
            rest = await reader.readexactly(1)
            raise ConnectionFailed(
                f"the broker does not speak AMQP 0-9-1: it answered {head + rest!r}"
            )
        ftype, channel, size = _FRAME_HEAD.unpack(head)
        if size + 8 > limit:
            raise ConnectionFailed(f"handshake frame of {size + 8} bytes exceeds {limit}")
        data = await reader.readexactly(size + 1)
        if data[-1] != _FRAME_END:
            raise ConnectionFailed("handshake frame without its end octet")
        if ftype == _FRAME_HEARTBEAT:
            continue
        if ftype != _FRAME_METHOD or channel != 0:
            raise ConnectionFailed(f"unexpected frame type {ftype} on channel {channel}")
        try:
            return framing.unmarshal_method(data[:-1])
        except AmqpError as exc:
            raise ConnectionFailed(f"bad handshake method: {exc.reply_text}") from exc


def _refused(writer: asyncio.StreamWriter, method: Method) -> ClientError:
    if isinstance(method, commands.Connection.Close):
        writer.write(_method_frame(commands.Connection.CloseOk(), 0))
        return ConnectionRefusedByBroker(int(method.reply_code or 0), _text(method.reply_text))
    return ConnectionFailed(f"unexpected {method.name} during the handshake")


class NoUsableMechanism(ConnectionFailed):
    """No SASL mechanism this client may use is offered (:func:`choose_mechanism`)."""


def _needs_credentials(mechanism: str) -> bool:
    return mechanism != "ANONYMOUS"


def choose_mechanism(
    offered: Sequence[str],
    mechanism: str,
    user: str | None,
    password: str | None,
    *,
    anonymous_fallback: bool,
) -> str:
    """The mechanism to log in with, given what the broker ``offered`` in connection.start.

    ``mechanism`` when the broker offers it and it can be used (ANONYMOUS needs nothing,
    PLAIN and AMQPLAIN a user and a password). Otherwise, with ``anonymous_fallback``,
    ANONYMOUS when the broker offers it: it sends no credentials, so a password never goes
    over a mechanism the caller did not name. Pure: no I/O.

    :raises NoUsableMechanism: neither can be used; the message says what is missing.
    """
    has_credentials = user is not None and password is not None
    usable = not _needs_credentials(mechanism) or has_credentials
    if mechanism in offered and usable:
        return mechanism
    if anonymous_fallback and "ANONYMOUS" in offered:
        return "ANONYMOUS"
    if mechanism not in offered:
        raise NoUsableMechanism(
            f"the broker offers {' '.join(offered) or 'no mechanism'}, not {mechanism}"
        )
    raise NoUsableMechanism(
        f"{mechanism} needs a user and a password, and the broker offers"
        f" {' '.join(offered)}, not ANONYMOUS"
    )


def _negotiate(ours: int, theirs: int) -> int:
    """The smaller non-zero value (0 when both are 0)."""
    if ours and theirs:
        return min(ours, theirs)
    return ours or theirs


@dataclass(frozen=True)
class _Login:
    """What :func:`connect` was asked to log in with (the choice waits for connection.start)."""

    mechanism: str
    user: str | None
    password: str | None = field(repr=False)
    anonymous_fallback: bool


async def _handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    properties: dict[str, Any],
    login: _Login,
    frame_max: int,
    heartbeat: int,
    on_start: Callable[[dict[str, Any]], None] | None = None,
) -> AmqpClient:
    limit = max(frame_max or 131072, framing.FRAME_MIN_SIZE)
    writer.write(framing.PROTOCOL_HEADER)
    start = await _read_method(reader, limit)
    if not isinstance(start, commands.Connection.Start):
        raise _refused(writer, start)
    if on_start is not None:
        on_start(dict(start.server_properties or {}))  # raises: no login, the dial ends
    offered = _text(start.mechanisms).split()
    mechanism = choose_mechanism(
        offered,
        login.mechanism,
        login.user,
        login.password,
        anonymous_fallback=login.anonymous_fallback,
    )
    response = _sasl_response(mechanism, login.user, login.password)
    writer.write(_start_ok_frame(properties, mechanism, response))
    tune = await _read_method(reader, limit)
    if not isinstance(tune, commands.Connection.Tune):
        raise _refused(writer, tune)
    frame_max = _negotiate(frame_max, int(tune.frame_max or 0)) or 131072
    heartbeat = _negotiate(heartbeat, int(tune.heartbeat or 0))
    channel_max = int(tune.channel_max or 0) or 65535
    writer.write(
        _method_frame(
            commands.Connection.TuneOk(
                channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
            ),
            0,
        )
        + _method_frame(commands.Connection.Open(virtual_host="/"), 0)
    )
    opened = await _read_method(reader, frame_max)
    if not isinstance(opened, commands.Connection.OpenOk):
        raise _refused(writer, opened)
    server_properties = dict(start.server_properties or {})
    return AmqpClient(
        reader,
        writer,
        server_properties=server_properties,
        frame_max=frame_max,
        channel_max=channel_max,
        heartbeat=heartbeat,
    )


async def connect(
    host: str,
    port: int,
    *,
    user: str | None,
    password: str | None,
    mechanism: str = "PLAIN",
    client_properties: dict[str, Any] | None = None,
    heartbeat: int = 0,
    frame_max: int = 131072,
    timeout: float = 10.0,
    anonymous_fallback: bool = False,
    tls: ssl.SSLContext | None = None,
    connect_timeout: float | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
) -> AmqpClient:
    """Connect, authenticate and open vhost ``/``; everything within ``timeout`` seconds.

    ``on_start``: called with connection.start's server properties before the login
    (start-ok); an exception it raises ends the dial there (the socket closed, nothing
    sent but the protocol header), raised to the caller as it is: a backup reads the
    broker's HA status so, and logs into none that is not the primary.

    ``connect_timeout``: the TCP connection alone (the peer host's kernel answers, whatever
    its broker's load) within that many seconds, so that a dial of a host cut off from this
    one fails fast (:func:`open_socket`); None: within ``timeout``.

    ``tls``: dial with TLS (the peer's certificate checked for ``host`` by the context).

    ``frame_max`` and ``heartbeat`` are negotiated as the smaller non-zero value of ours
    and the broker's (so ``heartbeat=0`` takes the broker's). ``client_properties`` are
    merged over the defaults (product, version, platform, capabilities; a ``capabilities``
    table is merged too).

    ``anonymous_fallback``: log in with ANONYMOUS when the broker offers it and
    ``mechanism`` cannot be used (not offered, or no user and password given);
    :func:`choose_mechanism` has the rule. Without it, missing credentials are a
    ``ValueError`` before any connection is made.

    :raises ConnectionRefusedByBroker: the broker closed the handshake (403, 530, ...).
    :raises ConnectionFailed: socket error, EOF, time-out, or a garbled handshake.
    :raises ValueError: bad arguments (unknown mechanism, missing credentials, frame_max).
    """
    if frame_max and frame_max < framing.FRAME_MIN_SIZE:
        raise ValueError(f"frame_max {frame_max} is below the minimum {framing.FRAME_MIN_SIZE}")
    if heartbeat < 0 or heartbeat > 0xFFFF:
        raise ValueError(f"heartbeat {heartbeat} outside 0..65535")
    if anonymous_fallback:
        _sasl_response(mechanism, "", "")  # only the mechanism's name is checked here
    else:
        _sasl_response(mechanism, user, password)
    login = _Login(mechanism, user, password, anonymous_fallback)
    capabilities: dict[str, Any] = {
        "consumer_cancel_notify": True,
        "publisher_confirms": True,
        "basic.nack": True,
        "authentication_failure_close": True,
    }
    properties: dict[str, Any] = {
        "product": CLIENT_PRODUCT,
        "version": CLIENT_VERSION,
        "platform": "Python",
        "capabilities": capabilities,
    }
    for key, value in (client_properties or {}).items():
        if key == "capabilities" and isinstance(value, dict):
            capabilities.update(value)
        else:
            properties[key] = value
    writer: asyncio.StreamWriter | None = None
    where = f"{host}:{port}"
    try:
        async with asyncio.timeout(timeout):
            if connect_timeout is None:
                reader, writer = await asyncio.open_connection(
                    host, port, limit=_READ_LIMIT, ssl=tls, server_hostname=host if tls else None
                )
            else:
                sock = await open_socket(host, port, connect_timeout)
                reader, writer = await asyncio.open_connection(
                    sock=sock, limit=_READ_LIMIT, ssl=tls, server_hostname=host if tls else None
                )
            return await _handshake(
                reader, writer, properties, login, frame_max, heartbeat, on_start
            )
    except ClientError:
        if writer is not None:
            writer.close()
        raise
    except TimeoutError:
        if writer is not None:
            writer.close()
        raise ConnectionFailed(f"{where}: no open connection within {timeout} s") from None
    except (OSError, EOFError) as exc:
        if writer is not None:
            writer.close()
        detail = "connection closed during the handshake" if isinstance(exc, EOFError) else exc
        raise ConnectionFailed(f"{where}: {detail}") from exc
    except BaseException:  # on_start's refusal, a cancellation: the socket closed all the same
        if writer is not None:
            writer.close()
        raise


async def open_socket(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to ``host:port`` within ``timeout`` seconds (each of the host's
    addresses in turn): the handshake of SYN and SYN-ACK is the kernel's, answered as fast
    by a host whose processes are starved, so a short ``timeout`` finds only a host that is
    unreachable (or a SYN lost: the caller dials again).

    :raises ConnectionFailed: no address answered (the last address's reason).
    """
    loop = asyncio.get_running_loop()
    where = f"{host}:{port}"
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConnectionFailed(f"{where}: {exc}") from exc
    reason = "no address"
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            async with asyncio.timeout(timeout):
                await loop.sock_connect(sock, address)
            return sock
        except TimeoutError:
            reason = f"no answer to connecting within {timeout:g} s"
        except OSError as exc:
            reason = str(exc) or type(exc).__name__
        except BaseException:
            sock.close()
            raise
        sock.close()
    raise ConnectionFailed(f"{where}: {reason}")
