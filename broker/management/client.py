"""A small blocking client of a broker's management API (JSON over HTTP, Basic auth).

Shared by ``qpid-ha`` and ``qpid-ha-agent``: both talk to a broker only through this API.
An ``ssl:`` address (``-b ssl:host:8672``, ``--broker user/pw@ssl:host:8672``) is HTTPS,
the broker's certificate checked against ``$QPID_HA_SSL_CA_FILE`` (the system's CAs when
unset) and its host name.

Error Handling
==============

Every failure is a :class:`ManagementError` with a one-line message naming the address:
``unreachable`` True when nothing answered (refused, timed out, reset) or what answered
does not speak HTTP (an AMQP port given for the management port), ``status`` the HTTP
status when the broker answered with an error (its JSON ``reason`` in the message).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.client
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any, BinaryIO

from common.url import BrokerUrl

__all__ = ["ManagementClient", "ManagementError"]


class ManagementError(Exception):
    """A management call failed; ``str()`` is one line naming the broker."""

    def __init__(self, message: str, *, status: int | None = None, unreachable: bool = False):
        super().__init__(message)
        self.status = status
        self.unreachable = unreachable


#: The CA file an ``ssl:`` management address is checked against (the system's CAs unset).
CA_FILE_VARIABLE = "QPID_HA_SSL_CA_FILE"


def _tls_context() -> ssl.SSLContext:
    """The context an ``ssl:`` call checks the broker with: made once per CA file (and
    again when the file changes: a CA rotated under a running agent is read), not at every
    call (each parse of the system's CA file is about 33 ms of CPU, and an agent calls its
    broker several times a second)."""
    cafile = os.environ.get(CA_FILE_VARIABLE) or None
    try:
        stamp = os.stat(cafile).st_mtime_ns if cafile is not None else 0
    except OSError:
        stamp = -1  # made (and its error raised) at every call until the file is there
    return _context_for(cafile, stamp)


@functools.lru_cache(maxsize=4)
def _context_for(cafile: str | None, stamp: int) -> ssl.SSLContext:
    """One context per CA file and its modification time (``stamp``); a failure is not kept."""
    return ssl.create_default_context(cafile=cafile)


class ManagementClient:
    """Calls on one broker's management address (``url.addresses[0]``)."""

    def __init__(self, url: BrokerUrl, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout

    @property
    def address(self) -> str:
        return str(self.url.addresses[0])

    def get(self, path: str) -> Any:
        return self.call(path)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.call(path, body)

    def call(
        self,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        method: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """GET ``path`` (POST ``body`` as JSON when given; ``method`` when given; extra
        ``headers``); the decoded JSON answer."""
        try:
            with self._open(path, body, method, headers) as response:
                return json.load(response)
        except json.JSONDecodeError as exc:
            raise ManagementError(f"{self.address} sent a non-JSON answer for {path}") from exc
        except Exception as exc:
            failure = self._failure(exc, path)
            if failure is exc:
                raise
            raise failure from exc

    @contextlib.contextmanager
    def stream(self, path: str, body: dict[str, Any]) -> Iterator[BinaryIO]:
        """POST ``body`` to ``path``; the answer's body as a file to read (a hot backup's
        segments). Failures to connect or an error answer are :class:`ManagementError`;
        errors while reading are the caller's (``OSError``)."""
        try:
            response = self._open(path, body, None)
        except Exception as exc:
            failure = self._failure(exc, path)
            if failure is exc:
                raise
            raise failure from exc
        with response:
            yield response

    def _open(
        self,
        path: str,
        body: dict[str, Any] | None,
        method: str | None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        address = self.address
        data = None if body is None else json.dumps(body).encode()
        https = self.url.addresses[0].scheme == "ssl"  # -b ssl:host:port: HTTPS
        request = urllib.request.Request(
            f"{'https' if https else 'http'}://{address}{path}", data=data, method=method
        )
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        if self.url.user is not None:
            token = f"{self.url.user}:{self.url.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        context = _tls_context() if https else None
        return urllib.request.urlopen(request, timeout=self.timeout, context=context)

    def _failure(self, exc: Exception, path: str) -> Exception:
        """The :class:`ManagementError` for an exception of a call (others unchanged)."""
        address = self.address
        if isinstance(exc, urllib.error.HTTPError):
            try:
                reason = str(json.load(exc).get("reason", ""))
            except (json.JSONDecodeError, AttributeError, OSError):
                reason = ""
            detail = f": {reason}" if reason else ""
            if exc.code == 401:  # which login was refused (qpid-ha's default is guest)
                who = "no user" if self.url.user is None else f"user {self.url.user!r}"
                detail = f"{detail or ':'} ({who})"
            return ManagementError(
                f"{address} answered HTTP {exc.code} for {path}{detail}", status=exc.code
            )
        if isinstance(exc, http.client.HTTPException):
            if isinstance(exc, ConnectionError):  # RemoteDisconnected: nothing answered
                return ManagementError(f"cannot reach broker {address}: {exc}", unreachable=True)
            return ManagementError(
                f"{address} is not a management port: it does not answer HTTP (an AMQP port?"
                " qpidd's management API listens on --mgmt-port, 8672 by default)",
                unreachable=True,
            )
        if isinstance(exc, (urllib.error.URLError, OSError, TimeoutError)):
            why = getattr(exc, "reason", None) or exc
            return ManagementError(f"cannot reach broker {address}: {why}", unreachable=True)
        return exc
