"""Does the old primary's broker still listen? A TCP connect its host's kernel answers.

:Status: Beta (issue 25: slow is not dead)

:class:`ha_agent.takeover.LapsedGrant` replaces the record of a primary whose member lease
its candidate's broker let lapse, its replication link down: the node-loss path of issue
26. On a loaded machine a *healthy* primary lost it that way: a starved backup missed its
link's heartbeats and the primary closed the link (the backup redialled and was linked
again 0.5 s later), or a primary starved 2.7 s missed its own, and the candidate's agent
took the epoch in between (the 30-minute scale soak, two healthy primaries ended).

What a lost node and a starved one differ in is below the process: the listening socket
of a broker that runs (however starved, or stopped) is there, and its host's kernel
answers a connect at once; a SIGKILLed broker's socket is gone (refused), and a host that
is cut off, powered off or frozen whole answers nothing (the connect times out).
:func:`accepts` asks exactly that, with nothing sent: the connection is closed as soon as
it is made. A broker whose listener is there is left to its own agent, which fences one
that is stopped or hung (docs/agent.md, "Starved is not stopped"); a node lost with its
agent loses its record when its session expires. Availability only: what makes a takeover
safe is the lapsed grant, which this never shortens.

I/O only (one blocking connect, at most :data:`PROBE_TIMEOUT`); raises nothing.
"""

from __future__ import annotations

import socket

from common.url import parse_url

__all__ = ["PROBE_TIMEOUT", "accepts"]

#: How long a connect may take before the host counts as not answering (seconds). A
#: kernel answers a SYN within a round trip, CPU-starved processes or not.
PROBE_TIMEOUT = 0.3


def accepts(url: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """Does a listener accept a TCP connection at the first address of the broker URL
    ``url`` within ``timeout``? False for a refusal, a timeout, an unreachable host or a URL
    that does not parse."""
    try:
        address = parse_url(url).addresses[0]
    except (ValueError, IndexError):
        return False
    try:
        with socket.create_connection((address.host, address.port), timeout=timeout):
            return True
    except OSError:
        return False
