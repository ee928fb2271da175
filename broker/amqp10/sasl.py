"""The AMQP 1.0 SASL layer (part 5, section 5.3), server side, sans-I/O.

After the client's ``AMQP 3 1 0 0`` header the broker sends its header and
``sasl-mechanisms``; the client answers ``sasl-init`` (one mechanism and its initial
response); the broker answers ``sasl-outcome``. The login itself is the 0-9-1 listener's
(:class:`~broker.security.sasl.Authenticator`: the same users, loopback rule, back-off and
slow-hash-off-the-loop :class:`~broker.security.sasl.PasswordCheck`), so a user logs in
the same way over either protocol. Offered: ``PLAIN``; ``ANONYMOUS`` only with
authentication off (``--auth no``); ``EXTERNAL`` first on a TLS connection whose client
presented a verified certificate. (0-9-1's ``AMQPLAIN`` is not a SASL mechanism.)
"""

from __future__ import annotations

from broker.security.sasl import AuthenticationError, Authenticator, PasswordCheck

#: The mechanisms of the Authenticator that AMQP 1.0's SASL layer offers.
_SASL_MECHANISMS = ("EXTERNAL", "PLAIN", "ANONYMOUS")


def offered(authenticator: Authenticator, tls_identity: str | None) -> tuple[str, ...]:
    """The mechanisms for ``sasl-mechanisms``, most preferred first."""
    return tuple(m for m in authenticator.mechanisms(tls_identity) if m in _SASL_MECHANISMS)


def begin_login(
    authenticator: Authenticator,
    mechanism: str,
    response: bytes,
    peer_host: str | None,
    tls_identity: str | None,
) -> str | PasswordCheck:
    """The user ``sasl-init`` logs in as, or the :class:`PasswordCheck` to run off the
    loop first.

    :raises AuthenticationError: a mechanism not offered, a malformed response, an unknown
        EXTERNAL user, a loopback user off loopback.
    """
    if mechanism not in offered(authenticator, tls_identity):
        choices = " ".join(offered(authenticator, tls_identity))
        raise AuthenticationError(f"unsupported mechanism {mechanism!r} (offered: {choices})")
    return authenticator.begin(mechanism, response, peer_host, tls_identity)
