"""What the management API reads of a broker, beyond what the metrics read.

The broker is described structurally, as :mod:`broker.management.metrics` does with
:class:`~broker.management.metrics.BrokerView`, so that the API depends only on the plain
core objects and can be driven by a test double. Types, and :func:`replicated`, the wait
of every change's answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from http import HTTPStatus
from typing import Protocol

from broker.amqp.context import HaBarrier, ReplicationBarrier, after_replicated
from broker.core.queue import Queue
from broker.core.vhosts import VirtualHosts
from broker.management.errors import ApiError
from broker.management.metrics import BrokerView, ContextView, OptionsView
from broker.security.cluster_users import ClusterUsers
from broker.security.password_checks import LoginSteps
from broker.security.roles import Role
from broker.security.users import UserDatabase


class Authenticator(LoginSteps, Protocol):
    """:class:`broker.security.sasl.Authenticator`: the user name, or AuthenticationError
    (``begin``, the hash, ``finish``: :func:`broker.security.password_checks.authenticate`)."""

    def roles(self, user: str, /) -> frozenset[Role]: ...

    def is_own(self, user: str, /) -> bool: ...

    @property
    def users(self) -> UserDatabase: ...

    @property
    def cluster_users(self) -> ClusterUsers: ...


class ManagedContext(ContextView, Protocol):
    @property
    def authenticator(self) -> Authenticator: ...

    @property
    def barrier(self) -> HaBarrier | None: ...

    @property
    def store_barrier(self) -> ReplicationBarrier | None: ...


class ManagedOptions(OptionsView, Protocol):
    @property
    def auth(self) -> bool: ...

    @property
    def ha_agent(self) -> str | None: ...

    @property
    def metrics_per_queue(self) -> bool: ...


class ManagedBroker(BrokerView, Protocol):
    """What the management API reads of :class:`broker.server.Broker`."""

    mgmt_port: int

    @property
    def options(self) -> ManagedOptions: ...

    @property
    def context(self) -> ManagedContext: ...

    @property
    def amqp_port(self) -> int: ...

    @property
    def store_status(self) -> str: ...

    @property
    def store_id(self) -> str | None: ...

    def prepare_cluster_shutdown(self, shutdown_id: str, *, quiesce: bool) -> int: ...


def vhosts_of(broker: ManagedBroker) -> VirtualHosts:
    """The broker's virtual hosts (a broker that has only ``vhost``: that one)."""
    found = getattr(broker, "vhosts", None)
    return found if isinstance(found, VirtualHosts) else VirtualHosts(default=broker.vhost)


def refuse_on_backup(broker: ManagedBroker) -> None:
    """409 on a backup of an HA cluster: its objects come from the primary by replication
    only (a change made here would be a divergence the primary never sees)."""
    ha = getattr(broker, "ha", None)
    if ha is not None and not ha.state.is_primary:
        primary = ha.primary_address or "not known yet"
        raise ApiError(
            HTTPStatus.CONFLICT,
            f"this broker is an HA backup ({ha.state.value}): act on the primary ({primary})",
        )


async def replicated(broker: ManagedBroker, queues: Iterable[Queue] = ()) -> None:
    """Return once the backups (an HA primary's) and the store have every change made so
    far, and every dequeue of ``queues``: a management answer is a promise as declare-ok
    and purge-ok are (docs/reliability.md). A primary whose in-sync backup is gone waits
    until its removal is committed, as AMQP answers do."""
    context = broker.context
    barrier = getattr(context, "barrier", None)
    store = getattr(context, "store_barrier", None)
    if barrier is None and store is None:
        return
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    after_replicated(barrier, store, settle, tuple(queues))
    await done
