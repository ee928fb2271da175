"""broker.options: command line, config file, defaults, and one-line errors."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker import __version__
from broker.option_table import BY_NAME
from broker.options import (
    OPTION_SPECS,
    BrokerOptions,
    OptionsError,
    check_options,
    main_parse,
    parse_bool,
    parse_options,
)

ROOT = Path(__file__).resolve().parent.parent

EXPECTED_DEFAULTS = {
    "port": 5672,
    "interface": "::",
    "mgmt_port": 8672,
    "mgmt_interface": "127.0.0.1,::1",
    "data_dir": None,
    "store_sync": "fsync",
    "store_cut_damaged": False,
    "truncate": False,
    "auth": True,
    "sasl_users": None,
    "loopback_users": "guest",
    "acl_file": None,
    "ssl_port": 5671,
    "ssl_cert_file": None,
    "ssl_key_file": None,
    "ssl_ca_file": None,
    "ssl_require_client_authentication": False,
    "metrics_per_queue": False,
    "mgmt_ssl": "auto",
    "require_encryption": False,
    "console_zk": None,
    "console_cluster": None,
    "console_agent_log": None,
    "console_zk_auth": None,
    "console_zk_ssl": False,
    "console_zk_ssl_ca_file": None,
    "console_zk_ssl_cert_file": None,
    "console_zk_ssl_key_file": None,
    "log_level": "info",
    "log_file": None,
    "log_format": "json",
    "heartbeat": 60.0,
    "handshake_timeout": 10.0,
    "max_connections": 500,
    "max_frame_size": 131072,
    "max_channels": 2047,
    "default_queue_limit": 104857600,
    "max_memory": "40%",
    "disk_free_limit": 50_000_000,
    "config": None,
    "ha_cluster": False,
    "ha_cluster_name": None,
    "ha_queue_replication": False,
    "ha_brokers_url": None,
    "ha_public_url": None,
    "ha_replicate": "none",
    "ha_username": None,
    "ha_password": None,
    "ha_mechanism": "PLAIN",
    "ha_agent": None,
    "ha_liveness_port": 0,
    "ha_backup_timeout": 5.0,
    "ha_member_lease": 0.8,
    "ha_member_lease_max": 3.2,
    "ha_clock_drift": 0.01,
    "ha_flow_messages": 1000,
    "link_maintenance_interval": 0.1,
    "link_heartbeat_interval": 1.0,
}


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- defaults and the table -----------------------------------------------------------


def test_defaults() -> None:
    options = parse_options([])
    assert dataclasses.asdict(options) == {**EXPECTED_DEFAULTS, "node_name": socket.gethostname()}
    assert options == BrokerOptions()


def test_table_matches_the_dataclass() -> None:
    fields = [f.name for f in dataclasses.fields(BrokerOptions)]
    assert [spec.dest for spec in OPTION_SPECS] == fields
    assert set(fields) == {*EXPECTED_DEFAULTS, "node_name"}
    for spec in OPTION_SPECS:
        assert spec.name == spec.dest.replace("_", "-")
        assert spec.help


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse_options([]).port = 1  # type: ignore[misc]


# -- the command line -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--port", "0"], "port", 0),
        (["--port=5673"], "port", 5673),
        (["--port", "65535"], "port", 65535),
        (["--interface", "127.0.0.1"], "interface", "127.0.0.1"),
        (["--mgmt-port", "0"], "mgmt_port", 0),
        (["--mgmt-interface", "::1"], "mgmt_interface", "::1"),
        (["--data-dir", "/var/lib/qpidd"], "data_dir", "/var/lib/qpidd"),
        (["--auth", "no"], "auth", False),
        (["--auth", "YES"], "auth", True),
        (["--sasl-users", "users.txt"], "sasl_users", "users.txt"),
        (["--log-level", "DEBUG"], "log_level", "debug"),
        (["--log-file", "/tmp/q.log"], "log_file", "/tmp/q.log"),
        (["--log-format", "console"], "log_format", "console"),
        (["--heartbeat", "10"], "heartbeat", 10.0),
        (["--heartbeat", "500ms"], "heartbeat", 0.5),
        (["--heartbeat", "0"], "heartbeat", 0.0),
        (["--max-connections", "1"], "max_connections", 1),
        (["--max-frame-size", "4096"], "max_frame_size", 4096),
        (["--max-frame-size", "16777216"], "max_frame_size", 16777216),
        (["--max-channels", "65535"], "max_channels", 65535),
        (["--handshake-timeout", "500ms"], "handshake_timeout", 0.5),
        (["--default-queue-limit", "0"], "default_queue_limit", 0),
        (["--max-memory", "2GiB"], "max_memory", "2GiB"),
        (["--max-memory", " 25% "], "max_memory", "25%"),
        (["--disk-free-limit", "1GB"], "disk_free_limit", 1_000_000_000),
        (["--disk-free-limit", "0"], "disk_free_limit", 0),
        (["--node-name", "n1"], "node_name", "n1"),
        (["--port", "1", "--port", "2"], "port", 2),
    ],
)
def test_each_option(argv: list[str], field: str, value: object) -> None:
    assert getattr(parse_options(argv), field) == value


@pytest.mark.parametrize(
    ("words", "value"),
    [(["yes", "true", "1", "on", "On"], True), (["no", "false", "0", "off", "NO"], False)],
)
def test_bool_spellings(words: list[str], value: bool) -> None:
    for word in words:
        assert parse_bool(word) is value


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--prot", "5"], "unknown option '--prot' (did you mean '--port'?)"),
        (["--por", "5"], "unknown option '--por'"),  # no abbreviations
        (["stray"], "unexpected argument 'stray'"),
        (["--port"], "argument --port: expected one argument"),
        (["--port", "abc"], "invalid value 'abc' for option --port: expected an integer"),
        (["--ha-member-lease", "0"], "invalid value '0' for option --ha-member-lease"),
        (["--ha-clock-drift", "0.5"], "invalid value '0.5' for option --ha-clock-drift"),
        (["--ha-clock-drift", "x"], "invalid value 'x' for option --ha-clock-drift: expected a"),
        (["--port", "65536"], "invalid value '65536' for option --port"),
        (["--port=-1"], "invalid value '-1' for option --port"),
        (["--mgmt-port", "1.5"], "invalid value '1.5' for option --mgmt-port"),
        (["--auth", "maybe"], "invalid value 'maybe' for option --auth: expected yes or no"),
        (["--log-level", "loud"], "invalid value 'loud' for option --log-level: expected one of"),
        (["--log-format", "xml"], "invalid value 'xml' for option --log-format"),
        (["--heartbeat", "10 parsecs"], "invalid value '10 parsecs' for option --heartbeat"),
        (["--heartbeat", "-1"], "invalid value '-1' for option --heartbeat"),
        (["--heartbeat", "70000"], "expected at most 65535s"),
        (["--max-connections", "0"], "invalid value '0' for option --max-connections"),
        (["--max-memory", "lots"], "invalid value 'lots' for option --max-memory: expected a"),
        (["--max-memory", "140%"], "invalid value '140%' for option --max-memory"),
        (["--disk-free-limit", "5 parsecs"], "option --disk-free-limit: expected a size"),
        (["--max-frame-size", "4095"], "from 4096 to 16777216"),
        (["--max-frame-size", "16777217"], "from 4096 to 16777216"),
        (["--max-channels", "0"], "invalid value '0' for option --max-channels"),
        (["--handshake-timeout", "0"], "invalid value '0' for option --handshake-timeout"),
        (["--default-queue-limit", "-5"], "option --default-queue-limit"),
        (["--node-name", ""], "invalid value '' for option --node-name"),
        (["--config", "/nonexistent/qpidd.conf"], "cannot read config file"),
    ],
)
def test_bad_command_lines(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(OptionsError) as info:
        parse_options(argv)
    assert expected in str(info.value)
    with pytest.raises(SystemExit) as exit_info:
        main_parse(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.err == f"qpidd: error: {info.value}\n"
    assert captured.out == ""


# -- the config file ------------------------------------------------------------------


def test_config_file_and_precedence(tmp_path: Path) -> None:
    path = write(
        tmp_path / "qpidd.conf",
        "# a qpidd.conf\n"
        "\n"
        "port=5673\n"
        "  log-format = console   # trailing comment\n"
        "auth=no\n"
        "heartbeat=250ms\n"
        "node-name=a#b\n"
        "max-channels=10\n",
    )
    from_file = parse_options(["--config", path])
    assert from_file.port == 5673
    assert from_file.log_format == "console"
    assert from_file.auth is False
    assert from_file.heartbeat == 0.25
    assert from_file.node_name == "a#b"  # '#' starts a comment only after whitespace
    assert from_file.config == path
    assert from_file.max_frame_size == 131072  # not in the file: the default

    both = parse_options(["--port", "5674", "--config", path, "--max-channels", "20"])
    assert both.port == 5674  # the command line wins, before or after --config
    assert both.max_channels == 20
    assert both.log_format == "console"  # the file wins over the default


def test_config_last_setting_wins(tmp_path: Path) -> None:
    path = write(tmp_path / "q.conf", "port=1\nport=2\n")
    assert parse_options(["--config", path]).port == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("port=5673\n\nprot=5\n", "qpidd.conf:3: unknown option 'prot' (did you mean 'port'?)"),
        ("port 5673\n", "qpidd.conf:1: expected name=value, got 'port 5673'"),
        ("=5\n", "qpidd.conf:1: missing option name before '='"),
        ("# c\nport=abc\n", "qpidd.conf:2: invalid value 'abc' for option 'port': expected"),
        ("auth=perhaps\n", "qpidd.conf:1: invalid value 'perhaps' for option 'auth'"),
        ("log-file=\n", "qpidd.conf:1: invalid value '' for option 'log-file'"),
        ("--port=5\n", "qpidd.conf:1: unknown option '--port'"),
        ("config=other.conf\n", "qpidd.conf:1: option 'config' cannot be set in a config file"),
    ],
)
def test_bad_config_files(
    text: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "qpidd.conf", text)
    with pytest.raises(OptionsError) as info:
        parse_options(["--config", "qpidd.conf"])
    assert str(info.value).startswith(expected)
    with pytest.raises(SystemExit) as exit_info:
        main_parse(["--config", "qpidd.conf"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"qpidd: error: {info.value}\n"


def test_bad_config_file_is_reported_even_when_overridden(tmp_path: Path) -> None:
    path = write(tmp_path / "q.conf", "port=abc\n")
    with pytest.raises(OptionsError, match=r"q\.conf:1: invalid value 'abc'"):
        parse_options(["--config", path, "--port", "1"])


def test_unreadable_config_files(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match=r"cannot read config file .*No such file"):
        parse_options(["--config", str(tmp_path / "missing.conf")])
    with pytest.raises(OptionsError, match="cannot read config file"):
        parse_options(["--config", str(tmp_path)])  # a directory
    binary = tmp_path / "binary.conf"
    binary.write_bytes(b"port=\xff\n")
    with pytest.raises(OptionsError, match="not UTF-8"):
        parse_options(["--config", str(binary)])


# -- --help and --version -------------------------------------------------------------


def test_help_lists_every_option_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main_parse(["--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping
    for spec in OPTION_SPECS:
        assert spec.flag in out
        assert f"(default: {spec.show_default()})" in out
    assert "(default: 5672)" in out
    assert "(default: 60s)" in out
    assert "(default: yes)" in out
    assert f"(default: {socket.gethostname()})" in out
    assert "--version" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main_parse(["--version"])
    assert info.value.code == 0
    assert (
        capsys.readouterr().out == f"qpidd {__version__} "
        "(replication formats 1-4, zookeeper formats 1-2, store formats 1-2)\n"
    )


# -- the HA options (seed 001, section 1.12.3) ----------------------------------------

#: (option name, value text, field, parsed value): each HA option set once.
HA_SETTINGS = [
    ("ha-cluster", "yes", "ha_cluster", True),
    ("ha-queue-replication", "yes", "ha_queue_replication", True),
    (
        "ha-brokers-url",
        "node1,node2:5673,ssl:node3",
        "ha_brokers_url",
        "node1,node2:5673,ssl:node3",
    ),
    ("ha-public-url", "amqp:tcp:20.0.20.200:5672", "ha_public_url", "amqp:tcp:20.0.20.200:5672"),
    ("ha-replicate", "configuration", "ha_replicate", "configuration"),
    ("ha-username", "hauser", "ha_username", "hauser"),
    ("ha-password", "s3cret", "ha_password", "s3cret"),
    ("ha-mechanism", "amqplain", "ha_mechanism", "AMQPLAIN"),
    ("ha-agent", "node-2", "ha_agent", "node-2"),
    ("ha-backup-timeout", "2.5", "ha_backup_timeout", 2.5),
    ("ha-member-lease", "500ms", "ha_member_lease", 0.5),
    ("ha-member-lease-max", "2s", "ha_member_lease_max", 2.0),
    ("ha-clock-drift", "0.05", "ha_clock_drift", 0.05),
    ("ha-flow-messages", "50", "ha_flow_messages", 50),
    ("link-maintenance-interval", "100ms", "link_maintenance_interval", 0.1),
    ("link-heartbeat-interval", "10s", "link_heartbeat_interval", 10.0),
]

#: ha-cluster=yes needs ha-brokers-url; added wherever a test sets ha-cluster alone.
NEEDED = {"ha-cluster": ["--ha-brokers-url", "node1"]}


@pytest.mark.parametrize(("name", "text", "field", "value"), HA_SETTINGS)
def test_ha_option_on_the_command_line(name: str, text: str, field: str, value: object) -> None:
    options = parse_options([f"--{name}", text, *NEEDED.get(name, [])])
    assert getattr(options, field) == value
    options = parse_options([f"--{name}={text}", *NEEDED.get(name, [])])
    assert getattr(options, field) == value


@pytest.mark.parametrize(("name", "text", "field", "value"), HA_SETTINGS)
def test_ha_option_in_a_config_file(
    name: str, text: str, field: str, value: object, tmp_path: Path
) -> None:
    extra = "ha-brokers-url=node1\n" if name in NEEDED else ""
    path = write(tmp_path / "qpidd.conf", f"{name}={text}\n{extra}")
    assert getattr(parse_options(["--config", path]), field) == value


def test_seed_cluster_config(tmp_path: Path) -> None:
    """The two lines of qpidd.conf the seed's rgmanager example gives (section 1.12.5)."""
    path = write(
        tmp_path / "qpidd.conf",
        "ha-cluster=yes\nha-brokers-url=20.0.20.1,20.0.20.2,20.0.20.3\n",
    )
    options = parse_options(["--config", path])
    assert options.ha_cluster is True
    assert options.ha_brokers_url == "20.0.20.1,20.0.20.2,20.0.20.3"
    # Everything else keeps its default.
    assert options.ha_replicate == "none"
    assert options.link_maintenance_interval == 0.1


