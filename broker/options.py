"""The broker's options: command line, ``qpidd.conf``-style config file, defaults.

Every option is one field of :class:`BrokerOptions`, declared with :func:`_option`: its
default, the converter that reads its text and the help line. That declaration is the
table (:data:`OPTION_SPECS` is derived from it), so adding an option is adding one field.
The long option name is the field name with ``-`` for ``_`` (``mgmt_port`` ->
``--mgmt-port``).

Precedence: the command line wins over the config file (``--config FILE``), the file over
the defaults. The file holds ``name=value`` lines, where ``name`` is the long option name
without the dashes (``port=5673``, ``log-format=console``); blank lines and ``#``
comments (whole-line, or after whitespace) are ignored.

The HA options are seed 001's (section 1.12.3: ``ha-cluster``, ``ha-brokers-url``, ...,
``link-heartbeat-interval``). :func:`check_options` then checks the options that depend on
each other (``ha-cluster=yes`` needs ``ha-brokers-url``).

Every mistake raises :class:`OptionsError` with a message naming the option and the bad
value (and, for the file, ``path:line:``). :func:`main_parse` turns it into one
``qpidd: error: ...`` line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from broker import __version__
from common.duration import format_duration, parse_duration
from common.exit_status import ExitStatus
from common.url import BrokerUrl, format_url, parse_url

__all__ = [
    "OPTION_SPECS",
    "BrokerOptions",
    "OptionSpec",
    "OptionsError",
    "build_parser",
    "check_options",
    "main_parse",
    "parse_bool",
    "parse_options",
    "public_url",
]

T = TypeVar("T")

_META = "qpidd.option"


class OptionsError(Exception):
    """A bad command line, option value or config file; the message says what and where."""


# -- converters: text -> value, or ValueError(reason) ----------------------------------

_TRUE = frozenset({"yes", "true", "1", "on"})
_FALSE = frozenset({"no", "false", "0", "off"})
_DIGITS = re.compile(r"[0-9]+")


def parse_bool(text: str) -> bool:
    """``yes``/``no`` (also ``true``/``false``, ``on``/``off``, ``1``/``0``), any case."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError("expected yes or no (or true/false, on/off, 1/0)")


def _int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    expected = (
        f"expected an integer from {low} to {high}"
        if high is not None
        else f"expected an integer >= {low}"
    )

    def convert(text: str) -> int:
        digits = text.strip()
        if _DIGITS.fullmatch(digits) is None or len(digits) > 30:
            raise ValueError(expected)
        value = int(digits)
        if value < low or (high is not None and value > high):
            raise ValueError(expected)
        return value

    return convert


