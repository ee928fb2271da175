"""qpidd: an AMQP 0-9-1 broker with active-passive high availability."""

# structlog first through common.log, which imports it without rich (a fifth of a start-up)
import common.log  # noqa: F401
from common.version import __version__

__all__ = ["__version__"]
