"""The ZooKeeper format of the agents' records, and what an agent does with one it cannot read.

:Status: Stable (docs/ha-design.md, "Format versions", says how to bump the format)

Every JSON record an agent keeps in ZooKeeper (member, primary, in-sync, link hint) carries
its format in its ``version`` field; a record without one is format 1, the format of every
record before release 0.1.0 and of 0.1.0 itself. The epoch counter is format 1 by its shape
(ASCII digits, :mod:`ha_agent.epoch_counter`): a later format that changes it must change
its shape, which a format-1 reader refuses (``EpochCounterError``).

An agent reads the formats :data:`common.version.ZOOKEEPER_FORMATS` holds. A record of
another format is a *fault*, never garbage and never "no record": :func:`record_format`
raises :class:`ZkFormatError`, whose text is the one line the agent logs
(``zk_record_format_unknown``), and the agent does not act on the record (a backup's agent
does not contend while it cannot read the cluster: :func:`ha_agent.promotion.eligibility`).

An agent writes the highest format every member reports it speaks
(:func:`ha_agent.membership.cluster_speaks`): with format 1 the only one yet, always 1.

Error Handling
==============

:func:`record_format` raises :class:`ZkFormatError` for a format this agent cannot read and
ValueError for a ``version`` that is no format at all (a bad record: the caller's own error).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from common.version import ZOOKEEPER_FORMATS

__all__ = ["WRITTEN_FORMAT", "FormatFaults", "ZkFormatError", "record_format"]

_log = structlog.get_logger("ha_agent.zk_format", component="agent")

#: The format of the records this code writes (the highest every member speaks: 1).
WRITTEN_FORMAT = 1


class ZkFormatError(Exception):
    """A ZooKeeper record of a format this agent cannot read; ``str()`` is the line to log."""

    def __init__(self, what: str, found: int, path: str = "") -> None:
        super().__init__(
            f"{path + ': ' if path else ''}{what} is in ZooKeeper format {found};"
            f" this agent reads {ZOOKEEPER_FORMATS}: upgrade it"
            " (docs/deploy.md, 'Upgrading a cluster')"
        )
        self.what = what
        self.found = found
        self.path = path

    def at(self, path: str) -> ZkFormatError:
        """The same error naming the znode it was read from."""
        return ZkFormatError(self.what, self.found, path)


def record_format(record: Mapping[str, Any], what: str) -> int:
    """The format of a JSON record (its ``version``; absent: 1) if this agent reads it;
    :class:`ZkFormatError` if it does not, ValueError if ``version`` is no format."""
    found = record.get("version", 1)
    if isinstance(found, bool) or not isinstance(found, int) or found < 1:
        raise ValueError(f"{what}: bad version {found!r}")
    if found not in ZOOKEEPER_FORMATS:
        raise ZkFormatError(what, found)
    return found


class FormatFaults:
    """The records of a format this agent cannot read, as last read by the agent's check:
    :attr:`error` (one line, "" none) keeps a backup's agent from contending
    (:attr:`ha_agent.promotion.ClusterView.format_error`); each is logged once
    (``zk_record_format_unknown``), again only after it was gone.

    THREAD UNSAFE: the agent's loop owns it."""

    def __init__(self) -> None:
        self.error = ""
        self._logged: set[str] = set()

    def note(self, unreadable: list[ZkFormatError]) -> str:
        """The records just read that this agent cannot read; returns :attr:`error`."""
        lines = {str(exc): exc for exc in unreadable}
        for line, exc in lines.items():
            if line not in self._logged:
                _log.error("zk_record_format_unknown", path=exc.path, found=exc.found, reason=line)
        self._logged = set(lines)
        self.error = "; ".join(lines)
        return self.error