def _choice(*choices: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        word = text.strip().lower()
        if word not in choices:
            raise ValueError("expected one of: " + ", ".join(choices))
        return word

    return convert


def _text(text: str) -> str:
    value = text.strip()
    if not value:
        raise ValueError("expected a non-empty value")
    return value


def _duration(maximum: float) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            seconds = parse_duration(text)
        except ValueError:
            raise ValueError(
                "expected a duration: seconds (e.g. 0.5) or a number with unit s, ms, us or ns"
            ) from None
        if seconds > maximum:
            raise ValueError(f"expected at most {format_duration(maximum)}")
        return seconds

    return convert


def _positive_duration(maximum: float) -> Callable[[str], float]:
    """Like :func:`_duration`, refusing zero."""
    duration = _duration(maximum)

    def convert(text: str) -> float:
        seconds = duration(text)
        if seconds <= 0:
            raise ValueError("expected a duration greater than 0")
        return seconds

    return convert


def _upper_choice(*choices: str) -> Callable[[str], str]:
    """One of ``choices`` (upper case names, e.g. SASL mechanisms), any case accepted."""

    def convert(text: str) -> str:
        word = text.strip().upper()
        if word not in choices:
            raise ValueError("expected one of: " + ", ".join(choices))
        return word

    return convert


def _url(text: str) -> str:
    """A broker URL (:func:`common.url.parse_url` checks it); the text is kept, stripped."""
    try:
        parse_url(text)
    except ValueError as exc:
        reason = str(exc)
        prefix = f"invalid broker URL {text!r}: "
        if reason.startswith(prefix):
            reason = reason[len(prefix) :]
        raise ValueError(
            f"expected a broker URL like host1,host2:5673 or amqp:tcp:host:5672 ({reason})"
        ) from None
    return text.strip()


def _show(value: object) -> str:
    """A default value as the help text shows it (and as the option would accept it)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format_duration(value)
    return str(value)


# -- the table -------------------------------------------------------------------------


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
        5672, _int_range(0, 65535), "AMQP listen port (0 picks a free port)", metavar="PORT"
    )
    interface: str = _option("0.0.0.0", _text, "address to bind the AMQP port", metavar="ADDR")
    mgmt_port: int = _option(
        8672,
        _int_range(0, 65535),
        "management HTTP API port (0 disables the API)",
        metavar="PORT",
    )
    mgmt_interface: str = _option(
        "0.0.0.0", _text, "address to bind the management HTTP API", metavar="ADDR"
    )
    data_dir: str | None = _option(
        None, _text, "directory for durable state", metavar="DIR", default_text="none"
    )
    auth: bool = _option(True, parse_bool, "require SASL authentication", metavar="yes|no")
    sasl_users: str | None = _option(
        None,
        _text,
        "users file, one name:password a line",
        metavar="FILE",
        default_text="none, the single user guest/guest",
    )
    log_level: str = _option(
        "info",
        _choice("debug", "info", "warning", "error", "critical"),
        "lowest level logged: debug, info, warning, error or critical",
        metavar="LEVEL",
    )
    log_file: str | None = _option(
        None, _text, "append log lines to FILE", metavar="FILE", default_text="stderr"
    )
    log_format: str = _option(
        "json",
        _choice("json", "console"),
        "json (one JSON object a line) or console (for humans)",
        metavar="json|console",
    )
    heartbeat: float = _option(
        60.0,
        _duration(65535.0),
        "AMQP heartbeat interval offered to clients, e.g. 60, 10s, 500ms (0 disables)",
        metavar="SECONDS",
    )
    max_connections: int = _option(
        500, _int_range(1), "maximum number of open client connections", metavar="N"
    )
    max_frame_size: int = _option(
        131072,
        _int_range(4096, 16 * 1024 * 1024),
        "largest AMQP frame offered to clients, in bytes (4096..16777216)",
        metavar="BYTES",
    )
    max_channels: int = _option(
        2047, _int_range(1, 65535), "most channels per connection (1..65535)", metavar="N"
    )
    default_queue_limit: int = _option(
        104857600,
        _int_range(0),
        "default maximum bytes held by each queue (0 = unlimited)",
        metavar="BYTES",
    )
    node_name: str = _option_factory(
        socket.gethostname, _text, "name of this broker in logs and status", metavar="NAME"
    )
    config: str | None = _option(
        None,
        _text,
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
    ha_queue_replication: bool = _option(
        False,
        parse_bool,
        "allow replication of specific queues without joining a cluster",
        metavar="yes|no",
    )
    ha_brokers_url: str | None = _option(
        None,
        _url,
        "URL the cluster brokers use to connect to each other: every broker's address,"
        " comma separated, e.g. node1,node2,node3",
        metavar="URL",
        default_text="none",
    )
    ha_public_url: str | None = _option(
        None,
        _url,
        "URL advertised to clients (connection.open-ok known-hosts, a backup's refusal,"
        " /api/ha), e.g. a virtual IP; when unset, ha-brokers-url is advertised",
        metavar="URL",
        default_text="none",
    )
    ha_replicate: str = _option(
        "none",
        _choice("none", "configuration", "all"),
        "what queues and exchanges replicate by default: none, configuration or all"
        " (the argument qpid.replicate overrides it per queue or exchange)",
        metavar="none|configuration|all",
    )
    ha_username: str | None = _option(
        None,
        _text,
        "user name HA brokers authenticate with to each other",
        metavar="USER",
        default_text="none",
    )
    ha_password: str | None = _option(
        None,
        _text,
        "password HA brokers authenticate with to each other",
        metavar="PASS",
        default_text="none",
        secret=True,
    )
    ha_mechanism: str = _option(
        "PLAIN",
        _upper_choice("PLAIN", "AMQPLAIN", "ANONYMOUS"),
        "SASL mechanism HA brokers authenticate with to each other: PLAIN, AMQPLAIN or ANONYMOUS",
        metavar="MECHANISM",
    )
    ha_backup_timeout: float = _option(
        10.0,
        _duration(65535.0),
        "longest a recovering primary waits for an expected backup to connect and be ready",
        metavar="SECONDS",
    )
    ha_flow_messages: int = _option(
        1000,
        _int_range(1, 65535),
        "most unacknowledged replication batches in flight to each backup (1..65535)",
        metavar="N",
    )
    link_maintenance_interval: float = _option(
        2.0,
        _positive_duration(65535.0),
        "how often a backup checks its link to the primary and reconnects if need be"
        " (greater than 0), e.g. 2, 100ms",
        metavar="SECONDS",
    )
    link_heartbeat_interval: float = _option(
        120.0,
        _positive_duration(65535.0),
        "heartbeat interval of HA links; a backup silent for twice this is dead (greater than 0)",
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
        return _show(self.default_value())


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
_BY_NAME: dict[str, OptionSpec] = {spec.name: spec for spec in OPTION_SPECS}
_BY_DEST: dict[str, OptionSpec] = {spec.dest: spec for spec in OPTION_SPECS}


# -- parsing ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`OptionsError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise OptionsError(message)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; every option's value is kept as text (converted later)."""
    parser = _Parser(
        prog="qpidd",
        description="An AMQP 0-9-1 message broker with active-passive high availability.",
        epilog=(
            "Options can also be set in a file given with --config: one name=value a line, "
            "e.g. port=5673 or log-format=console; # starts a comment. "
            "The command line wins over the file."
        ),
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument("--version", action="version", version=f"qpidd {__version__}")
    for spec in OPTION_SPECS:
        help_text = f"{spec.help} (default: {spec.show_default()})"
        parser.add_argument(
            spec.flag,
            dest=spec.dest,
            metavar=spec.metavar,
            help=help_text.replace("%", "%%"),
        )
    return parser


def _unknown(name: str, flag: str) -> str:
    message = f"unknown option {flag!r}"
    close = difflib.get_close_matches(name, list(_BY_NAME), n=1)
    if close:
        suggestion = ("--" if flag.startswith("--") else "") + close[0]
        message += f" (did you mean {suggestion!r}?)"
    return message


def _convert(spec: OptionSpec, text: str, where: str | None) -> Any:
    try:
        return spec.convert(text)
    except ValueError as exc:
        if where is None:
            raise OptionsError(f"invalid value {text!r} for option {spec.flag}: {exc}") from None
        raise OptionsError(
            f"{where}: invalid value {text!r} for option {spec.name!r}: {exc}"
        ) from None


_COMMENT = re.compile(r"(?:^|\s)#.*\Z", re.DOTALL)


def read_config_file(path: str) -> list[tuple[OptionSpec, str, str]]:
    """The ``(spec, value text, "path:line")`` settings of a config file, in file order.

    :raises OptionsError: if the file cannot be read or a line is not a known option.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise OptionsError(
            f"cannot read config file {path!r}: {exc.strerror or exc.__class__.__name__}"
        ) from None
    except UnicodeDecodeError as exc:
        raise OptionsError(f"cannot read config file {path!r}: not UTF-8 text ({exc})") from None
    settings: list[tuple[OptionSpec, str, str]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        where = f"{path}:{lineno}"
        line = _COMMENT.sub("", raw).strip()
        if not line:
            continue
        name, equals, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not equals:
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise OptionsError(f"{where}: expected name=value, got {shown!r}")
        if not name:
            raise OptionsError(f"{where}: missing option name before '='")
        spec = _BY_NAME.get(name)
        if spec is None:
            raise OptionsError(f"{where}: {_unknown(name, name)}")
        if spec.dest == "config":
            raise OptionsError(f"{where}: option 'config' cannot be set in a config file")
        settings.append((spec, value, where))
    return settings


def parse_options(argv: Sequence[str]) -> BrokerOptions:
    """Build the options from ``argv`` (without the program name) and any ``--config``.

    ``--help`` and ``--version`` print to stdout and raise ``SystemExit(0)``.

    :raises OptionsError: for any bad option, value or config file.
    """
    parser = build_parser()
    namespace, extras = parser.parse_known_args(list(argv))
    if extras:
        first = extras[0]
        if first.startswith("-"):
            flag = first.split("=", 1)[0]
            raise OptionsError(_unknown(flag.lstrip("-"), flag))
        raise OptionsError(f"unexpected argument {first!r}")
    given: dict[str, str] = vars(namespace)
    values: dict[str, Any] = {}
    if "config" in given:
        path = _convert(_BY_DEST["config"], given["config"], None)
        for spec, text, where in read_config_file(path):
            values[spec.dest] = _convert(spec, text, where)
    for dest, text in given.items():
        values[dest] = _convert(_BY_DEST[dest], text, None)
    options = BrokerOptions(**values)
    check_options(options)
    return options


def check_options(options: BrokerOptions) -> None:
    """The checks that involve more than one option (:func:`parse_options` runs them).

    :raises OptionsError: naming the options that do not fit together.
    """
    if options.ha_cluster and options.ha_brokers_url is None:
        raise OptionsError(
            "ha-cluster=yes needs ha-brokers-url (the addresses of every broker in the cluster)"
        )
    if options.ha_cluster:
        size = len((public_url(options) or "").encode())
        if size > KNOWN_HOSTS_MAX:
            name = "ha-public-url" if options.ha_public_url else "ha-brokers-url"
            raise OptionsError(
                f"{name} is too long to advertise to clients: {size} bytes in canonical form,"
                f" connection.open-ok known-hosts holds at most {KNOWN_HOSTS_MAX}"
                " (set a shorter ha-public-url, e.g. a virtual IP)"
            )
    if options.link_maintenance_interval <= 0:
        raise OptionsError(
            f"invalid value {_show(options.link_maintenance_interval)!r} for option"
            " --link-maintenance-interval: expected a duration greater than 0"
        )
    if options.link_heartbeat_interval <= 0:
        raise OptionsError(
            f"invalid value {_show(options.link_heartbeat_interval)!r} for option"
            " --link-heartbeat-interval: expected a duration greater than 0"
        )


#: connection.open-ok's known-hosts is a short string.
KNOWN_HOSTS_MAX = 255


def public_url(options: BrokerOptions) -> str | None:
    """The URL advertised to clients: ``ha-public-url``, else ``ha-brokers-url``.

    In the canonical form (``amqp:tcp:host:port,...``) and without credentials, which are
    the brokers' own and never shown to clients. None when neither option is set.
    """
    text = options.ha_public_url or options.ha_brokers_url
    if text is None:
        return None
    return format_url(BrokerUrl(parse_url(text).addresses))


def main_parse(argv: Sequence[str]) -> BrokerOptions:
    """:func:`parse_options` for ``main()``: on error print one line and exit with 2."""
    try:
        return parse_options(argv)
    except OptionsError as exc:
        print(f"qpidd: error: {exc}", file=sys.stderr)
        raise SystemExit(ExitStatus.USAGE) from None
