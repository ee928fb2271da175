"""Security: SASL authentication of AMQP 0-9-1 connections (:mod:`broker.security.sasl`)."""

from broker.security.sasl import AuthenticationError, Authenticator, UserDatabase

__all__ = ["AuthenticationError", "Authenticator", "UserDatabase"]
