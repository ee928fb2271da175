"""Before a promotion of a member that is still joining: is another configured broker of
the cluster beyond joining (then this one is not the first primary of a new cluster)?

THREAD UNSAFE: called on the broker's event loop (it asks each other broker's status over
AMQP, ``broker.management.status_check``).
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.ha.state import HaState
from broker.management.status_check import check_status
from common.url import Address

#: Host names a broker's own address may be written with in ``ha-brokers-url``.
_LOCAL_NAMES = ("127.0.0.1", "::1", "localhost")


async def cluster_beyond_joining(
    addresses: Iterable[Address],
    own_port: int,
    interface: str,
    node_name: str,
    primaries_only: bool = False,
) -> str | None:
    """The address of a reachable broker beyond joining (with its state), or None (a new
    cluster); ``primaries_only``: only a broker serving as primary counts. This broker's own
    address (``own_port`` on one of its names) is skipped."""
    own_hosts = (*(a.strip().strip("[]") for a in interface.split(",")), *_LOCAL_NAMES, node_name)
    for address in addresses:
        if address.port == own_port and address.host in own_hosts:
            continue
        status = await check_status(address)
        beyond = status not in (HaState.JOINING.value, HaState.STANDALONE.value)
        serving = status in (HaState.ACTIVE.value, HaState.RECOVERING.value)
        if status and beyond and (serving or not primaries_only):
            return f"{address} ({status})"
    return None
