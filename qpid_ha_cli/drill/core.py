"""The drill's accounts and gap detection: sent, confirmed, nacked, received, lost,
duplicated, and the confirm gaps a fail-over costs a publisher.

Contract
========

- No I/O: no sockets, no threads, no clock of its own. Every call that needs the time
  takes ``now`` (UNIX seconds), so tests script time.
- :class:`DrillCore` is THREAD UNSAFE: the shell (:mod:`qpid_ha_cli.drill.run`) serializes
  every call under one lock.
- Methods that may have something to log return a list of :class:`DrillEvent`; the core
  never logs. Their names and fields are the schema's "Drill events"
  (``docs/log-schema.md``).
- :meth:`DrillCore.check` gives the result as a frozen :class:`DrillCheck`; a drill is OK
  when nothing confirmed was lost.

A confirm gap is counted when a confirm arrives after the publisher waited for one longer
than the gap threshold: waited meaning it had a message out, unconfirmed, or had lost its
connection. So a low rate alone is no gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "DEFAULT_GAP_THRESHOLD",
    "ROLES",
    "DrillCheck",
    "DrillCore",
    "DrillEvent",
    "format_ts",
    "ms",
]

ROLES = ("publisher", "consumer")
DEFAULT_GAP_THRESHOLD = 0.05  # s


def format_ts(seconds: float) -> str:
    """UNIX seconds as the log schema writes times: ``2026-11-22T07:42:02.123456Z``."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ms(seconds: float) -> float:
    """Seconds as the log's milliseconds (three decimals)."""
    return round(seconds * 1000.0, 3)


@dataclass(frozen=True, slots=True)
class DrillEvent:
    """One event to log: its name, level and fields (beyond the common ones)."""

    event: str
    level: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DrillCheck:
    """The drill's result.

    ``received`` counts distinct messages of this drill received, ``duplicated`` the
    deliveries beyond the first of a message, ``lost`` the confirmed messages never
    received. ``unconfirmed`` were sent but neither confirmed nor nacked (in doubt: the
    connection was lost first); ``unconfirmed_received`` of those arrived anyway.
    ``foreign`` counts deliveries that are not this drill's messages. ``max_gap_ms`` is the
    longest time between two consecutive confirms.
    """

    sent: int
    confirmed: int
    received: int
    lost: int
    duplicated: int
    nacked: int
    unconfirmed: int
    unconfirmed_received: int
    foreign: int
    gaps: int
    max_gap_ms: float

    @property
    def ok(self) -> bool:
        return self.lost == 0

    def fields(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "confirmed": self.confirmed,
            "received": self.received,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "nacked": self.nacked,
            "unconfirmed": self.unconfirmed,
            "unconfirmed_received": self.unconfirmed_received,
            "foreign": self.foreign,
            "gaps": self.gaps,
            "max_gap_ms": self.max_gap_ms,
        }

    def line(self) -> str:
        """The check in one line."""
        verdict = "OK" if self.ok else "FAILED"
        return (
            f"drill {verdict}: sent {self.sent}, confirmed {self.confirmed}, "
            f"received {self.received}, lost {self.lost}, duplicated {self.duplicated}, "
            f"unconfirmed {self.unconfirmed}, nacked {self.nacked}, "
            f"confirm gaps {self.gaps}, max gap {self.max_gap_ms:.1f} ms"
        )


