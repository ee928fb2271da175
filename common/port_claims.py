"""Ports handed out to live processes of this machine: :func:`common.polling.free_port`'s
record across processes.

:Status: Beta (tests, benchmarks, the demo)

A port :func:`~common.polling.free_port` chooses is free when it is chosen, but the server
that will listen on it may bind it only later, and a broker restarted on its port leaves it
unbound for a while. Another process choosing in that gap (three pytest workers choose
thousands of ports a run) could be given the same port: one of the two servers then fails
with "address already in use". So each port given out is claimed here, in one file a port
naming the claiming process's PID; a port claimed by a live process other than this one is
not given again until that process exits (its claims then lapse: nothing to clean up).

Claims are made under an exclusive ``flock`` of the directory's lock file, so two processes
never both claim one port. A claim lasts as long as its process: a test worker's ports stay
claimed for the whole run (a few thousand of the ~22,000 chosen from).

Error Handling
==============

- A directory that cannot be made or written (a read-only ``/tmp``) claims nothing and
  refuses nothing: :func:`claim` answers True, the process-local record alone remains.
- A claim file that cannot be read or parsed is no claim.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path


def claims_dir() -> Path:
    """This user's directory of claims (one per user: another user's PIDs cannot be probed)."""
    return Path(tempfile.gettempdir()) / f"qpid-ha-port-claims-{os.getuid()}"


def claim(port: int, directory: Path | None = None) -> bool:
    """Claim ``port`` for this process; False when a live other process holds a claim on it."""
    directory = claims_dir() if directory is None else directory
    me = os.getpid()
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        with open(directory / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = directory / str(port)
            owner = _owner(path)
            if owner is not None and owner != me and alive(owner):
                return False
            path.write_text(str(me))
    except OSError:
        return True
    return True


def _owner(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """True when a process ``pid`` exists (a zombie counts: its parent has not reaped it)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
