"""aiohttp's own error reports, as one structured warning each (never a traceback).

aiohttp's request handler reports what it cannot hand to the application (a request line
or header it cannot parse, a client gone mid-response) through a stdlib logger, with the
exception attached; unconfigured, Python prints those records and their tracebacks to
stderr, outside the JSON log (fuzzing found ``get / HTTP/1.1`` does it). :func:`http_logger`
is the logger the management server gives aiohttp instead: each record becomes one
``management_http_error`` warning with the message and the exception's one-line text, and
nothing propagates to the root logger.
"""

from __future__ import annotations

import logging

from structlog.typing import FilteringBoundLogger

LOGGER_NAME = "qpidd.management.http"


class _ToStructlog(logging.Handler):
    def __init__(self, log: FilteringBoundLogger) -> None:
        super().__init__(level=logging.DEBUG)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        exc = record.exc_info[1] if record.exc_info else None
        reason = " ".join(str(exc).split()) if exc is not None else None
        fields = {"message": message, "reason": reason}
        if exc is not None:
            fields["exception_type"] = type(exc).__name__
        if record.levelno >= logging.WARNING:
            self.log.warning("management_http_error", **fields)
        else:
            self.log.debug("management_http_error", **fields)


def http_logger(log: FilteringBoundLogger) -> logging.Logger:
    """A stdlib logger whose records go to ``log`` as ``management_http_error`` events."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(_ToStructlog(log))
    return logger
