"""Every ``qpid.ha-*`` name HA puts on the wire, in one place.

Server properties of connection.start (read before any login), client properties of a
backup's or an admin's connection, the stream names a backup consumes from on the primary,
and the argument of its reconnect handshake. The argument ``qpid.replicate`` (seed 001) is
here too. Nothing here imports anything: every part of the broker, the agent and the CLI may
use these names.
"""

from __future__ import annotations

# -- connection.start server properties (the primary's or any HA broker's) ---------------
#: The broker's HA state ("joining", "catch-up", "ready", "recovering", "active").
STATUS_PROPERTY = "qpid.ha-status"
#: The highest fencing epoch the broker has seen (a backup announces it too).
EPOCH_PROPERTY = "qpid.ha-epoch"
#: The broker's id, new at each start.
BROKER_ID_PROPERTY = "qpid.ha-broker-id"
#: The URL clients should use (for clients that do not keep open-ok's known-hosts).
PUBLIC_URL_PROPERTY = "qpid.ha-public-url"
#: The cluster's id (seed 002's cluster-id), once a primary created it; a backup checks it.
CLUSTER_ID_PROPERTY = "qpid.ha-cluster-id"
#: A primary's base epoch: the era of the store it was promoted from (broker.ha.store_history).
BASE_EPOCH_PROPERTY = "qpid.ha-base-epoch"
#: The replication formats the broker speaks, "LOW-HIGH" (common.formats; a backup's
#: start-ok carries its own): the primary encodes each link in the highest both speak.
FORMATS_PROPERTY = "qpid.ha-replication-formats"
#: True while the broker's promotion is under way (absent otherwise, and from a release
#: before it): a backup that dials it then is refused as by any backup, and dials it again
#: after the shortest pause instead of a doubling one (broker.ha.redial).
PROMOTING_PROPERTY = "qpid.ha-promoting"

# -- connection.start-ok client properties -----------------------------------------------
#: Set by a backup's replication link.
BACKUP_PROPERTY = "qpid.ha-backup"
#: A backup's own address, as the primary lists it in the membership.
URL_PROPERTY = "qpid.ha-url"
#: A backup announces its replication formats with :data:`FORMATS_PROPERTY` too.
#: An admin connection (status checks, tools): admitted by a backup too.
ADMIN_PROPERTY = "qpid.ha-admin"

# -- streams a backup consumes from on the primary ---------------------------------------
#: The prefix of every HA stream name.
STREAM_PREFIX = "qpid.ha-"
#: The configuration stream: a snapshot, then every change.
CONFIG_STREAM = "qpid.ha-config"
#: One queue's stream in replication format 1: ``qpid.ha-queue:<name>`` (a short string,
#: so the name may hold at most 241 bytes).
QUEUE_STREAM_PREFIX = "qpid.ha-queue:"
#: One queue's stream from replication format 2: this fixed name, the queue's name in the
#: basic.consume argument :data:`QUEUE_ARGUMENT` (a long string: any name fits).
QUEUE_STREAM = "qpid.ha-queue"
#: The member lease's stream (replication format 3): the primary's lease requests, each
#: answered by the backup's basic.ack, its grant (broker.ha.lease_stream).
LEASE_STREAM = "qpid.ha-lease"
#: basic.consume argument of a format-2 queue stream: the queue's name.
QUEUE_ARGUMENT = "qpid.ha-queue"
#: basic.consume argument of a queue stream: the replication ids the backup holds.
IDS_ARGUMENT = "qpid.ha-ids"
#: basic.consume argument of a queue stream: the queue's vhost (absent: "/").
VHOST_ARGUMENT = "qpid.ha-vhost"

# -- declare arguments -------------------------------------------------------------------
#: Replication level of a queue or exchange (none, configuration, all).
QPID_REPLICATE = "qpid.replicate"
