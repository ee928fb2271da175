"""The broker's import of aiohttp, without parsing the system's CA file for its client.

:Status: Beta

aiohttp's connector module builds its two default *client* TLS contexts when it is
imported (``ssl.create_default_context()``, and an unverified one that also calls
``set_default_verify_paths()``), and any ``from aiohttp import web`` imports it. Each has
OpenSSL parse the system's whole CA file (Debian's ``ca-certificates.crt``, about 150
certificates): 33 ms of CPU each, 65 ms of a broker's start (about 0.45 CPU s, started many
hundreds of times by the tests, and again at every fail-over restart). The broker serves
HTTP with aiohttp; it is no HTTP client, and never uses those contexts.

:func:`ca_directory_only` holds the CA *file* out of ``set_default_verify_paths`` while the
import runs: contexts made meanwhile trust the system's CA *directory* alone, where OpenSSL
finds a certificate by its subject's hash when it needs one (no parse now). On a system
whose CA directory holds the hashed certificates (Debian's ``update-ca-certificates``
writes both from the same list) the trust is the same; where it holds fewer (or
``SSL_CERT_FILE`` names a file of others), such a context trusts less, never more: it fails
closed, never open. ``SSL_CERT_DIR`` still names the directory. Nothing is held when there
is no CA directory.

The hold replaces ``ssl.SSLContext.set_default_verify_paths`` for the import's duration
and puts it back in a ``finally``: a context another thread made meanwhile gets the same
directory-only trust. The broker imports aiohttp once, from its start
(:meth:`broker.server.Broker.start`), before its management server listens.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ca_directory_only"]


@contextmanager
def ca_directory_only() -> Iterator[None]:
    """While it is open, ``SSLContext.set_default_verify_paths()`` loads the default CA
    directory alone (see the module docstring)."""
    capath = ssl.get_default_verify_paths().capath
    if not capath or not os.path.isdir(capath):
        yield
        return
    original = ssl.SSLContext.set_default_verify_paths

    def directory_only(context: ssl.SSLContext) -> None:
        context.load_verify_locations(capath=capath)

    setattr(ssl.SSLContext, "set_default_verify_paths", directory_only)  # noqa: B010
    try:
        yield
    finally:
        setattr(ssl.SSLContext, "set_default_verify_paths", original)  # noqa: B010
