"""TLS for the broker's listeners and its outgoing links: SSL contexts from the options,
reloaded in place, and the client identity a certificate carries (issue 13, item 1).

- :func:`server_context`: ``--ssl-cert-file`` and ``--ssl-key-file`` (PEM) make the
  context of the AMQPS listener (``--ssl-port``, default 5671) and of the HTTPS management
  API; ``--ssl-ca-file`` names the CAs client certificates are checked against (asked for,
  optional), and ``--ssl-require-client-authentication`` makes one required. TLS 1.2 at
  least.
- :func:`reload_server_context`: SIGHUP reads the certificate, key and CA files again into
  the same context, so every later handshake uses them (connections already open keep
  theirs). A bad file leaves the running ones in place.
- :func:`client_context`: what a backup dials an ``ssl:`` address of ``ha-brokers-url``
  with: the peer verified against ``--ssl-ca-file`` (the system's CAs without one) and its
  host name checked; the broker's own certificate is offered as a client certificate.
- :func:`certificate_identity`: a verified peer certificate's subject common name, the
  user of SASL EXTERNAL.

:class:`TlsError` says which file is wrong and why, in one line.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TlsError",
    "TlsSettings",
    "certificate_identity",
    "client_context",
    "link_context",
    "reload_server_context",
    "server_context",
]


class TlsError(ValueError):
    """A certificate, key or CA file cannot be used (the message names it)."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert_file: str
    key_file: str
    ca_file: str | None = None
    require_client_auth: bool = False

    @classmethod
    def from_options(cls, options: Any) -> TlsSettings | None:
        """The TLS settings of the broker's options, None when no certificate is given.

        :raises TlsError: half a configuration (a certificate without its key...).
        """
        cert, key = options.ssl_cert_file, options.ssl_key_file
        if not cert and not key:
            if options.ssl_require_client_authentication:
                raise TlsError("ssl-require-client-authentication needs ssl-cert-file")
            return None
        if not cert or not key:
            raise TlsError("ssl-cert-file and ssl-key-file go together")
        if options.ssl_require_client_authentication and not options.ssl_ca_file:
            raise TlsError("ssl-require-client-authentication needs ssl-ca-file")
        return cls(cert, key, options.ssl_ca_file, options.ssl_require_client_authentication)


def _load(context: ssl.SSLContext, settings: TlsSettings) -> None:
    try:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(
            f"cannot use certificate {settings.cert_file!r} with key {settings.key_file!r}:"
            f" {_reason(exc)}"
        ) from None
    if settings.ca_file:
        try:
            context.load_verify_locations(cafile=settings.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"cannot use CA file {settings.ca_file!r}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context of the TLS listeners. :raises TlsError: naming the bad file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context, settings)
    if settings.ca_file:
        context.verify_mode = (
            ssl.CERT_REQUIRED if settings.require_client_auth else ssl.CERT_OPTIONAL
        )
    return context


def reload_server_context(context: ssl.SSLContext, settings: TlsSettings) -> None:
    """Read the files again into ``context``; first checks them in a scratch context so a
    bad file leaves ``context`` as it was. :raises TlsError: naming the bad file."""
    server_context(settings)  # raises before anything changes
    _load(context, settings)


def client_context(settings: TlsSettings | None, ca_file: str | None = None) -> ssl.SSLContext:
    """The context a backup dials its primary's ``ssl:`` address with."""
    context = ssl.create_default_context(cafile=ca_file or (settings and settings.ca_file) or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings is not None:
        try:
            context.load_cert_chain(settings.cert_file, settings.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(
                f"cannot use certificate {settings.cert_file!r}: {_reason(exc)}"
            ) from None
    return context


def certificate_identity(peercert: Any) -> str | None:
    """The subject common name of a verified peer certificate (``getpeercert()``'s dict)."""
    if not isinstance(peercert, dict):
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None


def link_context(options: Any) -> ssl.SSLContext | None:
    """What a backup dials the ``ssl:`` addresses of ``ha-brokers-url`` with: the peer
    checked against ``--ssl-ca-file`` (the system's CAs without one), the broker's own
    certificate offered; None when the URL has no ``ssl:`` address."""
    url = options.ha_brokers_url or ""
    if "ssl:" not in url.lower():
        return None
    return client_context(TlsSettings.from_options(options), options.ssl_ca_file)
