"""Fixtures of the RabbitMQ drop-in tests: the end-to-end tests' brokers (a qpidd per module,
one per test with extra options) and a pika connection, stopped and closed by the fixtures."""

from tests.e2e.conftest import conn, shared_broker, start_broker

__all__ = ["conn", "shared_broker", "start_broker"]
