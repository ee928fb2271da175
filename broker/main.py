"""``qpidd``: parse options, set up logging, run the broker until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import signal
import sys

from broker.options import BrokerOptions, main_parse
from broker.server import Broker
from broker.store.data_dir import DataDirError
from common.log import configure_logging, get_logger


async def run(options: BrokerOptions) -> int:
    try:
        broker = Broker(options)
    except ValueError as exc:  # a bad users file: bad configuration
        print(f"qpidd: error: {exc}", file=sys.stderr)
        return 2
    try:
        await broker.start()
    except DataDirError as exc:
        get_logger("broker").error("broker_start_failed", reason=str(exc))
        print(f"qpidd: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        get_logger("broker").error("broker_start_failed", reason=str(exc))
        print(f"qpidd: error: cannot listen: {exc}", file=sys.stderr)
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waiters = {asyncio.create_task(stop.wait()), asyncio.create_task(broker.wait_stopped())}
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    await broker.stop()
    if broker.fenced_reason is not None:
        print(f"qpidd: fenced: {broker.fenced_reason}", file=sys.stderr)
        return 3
    return 0


def main(argv: list[str] | None = None) -> None:
    options = main_parse(sys.argv[1:] if argv is None else argv)
    try:
        configure_logging(
            level=options.log_level,
            fmt=options.log_format,
            file=options.log_file,
            node=options.node_name,
            component="broker",
        )
    except OSError as exc:
        print(f"qpidd: error: cannot open log file {options.log_file}: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        code = asyncio.run(run(options))
    else:
        code = uvloop.run(run(options))
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
