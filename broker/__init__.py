"""qpidd: an AMQP 0-9-1 broker with active-passive high availability."""

__version__ = "0.1.0"