class DrillCore:
    """The drill's accounts and gap detection, fed by the shell. THREAD UNSAFE: the caller
    serializes calls (the shell holds one lock).

    The publisher asks :meth:`publish` for each message's number, then reports
    :meth:`confirmed` or :meth:`nacked`; the consumer reports :meth:`delivered`; both report
    :meth:`connected` and :meth:`disconnected`. Methods that may have something to log
    return a list of :class:`DrillEvent`. Messages still unconfirmed when the publisher loses
    its connection are in doubt: neither confirmed nor lost if they never arrive.
    """

    def __init__(self, gap_threshold: float = DEFAULT_GAP_THRESHOLD) -> None:
        if not gap_threshold >= 0 or math.isinf(gap_threshold):
            raise ValueError(f"gap threshold must be a finite number >= 0: {gap_threshold!r}")
        self.gap_threshold = gap_threshold
        self.sent = 0
        self._outstanding: set[int] = set()
        self._confirmed: set[int] = set()
        self._nacked: set[int] = set()
        self._received: set[int] = set()
        self.deliveries = 0
        self.foreign = 0
        self.gaps = 0
        self.max_gap = 0.0
        self.epoch: int | None = None  # the highest any broker announced
        self._last_confirm: float | None = None
        self._waiting_since: float | None = None  # the publisher waits for a confirm
        self._down_since: dict[str, float] = {}
        self._connected: set[str] = set()
        self._ever_connected: set[str] = set()

    # -- publisher ------------------------------------------------------------------------
    def publish(self, now: float) -> int:
        """A message is about to be sent: its number (0, 1, 2, ...)."""
        number = self.sent
        self.sent += 1
        self._outstanding.add(number)
        if self._waiting_since is None:
            self._waiting_since = now
        return number

    def confirmed(self, number: int, now: float) -> list[DrillEvent]:
        """The broker confirmed message ``number``: a ``confirm_gap`` if it came late."""
        if number not in self._outstanding:
            return []  # not sent, already settled, or in doubt since a lost connection
        self._outstanding.discard(number)
        self._confirmed.add(number)
        events: list[DrillEvent] = []
        previous = self._last_confirm
        if previous is not None:
            self.max_gap = max(self.max_gap, now - previous)
        waited = now - self._waiting_since if self._waiting_since is not None else 0.0
        if waited > self.gap_threshold:
            self.gaps += 1
            events.append(
                DrillEvent(
                    "confirm_gap",
                    "warning",
                    {
                        "gap_ms": ms(now - previous) if previous is not None else None,
                        "stall_ms": ms(waited),
                        "last_confirm_ts": format_ts(previous) if previous is not None else None,
                        "first_confirm_ts": format_ts(now),
                        "message": number,
                    },
                )
            )
        self._last_confirm = now
        self._waiting_since = now if self._outstanding else None
        return events

    def nacked(self, number: int, now: float) -> None:
        """The broker refused message ``number`` (basic.nack): not confirmed, not lost."""
        if number in self._outstanding:
            self._outstanding.discard(number)
            self._nacked.add(number)
            if not self._outstanding:
                self._waiting_since = None

    # -- consumer -------------------------------------------------------------------------
    def delivered(self, number: int | None) -> None:
        """The consumer got message ``number`` (None: not one of this drill's messages)."""
        if number is None or not 0 <= number < self.sent:
            self.foreign += 1
            return
        self.deliveries += 1
        self._received.add(number)

    # -- connections ----------------------------------------------------------------------
    def connected(self, role: str, address: str, epoch: int | None, now: float) -> list[DrillEvent]:
        """``role`` connected to ``address`` (the broker announced ``epoch``)."""
        _check_role(role)
        if epoch is not None:
            self.epoch = epoch if self.epoch is None else max(self.epoch, epoch)
        self._connected.add(role)
        down_since = self._down_since.pop(role, None)
        first = role not in self._ever_connected
        self._ever_connected.add(role)
        fields: dict[str, Any] = {"role": role, "address": address, "epoch": epoch}
        if down_since is not None:
            return [
                DrillEvent(
                    "client_reconnected", "info", {**fields, "outage_ms": ms(now - down_since)}
                )
            ]
        if first:
            return [DrillEvent("client_connected", "info", fields)]
        return []

    def disconnected(self, role: str, address: str, reason: str, now: float) -> list[DrillEvent]:
        """``role`` lost its connection to ``address``."""
        _check_role(role)
        if role not in self._connected:
            return []
        self._connected.discard(role)
        self._down_since[role] = now
        if role == "publisher":
            self._outstanding.clear()  # in doubt from now on
            if self._waiting_since is None:
                self._waiting_since = now
        return [
            DrillEvent(
                "client_disconnected",
                "warning",
                {"role": role, "address": address, "reason": reason},
            )
        ]

    def gave_up(self, role: str, reason: str) -> list[DrillEvent]:
        """``role`` could not reconnect in time and stops."""
        _check_role(role)
        return [DrillEvent("client_gave_up", "error", {"role": role, "reason": reason})]

    def ever_connected(self, role: str) -> bool:
        return role in self._ever_connected

    # -- results --------------------------------------------------------------------------
    @property
    def confirmed_count(self) -> int:
        return len(self._confirmed)

    def drained(self) -> bool:
        """Every confirmed message has been received."""
        return self._confirmed <= self._received

    def check(self) -> DrillCheck:
        settled = self._confirmed | self._nacked
        unconfirmed = set(range(self.sent)) - settled
        return DrillCheck(
            sent=self.sent,
            confirmed=len(self._confirmed),
            received=len(self._received),
            lost=len(self._confirmed - self._received),
            duplicated=self.deliveries - len(self._received),
            nacked=len(self._nacked),
            unconfirmed=len(unconfirmed),
            unconfirmed_received=len(unconfirmed & self._received),
            foreign=self.foreign,
            gaps=self.gaps,
            max_gap_ms=ms(self.max_gap),
        )

    def finished(self) -> list[DrillEvent]:
        check = self.check()
        return [DrillEvent("drill_finished", "info" if check.ok else "error", check.fields())]


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")
