"""The compiled parts of the store (docs/store.md): the segment walker of its recovery
(broker/store/_walk.c), its group writer thread (broker/store/_group_write.c), its
publish-path records and journal tail (broker/store/_records.c) and its ledger's
per-message operations (broker/store/_ledger.c); the C allocator's pair for the per-message
objects (broker/core/_raw_alloc.c) and the publishes' confirm handles
(broker/core/_confirms.c); the 0-9-1 wire's busiest frames (broker/amqp/_wire.c:
a delivery's encoded, a publish's split); and the replication batches' decoder (a
backup's) and packer (a primary's) that run for every message (broker/ha/_batch.c).

Optional: without a C compiler and Python's headers the install goes on; recovery then uses
the pure-Python walker (the same records, about 2x slower: docs/benchmarks.md, issue 12),
and the journal the Python writer thread (the same writes; confirms wait longer for the
GIL: docs/benchmarks.md, "Group commit without the GIL"), and the ledger its Python
operations (the same answers), and queued messages' objects come from Python's allocator
(more memory kept after a queue empties: docs/memory-and-disk.md, "Memory given back"),
and deliveries are encoded, publishes parsed and replication batches decoded and packed
in Python (the same bytes, the same outcomes), and confirms held and released by the
Python class (the same replies). Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "broker.store._walk",
            ["broker/store/_walk.c"],
            depends=["broker/store/_crc32c.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.store._records",
            ["broker/store/_records.c"],
            depends=["broker/store/_crc32c.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.store._ledger",
            ["broker/store/_ledger.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.ha._batch",
            ["broker/ha/_batch.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.amqp._wire",
            ["broker/amqp/_wire.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.core._confirms",
            ["broker/core/_confirms.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.core._raw_alloc",
            ["broker/core/_raw_alloc.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.store._group_write",
            ["broker/store/_group_write.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
