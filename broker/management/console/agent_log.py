"""This node's agent's instants of a promotion, from the agent's JSON log.

:Status: Beta

With ``--console-agent-log FILE`` (the ``--log-file`` of the ``qpid-ha-agent`` that
supervises this broker, on the same node) the console's timeline takes, for a promotion of
this broker to epoch ``E``, the agent's ``agent_promoted`` with ``new_epoch`` ``E``
(``promoted``) and its last ``election_won`` before it (``won``): the instants the
analytics job takes from the same lines (``docs/analytics.md``). Then the promotion phase
is ``recovering - won`` and the time from the failure to the win is known; how it splits
into detection and election needs the old primary's agent's log (its resignation), which
is on another node.

:func:`promotion_instants` is pure (lines in); :func:`read_tail` reads the end of the file
(:data:`TAIL_BYTES`), so a long log costs no more than its tail.

Error Handling
==============

A missing or unreadable file, a line that is not JSON, a ``ts`` that is not ISO-8601: that
line or file is skipped, the instants stay unknown (``None``); nothing is raised.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

__all__ = ["TAIL_BYTES", "promotion_instants", "read_tail"]

#: How much of the end of the agent's log is read.
TAIL_BYTES = 512 * 1024


def read_tail(path: str, size: int = TAIL_BYTES) -> list[str]:
    """The last complete lines within ``size`` bytes of ``path`` ([] when unreadable)."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            end = log.tell()
            log.seek(max(0, end - size))
            data = log.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if end > size and lines:
        lines = lines[1:]  # the first one may be cut
    return lines


def _seconds(ts: Any) -> float | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def promotion_instants(lines: list[str], epoch: int) -> dict[str, float | None]:
    """``won`` and ``promoted`` (wall-clock seconds) of the promotion to ``epoch``."""
    won: float | None = None
    for line in lines:
        if '"election_won"' not in line and '"agent_promoted"' not in line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        at = _seconds(event.get("ts"))
        if at is None:
            continue
        if event.get("event") == "election_won":
            won = at
        elif event.get("event") == "agent_promoted" and event.get("new_epoch") == epoch:
            return {"won": won, "promoted": at}
    return {"won": None, "promoted": None}
