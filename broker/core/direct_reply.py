"""Direct reply-to (RabbitMQ's ``amq.rabbitmq.reply-to``): RPC replies with no reply queue.

A client consumes (no-ack) from the pseudo-queue ``amq.rabbitmq.reply-to`` and publishes
its requests with that ``reply_to``; the broker rewrites the property to a name of the form
``amq.rabbitmq.reply-to.<token>`` that, as a routing key on the default exchange, reaches
that consumer. :class:`DirectReplies` keeps those names, each with an unlisted
:class:`~broker.core.queue.Queue` that exists while its channel's reply consumer does: it is
in no virtual host listing, heard by no configuration listener (not replicated: replies go
to a connection, which a fail-over closes), and holds a reply only until it is delivered.
No I/O.

THREAD UNSAFE: the virtual host's event loop.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Callable

from broker.core.queue import Queue

#: The pseudo-queue a client consumes from and names in ``reply_to``.
REPLY_TO = "amq.rabbitmq.reply-to"
#: Prefix of the routing keys that reach one reply consumer.
REPLY_PREFIX = REPLY_TO + "."


class DirectReplies:
    """The reply names in use, each with its unlisted queue."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: Reply name -> queue; the default exchange routes to these names too.
        self.queues: dict[str, Queue] = {}

    def open(self, owner: object) -> Queue:
        """A new reply name and its queue, for one channel's reply consumer."""
        name = REPLY_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(18)).decode()
        queue = Queue(name, clock=self._clock, exclusive_owner=owner, auto_delete=True)
        self.queues[name] = queue
        return queue

    def close(self, queue: Queue) -> bool:
        """The reply consumer went: forget its name (False when it was not a reply queue)."""
        if self.queues.get(queue.name) is not queue:
            return False
        del self.queues[queue.name]
        queue.close()
        return True

    def owns(self, queue: Queue) -> bool:
        return self.queues.get(queue.name) is queue
