"""The exit codes of every program of the product: ``qpidd``, ``qpid-ha`` (with
``qpid-ha drill``) and ``qpid-ha-agent``, in one :class:`ExitStatus` (httpie's
``httpie/status.py``).

Each program maps its errors to these codes in one place, its ``raw_main``-style entry
point; commands raise :class:`CommandError` (a one-line message and its status) or a
program's own typed errors, never ``sys.exit`` with a bare number.

=== ============ ==========================================================================
 0  SUCCESS      done; ``status --expect`` held; the drill lost nothing confirmed
 1  ERROR        the expectation did not hold, the broker refused the call, the drill lost
                 a confirmed message, ``qpidd`` could not start (data directory, listen)
 2  USAGE        a bad option or value: one line naming it
 3  UNREACHABLE  ``qpid-ha``: no broker (or ZooKeeper) answered; the drill: no broker of
                 the URL list could be reached
 3  FENCED       ``qpidd``: the broker stopped because it was fenced (the same number as
                 UNREACHABLE, which is what ``ExitStatus(3)`` reads as: each program uses
                 only one of the two)
 4  SHUT_DOWN    ``qpidd``: the broker stopped for a clean all-stop of its cluster
                 (``qpid-ha shutdown --all``): a service manager (``RestartPreventExitStatus``)
                 and an agent supervising it (``--broker-command``) leave it stopped
130 INTERRUPTED  Ctrl-C (128 + SIGINT)
=== ============ ==========================================================================

The numbers are part of the interface (scripts, systemd units, the OCF agent and the tests
test them): never renumber, only add.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["CommandError", "ExitStatus"]


class ExitStatus(IntEnum):
    SUCCESS = 0
    ERROR = 1
    USAGE = 2
    UNREACHABLE = 3
    FENCED = 3  # qpidd only; an alias of UNREACHABLE's number
    SHUT_DOWN = 4  # qpidd only: stopped by qpid-ha shutdown --all; nobody restarts it
    INTERRUPTED = 130


class CommandError(Exception):
    """A failure that ends a command: ``str()`` is the one line to print after
    ``PROGRAM: error:``, ``status`` the code to exit with (never SUCCESS)."""

    def __init__(self, message: str, status: ExitStatus = ExitStatus.ERROR) -> None:
        if status is ExitStatus.SUCCESS:
            raise ValueError("a CommandError needs a failing status")
        super().__init__(message)
        self.status = status
