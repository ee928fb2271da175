"""Security: who may connect and what they may do (issue 13, ``docs/security.md``).

- :mod:`~broker.security.sasl`: SASL authentication of AMQP 0-9-1 connections (and of
  management requests), the loopback rule for the default user.
- :mod:`~broker.security.passwords`: salted scrypt hashes, verified in constant time.
- :mod:`~broker.security.users`: the users file (name, hash, roles), read and written.
- :mod:`~broker.security.roles`: the management roles and what each may do.

Every module is free of I/O except the users file's :func:`~broker.security.users.load`
and :func:`~broker.security.users.save`.
"""

from broker.security.sasl import AuthenticationError, Authenticator
from broker.security.users import UserDatabase

__all__ = ["AuthenticationError", "Authenticator", "UserDatabase"]
