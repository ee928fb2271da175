"""CPU accounting from /proc for the benchmarks: the machine's, a process's, a port's owner.

Contract: each function reads /proc once and never raises; it returns zeros (host_cpu) or
None (the others) where /proc cannot tell (not Linux, not root and not our process, a remote
host). Figures are CPU seconds since boot or since the process started: callers subtract two
readings. Used by bench/throughput_run.py (``run_once``'s broker and other% figures) and
bench/catchup.py.
"""

from __future__ import annotations

import os

import pika

__all__ = ["host_cpu", "listener_pid", "process_cpu"]

_TICK = float(os.sysconf("SC_CLK_TCK"))


def host_cpu() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return (0.0, 0.0)
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return ((user + nice + system + irq + softirq) / _TICK, steal / _TICK)


def process_cpu(pid: int | None) -> float | None:
    """User + system CPU seconds used by process `pid` (all its threads), None if unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def listener_pid(url: str) -> int | None:
    """The PID of the process listening on the URL's TCP port on this machine, if any.

    Lets a run report the broker's own CPU use (and, by difference, other processes' CPU
    on a shared machine) without being told the broker's PID. None for remote hosts or
    when /proc cannot tell (not root and not our process).
    """
    try:
        params = pika.URLParameters(url)
        host, port = params.host, int(params.port)
    except Exception:
        return None
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    local, state, inode = cols[1], cols[3], cols[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{inode}]")
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    if not inodes:
        return None
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None
