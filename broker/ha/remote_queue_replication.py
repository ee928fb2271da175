"""Stand-alone side, asyncio shell: copy one queue from a remote broker (ha-queue-replication).

Seed 001 section 1.13, "Replicating Queues with the HA module": with
``ha-queue-replication=yes`` a broker that is in no cluster can copy a single queue from a
remote broker (``qpid-ha replicate QUEUE REMOTE_BROKER``). Both brokers need the option: the
remote one serves queue streams (as a primary does, for every queue:
:func:`serve_queue_streams`), the local one runs a :class:`QueueReplication` per replicated
queue: it dials the remote broker, subscribes to the queue's stream (named as the highest
replication format both brokers speak names it: ``qpid.ha-queue:<name>`` in format 1, the
name in an argument from format 2; a remote that announces no formats is named as format 1
names it) with the ids it already holds, applies the batches with a
:class:`~broker.ha.queue_replicator.QueueReplicator` and acknowledges them once applied and,
when this broker has a store and a batch wrote to it (a durable local queue's persistent
messages), once what it wrote is durable (:class:`~broker.ha.queue_replicator.BatchAcks`,
as a cluster backup does): the source's publisher confirms wait for that acknowledgement.
It re-dials every ``link-maintenance-interval`` when the connection drops
(:func:`~broker.ha.redial.dial_loop` with a constant :class:`~broker.ha.redial.Backoff`).

Not to be confused with :mod:`broker.ha.replicate_level` (*what* a cluster replicates) or
with a backup's :mod:`broker.ha.backup` link (a whole broker's replication).

THREAD UNSAFE: runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from broker.amqp.client import AmqpClient, ClientError, Delivery
from broker.core.vhost import VHOST, VirtualHost
from broker.core.vhosts import VirtualHosts
from broker.ha.backup import DiskSync
from broker.ha.backup_dial import connect_as_backup
from broker.ha.link_format import CODECS, NoCommonFormat, codec_of, link_format
from broker.ha.names import FORMATS_PROPERTY, IDS_ARGUMENT, VHOST_ARGUMENT
from broker.ha.primary import Primary, StandaloneBackups
from broker.ha.queue_replicator import BatchAcks, QueueReplicator
from broker.ha.redial import Backoff, dial_loop
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.streams import PrimaryStreams
from broker.ha.wire import decode_batch
from common.log import get_logger
from common.url import Address
from common.version import REPLICATION_FORMATS


def stream_formats() -> dict[str, Any]:
    """connection.start's server properties of a broker serving queue streams outside a
    cluster: the replication formats it speaks (so a replica names the stream as its
    format does)."""
    return {FORMATS_PROPERTY: REPLICATION_FORMATS.text}


def stream_format(server_properties: dict[str, Any], remote: str) -> int:
    """The format a replica names its stream in: the highest both speak; format 1 with a
    remote that announces none (or none in common: its consume then says why)."""
    if FORMATS_PROPERTY not in server_properties:
        return 1
    try:
        chosen = link_format(REPLICATION_FORMATS, server_properties, f"broker {remote}")
    except NoCommonFormat:
        return 1
    return chosen if chosen in CODECS else 1


def serve_queue_streams(vhost: VirtualHost | VirtualHosts, clock: Any) -> PrimaryStreams:
    """Stream hooks for a broker outside a cluster: every queue, of every vhost, may be
    replicated."""
    primary = Primary(
        vhost, replicate_default=ReplicateLevel.ALL, clock=clock, auto_delete_grace=0.0
    )
    return PrimaryStreams(primary, StandaloneBackups(primary))


class QueueReplication:
    """Keeps one local queue a copy of a queue on a remote broker."""

    def __init__(
        self,
        vhost: VirtualHost,
        queue: str,
        remote: Address,
        *,
        user: str | None,
        password: str | None,
        mechanism: str,
        maintenance_interval: float,
        heartbeat: float,
        local_url: str,
        disk: DiskSync | None = None,
    ) -> None:
        """``disk``: this broker's store; a batch that wrote to it is acknowledged only once
        what it wrote is durable (the source's confirms wait for this copy's disk)."""
        self.queue_name = queue
        self.vhost_name = vhost.name
        self.remote = remote
        self.user = user
        self.password = password
        self.mechanism = mechanism
        self.maintenance_interval = maintenance_interval
        self.heartbeat = heartbeat
        self.local_url = local_url
        self.disk = disk
        self.broker_id = f"replicate-{queue}-{uuid.uuid4()}"
        # A copy created here is durable on a broker with a store: it exists to keep the
        # source's messages, and a durable queue's persistent ones are what its disk keeps.
        local = vhost.queues.get(queue) or vhost.declare_queue(
            queue, durable=disk is not None, replicated=True
        )
        self.replicator = QueueReplicator(local)
        self.connected = False
        self.log = get_logger("ha")
        self._task: asyncio.Task[None] | None = None
        self._client: AmqpClient | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replicate-{self.queue_name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._client is not None:
            with contextlib.suppress(ClientError, OSError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._client.close()

    def status(self) -> dict[str, Any]:
        return {
            "queue": self.queue_name,
            "vhost": self.vhost_name,
            "remote": str(self.remote),
            "connected": self.connected,
            "caught_up": self.replicator.caught_up,
            "messages": self.replicator.queue.message_count,
            "last_id": self.replicator.queue.last_position,
        }

    async def _run(self) -> None:
        interval = self.maintenance_interval
        await dial_loop(
            [self.remote],
            self._dial,
            self._session,
            Backoff(interval, interval),
            dial_errors=(ClientError, OSError, ValueError),
            on_dial_failed=self._dial_failed,
        )

    async def _dial(self, address: Address) -> AmqpClient:
        return await connect_as_backup(
            address,
            user=self.user,
            password=self.password,
            mechanism=self.mechanism,
            heartbeat=self.heartbeat,
            product="qpidd queue replication",
            broker_id=self.broker_id,
            url=self.local_url,
        )

    def _dial_failed(self, address: Address, reason: Exception) -> None:
        self._log_down(reason)

    def _log_down(self, reason: Exception) -> None:
        self.log.info(
            "ha_queue_replication_down",
            queue=self.queue_name,
            remote=str(self.remote),
            reason=str(reason),
        )

    async def _session(self, client: AmqpClient, address: Address) -> None:
        self._client = client
        try:
            await self._replicate(client)
        except (ClientError, OSError, ValueError) as exc:
            self._log_down(exc)
        self.connected = False
        self._client = None

    async def _replicate(self, client: AmqpClient) -> None:
        try:
            channel = await client.open_channel()
            await channel.qos(32)
            replicator = self.replicator
            replicator.caught_up = False
            broken = asyncio.Event()
            failure: list[str] = []

            def store_failed(reason: str) -> None:
                failure.append(reason)  # acknowledging would be a lie: stop replicating
                broken.set()

            disk = self.disk
            acks = BatchAcks(None if disk is None else disk.after_durable, store_failed)

            def ack(tag: int) -> None:
                with contextlib.suppress(ClientError):  # the connection is going down
                    channel.ack(tag)

            def on_batch(delivery: Delivery) -> None:
                appended = 0 if disk is None else disk.appended
                try:
                    replicator.apply(decode_batch(delivery.body))
                except ValueError as exc:
                    failure.append(str(exc))
                    broken.set()
                    return
                wrote = disk is not None and disk.appended != appended
                acks.applied(replicator, ack, delivery.delivery_tag, wrote)

            codec = codec_of(stream_format(client.server_properties, str(self.remote)))
            stream, arguments = codec.queue_stream(self.queue_name)
            arguments[IDS_ARGUMENT] = bytearray(replicator.ids().encode())
            if self.vhost_name != VHOST:  # the remote queue is in the same vhost as this one
                arguments[VHOST_ARGUMENT] = self.vhost_name
            await channel.consume(stream, on_batch, arguments=arguments)
            self.connected = True
            self.log.info("ha_queue_replication_up", queue=self.queue_name, remote=str(self.remote))
            closed = asyncio.ensure_future(client.wait_closed())
            stop = asyncio.ensure_future(broken.wait())
            done, _ = await asyncio.wait({closed, stop}, return_when=asyncio.FIRST_COMPLETED)
            for waiter in (closed, stop):
                waiter.cancel()
            if failure:
                raise ValueError(failure[0])
            if closed in done:
                raise closed.result()
        finally:
            # asyncio.timeout, never wait_for: Python 3.11's wait_for returns normally when
            # it is cancelled just as the close ends, and stop() would wait for ever.
            with contextlib.suppress(ClientError, OSError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await client.close()
