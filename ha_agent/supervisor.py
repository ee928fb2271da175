"""Supervision of the local broker process (``--broker-command``), and fencing by PID.

:Status: Beta

:class:`BrokerSupervisor` starts the broker command, restarts it when it exits (back-off
from ``min_delay`` doubling to ``max_delay``, reset once a run lasted ``stable_after``
seconds), and kills it on demand: the agent's fence and watchdog, each naming the instance
(its pid) it decided about, so a kill never hits the broker started after it (issue 25). A
broker killed this way comes back as a joining backup (a cluster member always starts as
one) and follows the new primary by itself. A broker that exits with ``SHUT_DOWN`` (4: its
cluster was stopped by ``qpid-ha shutdown --all``) is not restarted
(:attr:`BrokerSupervisor.shut_down`): after a clean all-stop nothing starts again until the
operator starts it.

Without ``--broker-command`` (systemd or another supervisor runs the broker), the agent
fences with :func:`kill_pid`: SIGKILL to the PID the broker reported in ``/api/status``;
the service manager restarts it.

:func:`restart_delay` is the back-off rule, pure.

Error Handling
==============

- A command that cannot be started (missing binary, bad permissions) is logged as
  ``broker_process_start_failed`` and retried with the back-off; the agent keeps running (its
  broker then does not answer, so it never contends).
- :meth:`BrokerSupervisor.kill` on a broker that already exited does nothing.
- :meth:`BrokerSupervisor.stop` sends SIGTERM, waits ``timeout`` seconds, then SIGKILL.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

import structlog

from common.exit_status import ExitStatus
from common.priority import default_priority_argv

__all__ = ["BrokerSupervisor", "kill_pid", "restart_delay"]

_log = structlog.get_logger("ha_agent.supervisor", component="agent")


def restart_delay(failures: int, min_delay: float = 0.1, max_delay: float = 10.0) -> float:
    """Seconds to wait before start number ``failures + 1`` after ``failures`` quick exits."""
    if failures <= 0:
        return 0.0
    return float(min(max_delay, min_delay * 2.0 ** (failures - 1)))


def kill_pid(pid: int, reason: str) -> bool:
    """SIGKILL ``pid``; False when there is no such process."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    _log.warning("broker_killed", pid=pid, reason=reason)
    return True


class BrokerSupervisor:
    """Runs ``command`` and keeps it running until :meth:`stop`.

    ``on_exit(returncode)`` is called (in the supervisor's thread) each time the broker
    exits, before it is restarted (or, after a cluster shutdown, not). THREAD SAFE.
    """

    def __init__(
        self,
        command: str | Sequence[str],
        *,
        on_exit: Callable[[int], None] | None = None,
        min_delay: float = 0.1,
        max_delay: float = 10.0,
        stable_after: float = 10.0,
        log_file: str | None = None,
    ) -> None:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("the broker command is empty")
        self.argv = argv
        self.on_exit = on_exit
        self.min_delay = min_delay
        self.max_delay = max_delay
        self.stable_after = stable_after
        self.log_file = log_file
        self.restarts = 0
        #: True once the broker exited for a cluster shutdown: it is not restarted
        self.shut_down = False
        self._process: subprocess.Popen[bytes] | None = None
        self._mutex = threading.Lock()
        #: the pids of the instances it reaped (newest last; a pid started again leaves)
        self._reaped: list[int] = []
        self._exited = threading.Condition(self._mutex)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        with self._mutex:
            process = self._process
        return None if process is None or process.poll() is not None else process.pid

    def reaped(self, pid: int | None, timeout: float = 0.0) -> bool:
        """Has the instance ``pid`` this supervisor ran exited and been reaped (its
        ``waitpid`` returned: it runs no code and its sockets are closed)? Waits up to
        ``timeout`` seconds for it. False for a pid it never ran, or ran again since."""
        if pid is None:
            return False
        deadline = time.monotonic() + timeout
        with self._exited:
            while pid not in self._reaped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._exited.wait(left)
            return True

    def start(self) -> BrokerSupervisor:
        self._thread = threading.Thread(target=self._run, name="broker-supervisor", daemon=True)
        self._thread.start()
        return self

    def kill(self, reason: str, pid: int | None) -> bool:
        """SIGKILL the broker instance ``pid`` now (it is restarted); False when that
        instance is not the one running (it exited; the broker running now was started
        after it, as a backup, and is not what the kill was decided about) or none runs.
        Under the lock that replaces the process, so a restart cannot slip in between."""
        with self._mutex:
            process = self._process
            if pid is None or process is None or process.pid != pid or process.poll() is not None:
                return False
            return kill_pid(pid, reason)

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop supervising: SIGTERM the broker, SIGKILL after ``timeout``; its exit code."""
        self._stopping.set()
        with self._mutex:
            process = self._process
        code = None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
        elif process is not None:
            code = process.returncode
        if self._thread is not None:
            self._thread.join(timeout)
        return code

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        # at the default priority, not the agent's (common.priority: the cluster manager
        # runs ahead of the brokers; the pid is the broker's, ``nice`` execs it)
        argv = default_priority_argv(self.argv)
        try:
            if self.log_file is None:
                return subprocess.Popen(argv, stdin=subprocess.DEVNULL)
            with open(self.log_file, "ab") as out:
                return subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                )
        except OSError as exc:
            _log.error("broker_process_start_failed", command=self.argv[0], reason=str(exc))
            return None

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            delay = restart_delay(failures, self.min_delay, self.max_delay)
            if delay and self._stopping.wait(delay):
                return
            started = time.monotonic()
            process = self._spawn()
            if process is None:
                failures += 1
                continue
            with self._mutex:
                if self._stopping.is_set():
                    process.kill()
                    process.wait()
                    return
                self._process = process
                if process.pid in self._reaped:  # the pid came round again
                    self._reaped.remove(process.pid)
            _log.info("broker_process_started", pid=process.pid, restarts=self.restarts)
            code = process.wait()
            with self._exited:
                self._reaped = [*self._reaped[-7:], process.pid]
                self._exited.notify_all()
            if self._stopping.is_set():
                return
            ran = time.monotonic() - started
            if code == ExitStatus.SHUT_DOWN:
                self.shut_down = True
                _log.warning(
                    "broker_process_shut_down", pid=process.pid, code=code, ran_s=round(ran, 3),
                    reason="the cluster was shut down (qpid-ha shutdown --all): not restarted",
                )  # fmt: skip
                if self.on_exit is not None:
                    self.on_exit(code)
                return
            self.restarts += 1
            failures = 0 if ran >= self.stable_after else failures + 1
            _log.warning("broker_process_exited", pid=process.pid, code=code, ran_s=round(ran, 3))
            if self.on_exit is not None:
                self.on_exit(code)
