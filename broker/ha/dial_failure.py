"""Why a backup's dial of a broker failed, in one line, sans-I/O.

:func:`describe_dial_failure` turns what a dial raised into the line a backup logs
(``ha_link_dial_failed``) and shows (``/api/ha``'s ``link_error``), and says whether it is
routine (a broker that is not, or not yet, the primary: normal while a cluster starts or
fails over). :func:`format_refusal` tells a replication format refusal
(:mod:`broker.ha.link_format`), which the backup logs as ``ha_link_format_refused``.
:class:`~broker.ha.backup.BackupLink` calls both; nothing here dials.
"""

from __future__ import annotations

import re

from broker.amqp.client import ConnectionRefusedByBroker
from broker.amqp.client.handshake import NoUsableMechanism
from broker.core.errors import ReplyCode
from broker.ha.link_format import NoCommonFormat
from broker.ha.redial import DialRefused
from broker.ha.state import HaState
from common.url import Address

__all__ = ["NotPrimary", "describe_dial_failure", "format_refusal"]

#: States of a broker that may yet become the primary: refusals from them are routine.
_BACKUP_STATES = (HaState.JOINING.value, HaState.CATCHUP.value, HaState.READY.value)
#: The text of a backup's 530 refusal (:meth:`~broker.ha.admission.HaAdmission.admit`).
_NOT_PRIMARY = re.compile(r"^HA backup: not the primary \(state (?P<state>[\w-]+)\)")


def format_refusal(exc: Exception) -> bool:
    """Whether a failed dial is a replication format refusal: this backup's own
    (:class:`~broker.ha.link_format.NoCommonFormat`) or the primary's connection.close 540."""
    return isinstance(exc, NoCommonFormat) or (
        isinstance(exc, ConnectionRefusedByBroker)
        and exc.reply_code == ReplyCode.NOT_IMPLEMENTED
        and "no common replication format" in exc.reply_text
    )


class NotPrimary(DialRefused):
    """The broker dialled answered but is not an HA primary; ``state`` is its HA status
    (None: not an HA broker)."""

    def __init__(self, state: str | None, promoted: bool = False, promoting: bool = False) -> None:
        super().__init__(f"not a primary ({state or 'not an HA broker'})")
        self.state = state
        #: Its connection.start named a backup's state, yet it admitted the link at
        #: connection.open, which only a primary does: it was promoted during the
        #: handshake (its start's epoch is stale too). Dialled again at once.
        self.again = promoted
        #: Its connection.start said its promotion is under way (``qpid.ha-promoting``):
        #: dialled again after the shortest pause, not a doubling one.
        self.soon = promoting


def describe_dial_failure(address: Address, exc: Exception) -> tuple[str, bool]:
    """``(reason, routine)`` of a failed dial: one line for the log and ``/api/ha``, and
    whether it is normal while a cluster starts or fails over (the broker dialled is a
    backup, not yet the primary)."""
    if isinstance(exc, NotPrimary):
        return str(exc), exc.state in _BACKUP_STATES
    if isinstance(exc, ConnectionRefusedByBroker):
        try:
            name = ReplyCode(exc.reply_code).name
        except ValueError:
            name = str(exc.reply_code)
        text = exc.reply_text.removeprefix(f"{name} - ")  # our broker's "NAME - text"
        match = _NOT_PRIMARY.match(text)
        if exc.reply_code == ReplyCode.NOT_ALLOWED and match:
            return f"not a primary ({match['state']})", True
        what = "login refused" if exc.reply_code == ReplyCode.ACCESS_REFUSED else "refused"
        return f"{what}: {name} - {text}", False
    if isinstance(exc, NoUsableMechanism):
        return f"cannot log in: {exc}", False
    if isinstance(exc, NoCommonFormat):
        return str(exc), False
    cause = exc.__cause__
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused", False
    text = " ".join(str(exc).split())
    return text.removeprefix(f"{address.host}:{address.port}: ") or type(exc).__name__, False