def test_ha_option_spellings() -> None:
    options = parse_options(
        [
            "--ha-replicate",
            " ALL ",
            "--ha-mechanism",
            "Anonymous",
            "--ha-brokers-url",
            "  amqp:u/p@tcp:h1:5672,[::1]  ",
            "--ha-backup-timeout",
            "0",
            "--ha-flow-messages",
            "65535",
            "--link-heartbeat-interval",
            "1ns",
        ]
    )
    assert options.ha_replicate == "all"
    assert options.ha_mechanism == "ANONYMOUS"
    assert options.ha_brokers_url == "amqp:u/p@tcp:h1:5672,[::1]"  # the text, stripped
    assert options.ha_backup_timeout == 0.0
    assert options.ha_flow_messages == 65535
    assert options.link_heartbeat_interval == 1e-9


def test_ha_password_is_not_in_the_repr() -> None:
    options = parse_options(["--ha-password", "s3cret", "--ha-username", "hauser"])
    assert "s3cret" not in repr(options)
    assert "hauser" in repr(options)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--ha-cluster", "perhaps"], "invalid value 'perhaps' for option --ha-cluster"),
        (["--ha-queue-replication", "2"], "invalid value '2' for option --ha-queue-replication"),
        (["--ha-brokers-url", ""], "invalid value '' for option --ha-brokers-url"),
        (["--ha-brokers-url", "a,,b"], "invalid value 'a,,b' for option --ha-brokers-url"),
        (["--ha-brokers-url", "h:99999"], "option --ha-brokers-url: expected a broker URL"),
        (["--ha-brokers-url", "ftp:h:1:2"], "invalid value 'ftp:h:1:2' for option --ha-brokers"),
        (["--ha-public-url", "h:port"], "invalid value 'h:port' for option --ha-public-url"),
        (["--ha-replicate", "some"], "invalid value 'some' for option --ha-replicate: expected"),
        (["--ha-username", ""], "invalid value '' for option --ha-username"),
        (["--ha-password", " "], "invalid value ' ' for option --ha-password"),
        (["--ha-mechanism", "GSSAPI"], "invalid value 'GSSAPI' for option --ha-mechanism"),
        (["--ha-agent", "a b"], "invalid value 'a b' for option --ha-agent"),
        (["--ha-agent", ""], "invalid value '' for option --ha-agent"),
        (["--ha-backup-timeout", "soon"], "invalid value 'soon' for option --ha-backup-timeout"),
        (["--ha-backup-timeout", "-1"], "invalid value '-1' for option --ha-backup-timeout"),
        (["--ha-flow-messages", "0"], "invalid value '0' for option --ha-flow-messages"),
        (["--ha-flow-messages", "65536"], "invalid value '65536' for option --ha-flow-messages"),
        (["--ha-flow-messages", "x"], "invalid value 'x' for option --ha-flow-messages"),
        (
            ["--link-maintenance-interval", "0"],
            "invalid value '0' for option --link-maintenance-interval: expected a duration"
            " greater than 0",
        ),
        (
            ["--link-maintenance-interval", "0ms"],
            "invalid value '0ms' for option --link-maintenance-interval",
        ),
        (
            ["--link-maintenance-interval", "1 minute"],
            "invalid value '1 minute' for option --link-maintenance-interval",
        ),
        (
            ["--link-heartbeat-interval", "0"],
            "invalid value '0' for option --link-heartbeat-interval",
        ),
        (
            ["--link-heartbeat-interval", "-5"],
            "invalid value '-5' for option --link-heartbeat-interval",
        ),
        (
            ["--ha-cluster", "yes"],
            "ha-cluster=yes needs ha-brokers-url (the addresses of every broker in the cluster)",
        ),
    ],
)
def test_bad_ha_options(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(OptionsError) as info:
        parse_options(argv)
    assert expected in str(info.value)
    with pytest.raises(SystemExit) as exit_info:
        main_parse(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"qpidd: error: {info.value}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ha-cluster=maybe\n", "qpidd.conf:1: invalid value 'maybe' for option 'ha-cluster'"),
        ("ha-brokers-url=a,\n", "qpidd.conf:1: invalid value 'a,' for option 'ha-brokers-url'"),
        ("ha-public-url=[::1\n", "qpidd.conf:1: invalid value '[::1' for option 'ha-public-url'"),
        ("ha-replicate=most\n", "qpidd.conf:1: invalid value 'most' for option 'ha-replicate'"),
        ("ha-username=\n", "qpidd.conf:1: invalid value '' for option 'ha-username'"),
        ("ha-password=\n", "qpidd.conf:1: invalid value '' for option 'ha-password'"),
        ("ha-mechanism=X\n", "qpidd.conf:1: invalid value 'X' for option 'ha-mechanism'"),
        ("ha-backup-timeout=1h\n", "qpidd.conf:1: invalid value '1h' for option 'ha-backup"),
        ("ha-flow-messages=0\n", "qpidd.conf:1: invalid value '0' for option 'ha-flow-messages'"),
        (
            "ha-queue-replication=sometimes\n",
            "qpidd.conf:1: invalid value 'sometimes' for option 'ha-queue-replication'",
        ),
        (
            "link-maintenance-interval=0\n",
            "qpidd.conf:1: invalid value '0' for option 'link-maintenance-interval'",
        ),
        (
            "link-heartbeat-interval=0s\n",
            "qpidd.conf:1: invalid value '0s' for option 'link-heartbeat-interval'",
        ),
        (
            "ha-clustr=yes\n",
            "qpidd.conf:1: unknown option 'ha-clustr' (did you mean 'ha-cluster'?)",
        ),
        ("ha-cluster=yes\n", "ha-cluster=yes needs ha-brokers-url"),
    ],
)
def test_bad_ha_config_files(
    text: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "qpidd.conf", text)
    with pytest.raises(OptionsError) as info:
        parse_options(["--config", "qpidd.conf"])
    assert str(info.value).startswith(expected)
    with pytest.raises(SystemExit) as exit_info:
        main_parse(["--config", "qpidd.conf"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"qpidd: error: {info.value}\n"


def test_ha_cluster_url_may_come_from_either_source(tmp_path: Path) -> None:
    path = write(tmp_path / "qpidd.conf", "ha-brokers-url=node1,node2\n")
    options = parse_options(["--config", path, "--ha-cluster", "yes"])
    assert (options.ha_cluster, options.ha_brokers_url) == (True, "node1,node2")
    path = write(tmp_path / "other.conf", "ha-cluster=yes\n")
    options = parse_options(["--config", path, "--ha-brokers-url", "node3"])
    assert (options.ha_cluster, options.ha_brokers_url) == (True, "node3")
    # A URL without ha-cluster is fine (e.g. set ahead of joining).
    assert parse_options(["--ha-brokers-url", "node1"]).ha_cluster is False
    assert parse_options(["--ha-cluster", "no"]).ha_brokers_url is None


def test_check_options_on_built_options() -> None:
    check_options(BrokerOptions())
    check_options(BrokerOptions(ha_cluster=True, ha_brokers_url="node1"))
    with pytest.raises(OptionsError, match="ha-cluster=yes needs ha-brokers-url"):
        check_options(BrokerOptions(ha_cluster=True))
    with pytest.raises(OptionsError, match="--link-maintenance-interval"):
        check_options(BrokerOptions(link_maintenance_interval=0.0))
    with pytest.raises(OptionsError, match="--link-heartbeat-interval"):
        check_options(BrokerOptions(link_heartbeat_interval=0.0))


def test_help_lists_the_ha_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main_parse(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    out = out[out.index("options:") :]  # past the usage line
    for flag, default in [
        ("--ha-cluster yes|no", "(default: no)"),
        ("--ha-queue-replication yes|no", "(default: no)"),
        ("--ha-brokers-url URL", "(default: none)"),
        ("--ha-public-url URL", "(default: none)"),
        ("--ha-replicate none|configuration|all", "(default: none)"),
        ("--ha-username USER", "(default: none)"),
        ("--ha-password PASS", "(default: none)"),
        ("--ha-mechanism MECHANISM", "(default: PLAIN)"),
        ("--ha-backup-timeout SECONDS", "(default: 5s)"),
        ("--ha-flow-messages N", "(default: 1000)"),
        ("--link-maintenance-interval SECONDS", "(default: 100ms)"),
        ("--link-heartbeat-interval SECONDS", "(default: 1s)"),
    ]:
        assert flag in out
        start = out.index(flag) + len(flag)
        following = out.find(" --", start)
        described = out[start : following if following >= 0 else len(out)]
        assert default in described, (flag, described)


# -- as a real process: one line on stderr, status 2, never a traceback ---------------


def run_main_parse(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from broker.options import main_parse; import sys; main_parse(sys.argv[1:])",
            *argv,
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "config", "expected"),
    [
        (["--prot", "1"], None, "qpidd: error: unknown option '--prot'"),
        (["--port", "x"], None, "qpidd: error: invalid value 'x' for option --port"),
        (["--config", "nope.conf"], None, "qpidd: error: cannot read config file 'nope.conf'"),
        (["--config", "qpidd.conf"], "a=1\n", "qpidd: error: qpidd.conf:1: unknown option 'a'"),
        (["--config", "qpidd.conf"], "port\n", "qpidd: error: qpidd.conf:1: expected name=value"),
        (["--ha-cluster", "yes"], None, "qpidd: error: ha-cluster=yes needs ha-brokers-url"),
        (
            ["--link-maintenance-interval", "0"],
            None,
            "qpidd: error: invalid value '0' for option --link-maintenance-interval",
        ),
    ],
)
def test_process_errors(argv: list[str], config: str | None, expected: str, tmp_path: Path) -> None:
    if config is not None:
        write(tmp_path / "qpidd.conf", config)
    result = run_main_parse(*argv, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(expected)
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_process_help_and_success(tmp_path: Path) -> None:
    result = run_main_parse("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "--max-frame-size" in result.stdout
    assert result.stderr == ""
    result = run_main_parse("--port", "5673", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")


def test_the_docs_state_the_defaults_qpidd_has() -> None:
    """docs/management.md said the management API listens on 0.0.0.0 by default, where
    qpidd binds it to 127.0.0.1 (docs/security.md, --help): an operator reading it would
    expect `qpid-ha -b node1:8672` to work from another host. Each "`--OPTION` (default
    VALUE" in the operator's docs is checked against the option's default."""
    import re

    found = 0
    for name in ("README.md", "docs/management.md", "docs/deploy.md", "docs/security.md",
                 "docs/store.md", "docs/agent.md"):  # fmt: skip
        text = (ROOT / name).read_text(encoding="utf-8")
        # a value runs to white space, ";" or ")": "127.0.0.1,::1," is the list 127.0.0.1,::1
        for match in re.finditer(r"`--([a-z-]+)` \(default:? ([^;)\s]+)", text):
            spec = BY_NAME.get(match.group(1))
            if spec is None:  # another program's option
                continue
            found += 1
            value = match.group(2).strip().rstrip(",")
            assert value == spec.show_default(), (name, match.group(0))
    assert found >= 2
