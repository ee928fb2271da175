"""Body formats of the HA replication streams, primary -> backup (docs/ha-design.md "Streams").

The public face of three modules; import from here. Each module states its own contract:

* :mod:`broker.ha.wire_batch` - the **per-queue stream** (consumer on
  ``qpid.ha-queue:<name>``): each AMQP body is one *batch* of :class:`Enqueue`,
  :class:`Dequeue`, :class:`QueueCaughtUp`, :class:`Tx`, :class:`TxBase` and :class:`Watermark`
  events; the byte
  layout, its bounds and errors, and the whole-batch codec :func:`encode_batch` /
  :func:`decode_batch`.
* :mod:`broker.ha.wire_writers` - the incremental encoders of the same batches:
  :class:`BatchWriter` (batches under a byte budget and an event count) and
  :class:`EnqueuePacker` (ENQUEUE events from a message's fields, with no :class:`Enqueue` in
  between: the primary's side of catch-up). Byte for byte what :func:`encode_batch` makes.
* :mod:`broker.ha.wire_config` - the **configuration stream** (consumer on
  ``qpid.ha-config``): each body is one event as an AMQP field table with a str ``"type"``;
  :func:`encode_config_event` (pamqp) and :func:`decode_config_event` (a strict linear-time
  decoder of our own).

No I/O in any of them. The names below are bound once at import: using them from here costs
nothing per message.
"""

from __future__ import annotations

from broker.ha.wire_batch import (
    CAUGHT_UP,
    DEQUEUE,
    ENQUEUE,
    MAX_SHORT_STRING,
    TX,
    TXBASE,
    VERSION,
    VERSION_TX,
    WATERMARK,
    Dequeue,
    Enqueue,
    QueueCaughtUp,
    StreamEvent,
    Tx,
    TxBase,
    Watermark,
    decode_batch,
    encode_batch,
)
from broker.ha.wire_config import MAX_DEPTH as CONFIG_MAX_DEPTH
from broker.ha.wire_config import MAX_KEY_BYTES as CONFIG_MAX_KEY_BYTES
from broker.ha.wire_config import decode_config_event, encode_config_event
from broker.ha.wire_writers import BatchWriter, EnqueuePacker

__all__ = [
    "CAUGHT_UP",
    "CONFIG_MAX_DEPTH",
    "CONFIG_MAX_KEY_BYTES",
    "DEQUEUE",
    "ENQUEUE",
    "MAX_SHORT_STRING",
    "TX",
    "TXBASE",
    "VERSION",
    "VERSION_TX",
    "WATERMARK",
    "BatchWriter",
    "Dequeue",
    "Enqueue",
    "EnqueuePacker",
    "QueueCaughtUp",
    "StreamEvent",
    "Tx",
    "TxBase",
    "Watermark",
    "decode_batch",
    "decode_config_event",
    "encode_batch",
    "encode_config_event",
]
