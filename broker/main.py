"""``qpidd``: parse options, set up logging, run the broker until SIGTERM or SIGINT.

Exit codes (:class:`common.exit_status.ExitStatus`): SUCCESS 0 after SIGTERM/SIGINT; ERROR 1
the broker could not start (its data directory, its listening sockets); USAGE 2 a bad option
(:func:`broker.options.main_parse`), a bad users file or a log file that cannot be opened;
FENCED 3 the HA role fenced the broker; SHUT_DOWN 4 the broker stopped for a clean all-stop of its
cluster (``POST /api/ha/shutdown``, ``qpid-ha shutdown --all``): whoever supervises it leaves it
stopped. Failures to start are mapped to their exit code and
one line, ``qpidd: error: ...``, in one place: :func:`raw_main`. That line is all a failed
start prints on stderr: log lines for stderr wait until the broker listens (a log file
still gets them, ``broker_start_failed`` among them).
"""

from __future__ import annotations

import asyncio
import signal
import sys

from broker.collector import tune_after_start
from broker.listen import ListenError
from broker.options import BrokerOptions, log_cluster, main_parse
from broker.server import Broker
from broker.store.data_dir import DataDirError
from common import loop_errors
from common.exit_status import CommandError, ExitStatus
from common.log import configure_logging, drop_held_lines, get_logger, release_held_lines


async def run(options: BrokerOptions) -> ExitStatus:
    """Run the broker until a signal (SUCCESS) or a fence (FENCED).

    :raises CommandError: the broker could not start.
    """
    # asyncio's "Exception in callback" and "Task exception was never retrieved" are events.
    loop_errors.install(asyncio.get_running_loop(), get_logger("broker"))
    try:
        broker = Broker(options)
    except ValueError as exc:  # a bad users file: bad configuration
        raise CommandError(str(exc), ExitStatus.USAGE) from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        broker.stop_reason = broker.stop_reason or sig.name
        stop.set()

    # Before the start, which logs broker_started: a SIGTERM right after that line (a
    # supervisor that waited for it) stops the broker in order, never kills it mid-way.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await broker.start(before_listening=tune_after_start)  # the collector: broker.collector
    except DataDirError as exc:
        get_logger("broker").error("broker_start_failed", reason=str(exc))
        raise CommandError(str(exc), ExitStatus.ERROR) from None
    except ListenError as exc:
        get_logger("broker").error("broker_start_failed", reason=str(exc))
        raise CommandError(str(exc), ExitStatus.ERROR) from None
    except OSError as exc:
        get_logger("broker").error("broker_start_failed", reason=str(exc))
        raise CommandError(f"cannot start: {exc}", ExitStatus.ERROR) from None
    release_held_lines()  # started: what was logged on the way goes to stderr now
    loop.add_signal_handler(signal.SIGHUP, broker.security.on_sighup)  # reload the ACL
    waiters = {asyncio.create_task(stop.wait()), asyncio.create_task(broker.wait_stopped())}
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    await broker.stop()
    if broker.refused_reason is not None:
        print(f"qpidd: error: {broker.refused_reason}", file=sys.stderr)
        return ExitStatus.ERROR
    if broker.fenced_reason is not None:
        print(f"qpidd: fenced: {broker.fenced_reason}", file=sys.stderr)
        return ExitStatus.FENCED
    if broker.data_dir is not None and broker.data_dir.closing_shutdown_id is not None:
        return ExitStatus.SHUT_DOWN  # a cluster shutdown: nobody restarts it
    return ExitStatus.SUCCESS


def raw_main(options: BrokerOptions) -> ExitStatus:
    """Set up logging and run the broker; the one place errors become exit codes."""
    try:
        try:
            configure_logging(
                level=options.log_level,
                fmt=options.log_format,
                file=options.log_file,
                node=options.node_name,
                component="broker",
                cluster=log_cluster(options),
                hold_stderr=True,
            )
        except OSError as exc:
            raise CommandError(
                f"cannot open log file {options.log_file}: {exc}", ExitStatus.USAGE
            ) from None
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            return asyncio.run(run(options))
        return uvloop.run(run(options))
    except CommandError as error:
        drop_held_lines()
        print(f"qpidd: error: {error}", file=sys.stderr)
        return error.status
    finally:
        release_held_lines()  # an unexpected error: what was logged before it, then it


def main(argv: list[str] | None = None) -> None:
    options = main_parse(sys.argv[1:] if argv is None else argv)  # SystemExit(2): bad options
    sys.exit(raw_main(options))


if __name__ == "__main__":  # pragma: no cover
    main()
