"""Scheduling priority of the cluster manager's processes (issue 25): the ZooKeeper servers
and the agents run ahead of the brokers and of everything else on their cores.

Why: the cluster manager must be available whatever the brokers' and the clients' appetite
for CPU, as corosync runs at a real-time priority under Pacemaker. On 2 shared cores at a
load of 10-23 (the 30-minute scale soak, docs/reliability.md) the three ZooKeeper JVMs
waited for a CPU long enough that a follower's acknowledgement missed the leader's
``syncLimit`` (2.5 s): the leader gave up, the ensemble held an election, every client's
connection dropped, and the leading agent, hearing nothing for 3.6 s, fenced its healthy
primary by its session fence (twice). Nothing in the protocol can make up for a
coordinator that does not run; its processes need little CPU, so running them first costs
the brokers little.

How: a nice value of :data:`COORDINATOR_NICE` (the ``nice`` program in front of the
command, so the process and every thread it starts inherit it), and the broker an agent
supervises back at the default priority (:func:`default_priority_argv`), so that the broker
does not inherit its agent's. Best effort: without the privilege to raise a priority
(``CAP_SYS_NICE``), ``nice`` warns and runs the command unchanged. Under systemd the units
say it (``Nice=``, ``CPUWeight=``: deploy/systemd); with the kernel's autogroup a nice value
ranks a process only within its session (docs/deploy.md, "Scheduling priority").
"""

from __future__ import annotations

import os
import shutil

__all__ = ["COORDINATOR_NICE", "coordinator_argv", "default_priority_argv"]

#: The nice value of a ZooKeeper server or an agent: a CFS weight about nine times a
#: default process's (nice 0).
COORDINATOR_NICE = -10


def coordinator_argv(argv: list[str]) -> list[str]:
    """``argv`` run at :data:`COORDINATOR_NICE`, whatever this process's own nice value
    (``nice -n`` adds to it; unchanged when ``nice`` is missing or it already runs so)."""
    nice = shutil.which("nice")
    step = COORDINATOR_NICE - os.getpriority(os.PRIO_PROCESS, 0)
    return argv if nice is None or step == 0 else [nice, "-n", str(step), *argv]


def default_priority_argv(argv: list[str]) -> list[str]:
    """``argv`` run at the default priority (nice 0) when this process (an agent) runs at a
    higher one: the broker it starts must not inherit the cluster manager's priority. A
    lower priority (a positive nice value) is left as it is."""
    own = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's; its children inherit it
    nice = shutil.which("nice")
    if own >= 0 or nice is None:
        return argv
    return [nice, "-n", str(-own), *argv]
