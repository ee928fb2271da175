"""The broker's option table: one field of :class:`BrokerOptions` per option.

Contract
--------
Every option is one field of :class:`BrokerOptions`, declared with :func:`_option`: its
default, the converter that reads its text (:mod:`broker.option_converters`) and the help
line. That declaration is the table (:data:`OPTION_SPECS` is derived from it, in declaration
order), so adding an option is adding one field. The long option name is the field name
with ``-`` for ``_`` (``mgmt_port`` -> ``--mgmt-port``). The HA options are seed 001's
(section 1.12.3: ``ha-cluster``, ``ha-brokers-url``, ..., ``link-heartbeat-interval``).

Reading the command line and the config file into a :class:`BrokerOptions` is
:mod:`broker.options`'s work (import the public names from there). No I/O here; the
``node-name`` default (the host name) is computed when the options are built.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from broker.option_converters import (
    agent_name,
    broker_url,
    byte_size,
    choice,
    duration,
    fraction_below,
    int_range,
    memory_amount,
    name_list,
    non_empty,
    parse_bool,
    positive_duration,
    show,
    upper_choice,
)

__all__ = ["BY_DEST", "BY_NAME", "OPTION_SPECS", "BrokerOptions", "OptionSpec"]

T = TypeVar("T")

_META = "qpidd.option"


@dataclass(frozen=True, slots=True)
class _OptionMeta:
    convert: Callable[[str], Any]
    help: str
    metavar: str
    default_text: str | None


def _option(
    default: T,
    convert: Callable[[str], T],
    help: str,
    *,
    metavar: str = "VALUE",
    default_text: str | None = None,
    secret: bool = False,
) -> T:
    """Declare one option: a dataclass field carrying its converter and help.

    A ``secret`` option (a password) is left out of the options' ``repr``.
    """
    meta = _OptionMeta(convert, help, metavar, default_text)
    return field(default=default, repr=not secret, metadata={_META: meta})


def _option_factory(
    factory: Callable[[], T],
    convert: Callable[[str], T],
    help: str,
    *,
    metavar: str = "VALUE",
) -> T:
    """Like :func:`_option`, for a default computed when the options are built."""
    meta = _OptionMeta(convert, help, metavar, None)
    return field(default_factory=factory, metadata={_META: meta})


@dataclass(frozen=True, slots=True)
class BrokerOptions:
    """Everything the broker is configured with. Build with :func:`parse_options`."""

    port: int = _option(
        5672, int_range(0, 65535), "AMQP listen port (0 picks a free port)", metavar="PORT"
    )
    interface: str = _option(
        "::",
        non_empty,
        "address(es) to bind the AMQP port, comma-separated: :: is every IPv6 and IPv4"
        " address (one dual-stack socket; IPv4 only where the host has no IPv6), 0.0.0.0"
        " every IPv4 one",
        metavar="ADDR[,ADDR]",
    )
    mgmt_port: int = _option(
        8672,
        int_range(0, 65535),
        "management HTTP API port (0 disables the API)",
        metavar="PORT",
    )
    mgmt_interface: str = _option(
        "127.0.0.1,::1",
        non_empty,
        "address(es) to bind the management HTTP API, comma-separated (loopback only by"
        " default, IPv4 and IPv6: give an address, or :: or 0.0.0.0, to open it to the"
        " network)",
        metavar="ADDR[,ADDR]",
    )
    data_dir: str | None = _option(
        None, non_empty, "directory for durable state", metavar="DIR", default_text="none"
    )
    store_sync: str = _option(
        "fsync",
        choice("fsync", "write", "none"),
        "when a persistent message counts as stored (confirmed): fsync (on disk: survives a"
        " power cut), write (handed to the OS: survives a broker crash, not a machine's),"
        " none (at once: a crash loses what was not written yet); see docs/store.md",
        metavar="fsync|write|none",
    )
    store_cut_damaged: bool = _option(
        False,
        parse_bool,
        "start from a damaged store: keep what precedes the first damaged record and move"
        " the rest to DATA_DIR/store.damaged.N (see docs/store.md)",
        metavar="yes|no",
    )
    truncate: bool = _option(
        False,
        parse_bool,
        "discard the existing store at start: move it (journal, page files, ids) to"
        " DATA_DIR/_cluster.bak.NNNN (never deleted) and start empty, e.g. to let a broker"
        " whose store belongs to another cluster join this one (see docs/store.md)",
        metavar="yes|no",
    )
    auth: bool = _option(True, parse_bool, "require SASL authentication", metavar="yes|no")
    sasl_users: str | None = _option(
        None,
        non_empty,
        "users file, one name:password a line",
        metavar="FILE",
        default_text="none, the single user guest/guest",
    )
    loopback_users: str = _option(
        "guest",
        name_list,
        "users who may log in (AMQP and management) only from a loopback address,"
        " comma separated (empty: none)",
        metavar="USERS",
    )
    acl_file: str | None = _option(
        None,
        non_empty,
        "ACL file in Qpid's syntax (acl allow|deny USER|GROUP ACTION OBJECT [props]);"
        " reloaded on SIGHUP and by qpid-ha acl reload",
        metavar="FILE",
        default_text="none, no ACL",
    )
    ssl_port: int = _option(
        5671,
        int_range(0, 65535),
        "AMQP over TLS listen port, opened when ssl-cert-file is given (0 picks a free port)",
        metavar="PORT",
    )
    ssl_cert_file: str | None = _option(
        None,
        non_empty,
        "the broker's certificate (PEM, chain included): turns TLS on for clients (ssl-port),"
        " the management API (HTTPS) and HA links to ssl: addresses; reloaded on SIGHUP",
        metavar="FILE",
        default_text="none, no TLS",
    )
    ssl_key_file: str | None = _option(
        None, non_empty, "the certificate's private key (PEM)", metavar="FILE", default_text="none"
    )
    ssl_ca_file: str | None = _option(
        None,
        non_empty,
        "CA certificates (PEM) that client certificates and ssl: HA peers are checked against",
        metavar="FILE",
        default_text="none",
    )
    ssl_require_client_authentication: bool = _option(
        False,
        parse_bool,
        "TLS clients must present a certificate signed by ssl-ca-file (SASL EXTERNAL logs"
        " them in as its common name)",
        metavar="yes|no",
    )
    metrics_per_queue: bool = _option(
        False,
        parse_bool,
        "serve /metrics' per-queue series (queue names) without a login too, as RabbitMQ's"
        " prometheus.return_per_object_metrics; with a login they are always served",
        metavar="yes|no",
    )
    mgmt_ssl: str = _option(
        "auto",
        choice("auto", "yes", "no"),
        "serve the management API over HTTPS with ssl-cert-file: yes, no, or auto (HTTPS when"
        " TLS is configured and mgmt-interface is not a loopback address)",
        metavar="auto|yes|no",
    )
    require_encryption: bool = _option(
        False,
        parse_bool,
        "refuse AMQP connections that are not TLS (plain clients and replication links get"
        " 530 at login; every ha-brokers-url address must be ssl:); needs ssl-cert-file",
        metavar="yes|no",
    )
    console_zk: str | None = _option(
        None,
        non_empty,
        "ZooKeeper the web console reads the agents' view from (their --zk), e.g."
        " zk1:2181,zk2:2181; with console-cluster",
        metavar="HOSTS",
        default_text="none",
    )
    console_cluster: str | None = _option(
        None,
        non_empty,
        "the agents' --cluster, for the web console's view of them (with console-zk)",
        metavar="NAME",
        default_text="none",
    )
    console_agent_log: str | None = _option(
        None,
        non_empty,
        "this node's qpid-ha-agent --log-file: the web console's fail-over timeline takes"
        " the agent's election win and promotion from it",
        metavar="FILE",
        default_text="none",
    )
    console_zk_auth: str | None = _option(
        None,
        non_empty,
        "the agents' --zk-auth digest (USER:PASSWORD, or @FILE holding that line), for the"
        " web console's read of their znodes",
        metavar="USER:PASSWORD|@FILE",
        default_text="none",
        secret=True,
    )
    console_zk_ssl: bool = _option(
        False,
        parse_bool,
        "TLS to console-zk (ZooKeeper's secureClientPort), as the agents' --zk-ssl: the"
        " server's certificate checked against console-zk-ssl-ca-file, else the system's CAs",
        metavar="yes|no",
    )
    console_zk_ssl_ca_file: str | None = _option(
        None,
        non_empty,
        "CA (PEM) ZooKeeper's certificate is checked against (TLS to console-zk)",
        metavar="FILE",
        default_text="none",
    )
    console_zk_ssl_cert_file: str | None = _option(
        None,
        non_empty,
        "client certificate (PEM) for TLS to console-zk, with console-zk-ssl-key-file",
        metavar="FILE",
        default_text="none",
    )
    console_zk_ssl_key_file: str | None = _option(
        None,
        non_empty,
        "key (PEM) of console-zk-ssl-cert-file",
        metavar="FILE",
        default_text="none",
    )
    log_level: str = _option(
        "info",
        choice("debug", "info", "warning", "error", "critical"),
        "lowest level logged: debug, info, warning, error or critical",
        metavar="LEVEL",
    )
    log_file: str | None = _option(
        None, non_empty, "append log lines to FILE", metavar="FILE", default_text="stderr"
    )
    log_format: str = _option(
        "json",
        choice("json", "console"),
        "json (one JSON object a line) or console (for humans)",
        metavar="json|console",
    )
    heartbeat: float = _option(
        60.0,
        duration(65535.0),
        "AMQP heartbeat interval offered to clients, e.g. 60, 10s, 500ms (0 disables)",
        metavar="SECONDS",
    )
    handshake_timeout: float = _option(
        10.0,
        positive_duration(3600.0),
        "time a client has from connecting to connection.open before it is dropped, e.g. 10s"
        " (RabbitMQ's handshake_timeout; greater than 0)",
        metavar="SECONDS",
    )
    max_connections: int = _option(
        500, int_range(1), "maximum number of open client connections", metavar="N"
    )
    max_frame_size: int = _option(
        131072,
        int_range(4096, 16 * 1024 * 1024),
        "largest AMQP frame offered to clients, in bytes (4096..16777216)",
        metavar="BYTES",
    )
    max_channels: int = _option(
        2047,
        int_range(1, 65535),
        "most channels open at once per connection (1..65535; RabbitMQ's default 2047);"
        " channel numbers may be anything in 1..65535",
        metavar="N",
    )
    default_queue_limit: int = _option(
        104857600,
        int_range(0),
        "default maximum bytes held by each queue (0 = unlimited)",
        metavar="BYTES",
    )
    max_memory: str = _option(
        "40%",
        memory_amount,
        "high watermark of the broker's resident memory: a size (2GiB, 512MB) or a share of"
        " the machine's memory (40%); above it publishers are blocked (0 = no limit)",
        metavar="SIZE|N%",
    )
    disk_free_limit: int = _option(
        50_000_000,
        byte_size,
        "least free space on the data directory's filesystem, e.g. 50MB, 1GiB; below it"
        " publishers are blocked (0 = no limit)",
        metavar="SIZE",
        default_text="50MB",
    )
    node_name: str = _option_factory(
        socket.gethostname, non_empty, "name of this broker in logs and status", metavar="NAME"
    )
    config: str | None = _option(
        None,
        non_empty,
        "read options from FILE (name=value lines; the command line wins)",
        metavar="FILE",
        default_text="none",
    )
    # -- high availability (seed 001, section 1.12.3) ----------------------------------
    ha_cluster: bool = _option(
        False,
        parse_bool,
        "join an active-passive HA cluster (needs ha-brokers-url)",
        metavar="yes|no",
    )
    ha_cluster_name: str | None = _option(
        None,
        non_empty,
        "the cluster's name in this broker's logs (their cluster field): the agents'"
        " --cluster; when unset, console-cluster's (needs ha-cluster=yes)",
        metavar="NAME",
        default_text="console-cluster, else none",
    )
    ha_queue_replication: bool = _option(
        False,
        parse_bool,
        "allow replication of specific queues without joining a cluster",
        metavar="yes|no",
    )
    ha_brokers_url: str | None = _option(
        None,
        broker_url,
        "URL the cluster brokers use to connect to each other: every broker's address,"
        " comma separated, e.g. node1,node2,node3",
        metavar="URL",
        default_text="none",
    )
    ha_public_url: str | None = _option(
        None,
        broker_url,
        "URL advertised to clients (connection.open-ok known-hosts, a backup's refusal,"
        " /api/ha), e.g. a virtual IP; when unset, ha-brokers-url is advertised",
        metavar="URL",
        default_text="none",
    )
    ha_replicate: str = _option(
        "none",
        choice("none", "configuration", "all"),
        "what queues and exchanges replicate by default: none, configuration or all"
        " (the argument qpid.replicate overrides it per queue or exchange)",
        metavar="none|configuration|all",
    )
    ha_username: str | None = _option(
        None,
        non_empty,
        "user name HA brokers authenticate with to each other",
        metavar="USER",
        default_text="none",
    )
    ha_password: str | None = _option(
        None,
        non_empty,
        "password HA brokers authenticate with to each other",
        metavar="PASS",
        default_text="none",
        secret=True,
    )
    ha_mechanism: str = _option(
        "PLAIN",
        upper_choice("PLAIN", "AMQPLAIN", "ANONYMOUS"),
        "SASL mechanism HA brokers authenticate with to each other: PLAIN, AMQPLAIN or ANONYMOUS",
        metavar="MECHANISM",
    )
    ha_agent: str | None = _option(
        None,
        agent_name,
        "node name of the qpid-ha-agent that runs this broker: from its start the broker refuses"
        " promotions that are not that agent's (else from the agent's first health check on)",
        metavar="NODE",
        default_text="none",
    )
    ha_liveness_port: int = _option(
        0,
        int_range(0, 65535),
        "port of the liveness answer and lease renewal served off the event loop, on"
        " mgmt-interface (0 picks a free port; GET /api/ha names it)",
        metavar="PORT",
    )
    ha_backup_timeout: float = _option(
        5.0,
        duration(65535.0),
        "longest a recovering primary waits for an expected backup to connect (a connected"
        " one is awaited until it is ready)",
        metavar="SECONDS",
    )
    ha_member_lease: float = _option(
        0.8,
        positive_duration(3600.0),
        "the member lease: how long each in-sync backup's grant lets the primary serve,"
        " counted from the request (asked every quarter of it; replication format 3)",
        metavar="SECONDS",
    )
    ha_member_lease_max: float = _option(
        3.2,
        positive_duration(3600.0),
        "the longest member lease a request asks: the primary asks ha-member-lease plus"
        " twice its loop's and its members' recent lateness, up to this (at most"
        " ha-member-lease: never longer); a member promoted after the primary's loss waits"
        " out the last grant",
        metavar="SECONDS",
    )
    ha_clock_drift: float = _option(
        0.01,
        fraction_below(0.5),
        "the bound on clock rate drift between brokers, a fraction (0.01: 1 %); a backup"
        " keeps its member-lease grant that much longer",
        metavar="FRACTION",
    )
    ha_flow_messages: int = _option(
        1000,
        int_range(1, 65535),
        "most unacknowledged replication batches in flight to each backup (1..65535)",
        metavar="N",
    )
    link_maintenance_interval: float = _option(
        0.1,
        positive_duration(65535.0),
        "how often a backup checks its link to the primary and reconnects if need be"
        " (greater than 0), e.g. 2, 100ms",
        metavar="SECONDS",
    )
    link_heartbeat_interval: float = _option(
        1.0,
        positive_duration(65535.0),
        "heartbeat interval of HA links; a link silent for twice this is dead, and a backup"
        " whose primary's host acknowledges nothing for 3/4 of it is cut off (greater than 0)",
        metavar="SECONDS",
    )


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One row of the option table."""

    name: str  #: long option name, e.g. ``mgmt-port``
    dest: str  #: the :class:`BrokerOptions` field, e.g. ``mgmt_port``
    convert: Callable[[str], Any]
    default: Any  #: the default value, or :data:`dataclasses.MISSING` if computed
    default_factory: Callable[[], Any] | None
    help: str
    metavar: str
    default_text: str | None

    @property
    def flag(self) -> str:
        return "--" + self.name

    def default_value(self) -> Any:
        if self.default_factory is not None:
            return self.default_factory()
        return self.default

    def show_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        return show(self.default_value())


def _specs() -> tuple[OptionSpec, ...]:
    specs = []
    for f in dataclasses.fields(BrokerOptions):
        meta: _OptionMeta = f.metadata[_META]
        factory = f.default_factory
        specs.append(
            OptionSpec(
                name=f.name.replace("_", "-"),
                dest=f.name,
                convert=meta.convert,
                default=f.default,
                default_factory=None if factory is dataclasses.MISSING else factory,
                help=meta.help,
                metavar=meta.metavar,
                default_text=meta.default_text,
            )
        )
    return tuple(specs)


#: Every option, in declaration order.
OPTION_SPECS: tuple[OptionSpec, ...] = _specs()
BY_NAME: dict[str, OptionSpec] = {spec.name: spec for spec in OPTION_SPECS}
BY_DEST: dict[str, OptionSpec] = {spec.dest: spec for spec in OPTION_SPECS}
