"""A back-reference that ends with its owner: :func:`weakly`.

An owned part (``broker/amqp/stream_sink.py``'s pattern: a connection's timeouts, its held
frames, a channel's deliveries) refers to its owner, and the owner to it: a reference cycle,
which reference counting never frees. The cyclic collector does, at a cost, and never at
all once the heap was frozen while the cycle lived (``broker.collector``: a broker freezes
its heap as it grows; a connection open then and closed later stayed for good, about 7 KiB
a connection). A part that only its owner calls, or that its owner lets go of at its end,
holds the owner through :func:`weakly`: a weak proxy that behaves as the owner while the
owner lives, which it does whenever it calls the part."""

from __future__ import annotations

import weakref
from typing import TypeVar, cast

__all__ = ["weakly"]

T = TypeVar("T")


def weakly(owner: T) -> T:
    """``owner`` held weakly: a weak proxy of it (itself if it is one already)."""
    if isinstance(owner, weakref.ProxyTypes):
        return owner
    return cast(T, weakref.proxy(owner))
