"""The broker's options: command line, ``qpidd.conf``-style config file, defaults.

Every option is one field of :class:`BrokerOptions` (:mod:`broker.option_table`, the table:
default, converter, help line; :data:`OPTION_SPECS` is derived from it), read from its text
by a converter of :mod:`broker.option_converters`. The long option name is the field name
with ``-`` for ``_`` (``mgmt_port`` -> ``--mgmt-port``). This module reads the command line
and the config file into a :class:`BrokerOptions`; import the public names from here.

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
import difflib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from broker.option_converters import parse_bool, show
from broker.option_table import BY_DEST, BY_NAME, OPTION_SPECS, BrokerOptions, OptionSpec
from common.exit_status import ExitStatus
from common.url import BrokerUrl, format_url, parse_url
from common.version import version_line
from common.zk_access import check_tls_files, parse_digest

__all__ = [
    "OPTION_SPECS",
    "BrokerOptions",
    "OptionSpec",
    "OptionsError",
    "build_parser",
    "check_options",
    "log_cluster",
    "main_parse",
    "parse_bool",
    "parse_options",
    "public_url",
]


class OptionsError(Exception):
    """A bad command line, option value or config file; the message says what and where."""


# -- parsing ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`OptionsError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise OptionsError(message)


class _PrintVersion(argparse.Action):
    """``--version``: the one version line as it is (argparse's own action wraps it at the
    terminal's width, and the line is read by scripts and tests)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        print(version_line("qpidd"))
        parser.exit()


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
    parser.add_argument(
        "--version",
        action=_PrintVersion,
        nargs=0,
        help="print the version and the formats, then exit",
    )
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
    close = difflib.get_close_matches(name, list(BY_NAME), n=1)
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
        spec = BY_NAME.get(name)
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
        path = _convert(BY_DEST["config"], given["config"], None)
        for spec, text, where in read_config_file(path):
            values[spec.dest] = _convert(spec, text, where)
    for dest, text in given.items():
        values[dest] = _convert(BY_DEST[dest], text, None)
    options = BrokerOptions(**values)
    check_options(options)
    return options


def _check_console_zk(options: BrokerOptions) -> None:
    """The web console's ZooKeeper credentials and TLS files (common.zk_access)."""
    try:
        if options.console_zk_auth is not None:
            parse_digest(options.console_zk_auth, "console-zk-auth")
        ca, cert = options.console_zk_ssl_ca_file, options.console_zk_ssl_cert_file
        check_tls_files("console-zk-ssl", ca, cert, options.console_zk_ssl_key_file)
    except ValueError as exc:
        raise OptionsError(str(exc)) from None


def check_options(options: BrokerOptions) -> None:
    """The checks that involve more than one option (:func:`parse_options` runs them).

    :raises OptionsError: naming the options that do not fit together.
    """
    if options.ha_cluster and options.ha_brokers_url is None:
        raise OptionsError(
            "ha-cluster=yes needs ha-brokers-url (the addresses of every broker in the cluster)"
        )
    if options.ha_cluster_name is not None and not options.ha_cluster:
        raise OptionsError(
            "ha-cluster-name needs ha-cluster=yes (it names the cluster in the logs)"
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
    if options.require_encryption:
        if not options.ssl_cert_file or not options.ssl_key_file:
            raise OptionsError(
                "require-encryption needs ssl-cert-file and ssl-key-file: with no TLS listener"
                " nobody could connect"
            )
        addresses = parse_url(options.ha_brokers_url).addresses if options.ha_brokers_url else ()
        for address in addresses:
            if address.scheme != "ssl":
                raise OptionsError(
                    f"require-encryption: ha-brokers-url address {address.host}:{address.port}"
                    " is not ssl: (replication links must be encrypted; give ssl:HOST:SSL-PORT)"
                )
    _check_console_zk(options)
    if options.link_maintenance_interval <= 0:
        raise OptionsError(
            f"invalid value {show(options.link_maintenance_interval)!r} for option"
            " --link-maintenance-interval: expected a duration greater than 0"
        )
    if options.link_heartbeat_interval <= 0:
        raise OptionsError(
            f"invalid value {show(options.link_heartbeat_interval)!r} for option"
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


def log_cluster(options: BrokerOptions) -> str | None:
    """The ``cluster`` field of this broker's log lines: ``ha-cluster-name``, else
    ``console-cluster`` (both the agents' ``--cluster``) for a cluster member; None outside
    a cluster, and for a member given neither (docs/log-schema.md)."""
    if not options.ha_cluster:
        return None
    return options.ha_cluster_name or options.console_cluster


def main_parse(argv: Sequence[str]) -> BrokerOptions:
    """:func:`parse_options` for ``main()``: on error print one line and exit with 2."""
    try:
        return parse_options(argv)
    except OptionsError as exc:
        print(f"qpidd: error: {exc}", file=sys.stderr)
        raise SystemExit(ExitStatus.USAGE) from None
