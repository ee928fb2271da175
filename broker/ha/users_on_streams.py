"""The cluster's users on the primary's configuration streams (replication format 4, issue
30; :mod:`broker.security.cluster_users`), sans-I/O.

:class:`UsersOnStreams` sends every cluster user and permission, as one ``users`` event, on
each configuration stream whose link speaks format 4: after the stream's snapshot (and the
membership) when it opens, and after each change. A stream of format 1 to 3 gets none (its
backup would refuse an unknown event and drop the link). The event is pushed like any
configuration event, so a management answer waits for the backups' acknowledgement of it
(:func:`broker.management.managed.replicated`).

THREAD UNSAFE: the primary's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from broker.security.cluster_users import ClusterUsers

__all__ = ["UsersOnStreams"]


class UsersStream(Protocol):
    """What is asked of a configuration stream (:class:`broker.ha.config_stream.ConfigStream`)."""

    @property
    def carries_users(self) -> bool: ...

    @property
    def closed(self) -> bool: ...

    def push(self, event: dict[str, Any]) -> None: ...


class UsersOnStreams:
    """The users sent on the open configuration streams ``streams()`` lists."""

    def __init__(self, streams: Callable[[], Iterable[UsersStream]]) -> None:
        self._streams = streams
        #: The users served (None: not served, a stand-alone broker's queue replication).
        self.users: ClusterUsers | None = None

    def serve(self, users: ClusterUsers) -> None:
        """Send ``users`` now and after each of their changes."""
        self.users = users
        users.listeners.append(self.changed)
        self.changed()

    def opened(self, stream: UsersStream) -> None:
        """A new stream, its snapshot pushed: the users after it (format 4)."""
        if self.users is not None and stream.carries_users:
            stream.push(self.users.event())

    def changed(self) -> None:
        if self.users is None:
            return
        event = self.users.event()
        for stream in self._streams():
            if stream.carries_users and not stream.closed:
                stream.push(event)
