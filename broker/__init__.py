"""qpidd: an AMQP 0-9-1 broker with active-passive high availability."""

from common.version import __version__

__all__ = ["__version__"]
