"""The package's version and the formats this code speaks: one source for every program.

``__version__`` is the release (pyproject.toml reads it: ``[tool.setuptools.dynamic]``);
CHANGELOG.md lists each release with its formats and its commit. :data:`REPLICATION_FORMATS`,
:data:`ZOOKEEPER_FORMATS` and :data:`STORE_FORMATS` are the ranges this code reads and writes
(:mod:`common.formats`; docs/ha-design.md, "Format versions", says how to bump one).
:func:`version_line` is what ``qpidd --version``, ``qpid-ha-agent --version`` and
``qpid-ha --version`` print.

Test-only: the environment variable :data:`TEST_REPLICATION_FORMATS_ENV` (e.g. ``99-99``)
makes a broker announce and accept that replication range instead, so a test can start a
broker of a format no release speaks (tests/upgrade). It is read once, by
:func:`replication_formats`, when a broker starts; never set it in production.
"""

from __future__ import annotations

import os

from common.formats import FormatRange, parse_range

__all__ = [
    "REPLICATION_FORMATS",
    "STORE_FORMATS",
    "TEST_REPLICATION_FORMATS_ENV",
    "ZOOKEEPER_FORMATS",
    "__version__",
    "replication_formats",
    "version_line",
]

__version__ = "0.1.0"

#: The replication formats this broker speaks: 1, the wire of release 0.1.0; 2, every name
#: and field table a client may declare; 3, format 2 and the member lease; 4, format 3 and
#: the cluster's users (broker.ha.link_format).
REPLICATION_FORMATS = FormatRange(1, 4)

#: The ZooKeeper formats this agent reads (and writes, the highest every member speaks): 1,
#: the records of release 0.1.0; 2, the same records, an in-sync record at version 2 telling
#: that promotions are decided by a ZooKeeper multi-op without the election lock
#: (ha_agent.promotion_txn; docs/agent.md, "Promotion by one transaction").
ZOOKEEPER_FORMATS = FormatRange(1, 2)

#: The store formats this broker reads (it writes the highest): 1, release 0.1.0's records;
#: 2, configuration records whose arguments come back exactly (broker.store.records). A
#: store is read only by the broker that wrote it or a newer one: nothing to negotiate.
STORE_FORMATS = FormatRange(1, 2)

#: Test-only override of :data:`REPLICATION_FORMATS` ("LOW-HIGH"), see the module docstring.
TEST_REPLICATION_FORMATS_ENV = "QPID_HA_TEST_REPLICATION_FORMATS"


def replication_formats() -> FormatRange:
    """:data:`REPLICATION_FORMATS`, or the test-only override; ValueError for a bad one."""
    forced = os.environ.get(TEST_REPLICATION_FORMATS_ENV)
    if not forced:
        return REPLICATION_FORMATS
    try:
        return parse_range(forced)
    except ValueError as exc:
        raise ValueError(f"{TEST_REPLICATION_FORMATS_ENV}: {exc}") from None


def version_line(program: str) -> str:
    """``qpidd 0.1.0 (replication formats 1-4, zookeeper formats 1-2, store formats 1-2)``: one
    line for --version."""
    formats = (
        f"replication {REPLICATION_FORMATS}, zookeeper {ZOOKEEPER_FORMATS}, store {STORE_FORMATS}"
    )
    return f"{program} {__version__} ({formats})"
