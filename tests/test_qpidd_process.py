"""The qpidd process: start-up errors are one clear line, shutdown is orderly."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pika
import pytest

from common.polling import free_port, poll_until
from tests.broker_process import QPIDD, BrokerProcess
from tests.drill.log_schema import problems
from tests.security.users import write_users


def run_qpidd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QPIDD, "--interface=127.0.0.1", *args], capture_output=True, text=True, timeout=30
    )


def test_data_dir_is_locked_against_a_second_broker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(tmp_path / "a", args=[f"--data-dir={data}"]).start()
    try:
        result = run_qpidd(f"--port={free_port()}", "--mgmt-port=0", f"--data-dir={data}")
        assert result.returncode == 1
        assert "another qpidd is using this data directory" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        first.stop()


def test_port_in_use_is_a_clear_error(broker: BrokerProcess) -> None:
    result = run_qpidd(f"--port={broker.port}", "--mgmt-port=0")
    assert result.returncode == 1
    assert "cannot listen" in result.stderr and "Traceback" not in result.stderr


def test_a_listen_error_names_the_listener_and_its_address(broker: BrokerProcess) -> None:
    """It said "cannot listen: [Errno -2] Name or service not known" (which address? the
    AMQP one or the management one?), or named a bound address without its option: an
    operator beside another broker or RabbitMQ had to guess which port to move."""
    result = run_qpidd("--port=0", f"--mgmt-port={broker.mgmt_port}")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines()[-1] == (
        f"qpidd: error: cannot listen on 127.0.0.1:{broker.mgmt_port} (management API,"
        " --mgmt-interface/--mgmt-port): address already in use"
    )
    result = run_qpidd(f"--port={broker.port}", "--mgmt-port=0")
    assert result.stderr.splitlines()[-1] == (
        f"qpidd: error: cannot listen on 127.0.0.1:{broker.port} (AMQP,"
        " --interface/--port): address already in use"
    )
    port = free_port()
    result = run_qpidd("--port=0", "--mgmt-interface=no-such-host.invalid", f"--mgmt-port={port}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"qpidd: error: cannot listen on no-such-host.invalid:{port} (management API,"
        " --mgmt-interface/--mgmt-port): cannot resolve the address ("
    ), result.stderr


def test_a_failed_start_prints_its_one_line_alone(broker: BrokerProcess, tmp_path: Path) -> None:
    """A failed start printed the JSON lines logged on the way (store_recovered,
    broker_start_failed) before its ``qpidd: error:`` line: now that line is all of stderr
    (logging to stderr, the default); a --log-file still gets broker_start_failed."""
    data = tmp_path / "data"
    cases = [  # (arguments, exit status, what the line says)
        ([f"--port={broker.port}", "--mgmt-port=0", f"--data-dir={data}"], 1, "cannot listen"),
        (["--port=0", f"--mgmt-port={broker.mgmt_port}"], 1, "management API"),
        (["--port=0", "--mgmt-port=0", "--data-dir=/proc/no-such-dir"], 1, "data directory"),
        (["--port=0", "--mgmt-port=0", f"--sasl-users={tmp_path}"], 2, "users file"),
        (["--port=0", "--mgmt-port=0", f"--acl-file={tmp_path}"], 2, "ACL file"),
        ([f"--config={tmp_path / 'none.conf'}"], 2, "config file"),
        (["--port=0", "--max-memory=lots"], 2, "max-memory"),
    ]
    for args, status, words in cases:
        result = run_qpidd(*args)
        lines = result.stderr.splitlines()
        assert (result.returncode, result.stdout, len(lines)) == (status, "", 1), (args, lines)
        assert lines[0].startswith("qpidd: error:") and words in lines[0], (args, lines)
    log = tmp_path / "qpidd.log"
    result = run_qpidd(f"--port={broker.port}", "--mgmt-port=0", f"--log-file={log}")
    assert (result.returncode, len(result.stderr.splitlines())) == (1, 1)
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert events[-1] == "broker_start_failed"


def test_bad_users_file_exit_2(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("alice\n")
    result = run_qpidd(f"--port={free_port()}", "--mgmt-port=0", f"--sasl-users={users}")
    assert result.returncode == 2
    assert f"{users}:1" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--port=notaport"],
        ["--heartbeat=10 parsecs"],
        ["--auth=maybe"],
        ["--log-format=xml"],
        ["--no-such-option"],
        ["--ha-cluster-name=prod"],  # names a cluster this broker is not in
    ],
)
def test_bad_option_exit_2(args: list[str]) -> None:
    result = run_qpidd(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("qpidd: error:")
    assert "Traceback" not in result.stderr


def test_users_file_and_sigterm_closes_clients_with_320(tmp_path: Path) -> None:
    users = tmp_path / "users"
    write_users(users, {"alice": "s3cret"})
    broker = BrokerProcess(tmp_path / "b", args=[f"--sasl-users={users}"]).start()
    try:
        credentials = pika.PlainCredentials("alice", "s3cret")
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", broker.port, credentials=credentials)
        )
        channel = connection.channel()
        channel.queue_declare("q")
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            while True:
                connection.process_data_events(time_limit=0.1)
        assert info.value.reply_code == 320
        assert poll_until(lambda: broker.proc is not None and broker.proc.poll() is not None, 10)
        assert broker.proc.returncode == 0
        # (debug lines aside: the fixture's port probes leave handshake_abandoned ones)
        events = [e["event"] for e in broker.events() if e.get("level") != "debug"]
        assert events[0] == "broker_started" and events[-1] == "broker_stopped"
    finally:
        broker.stop()


def test_store_status_empty_then_clean_after_sigterm_dirty_after_sigkill(tmp_path: Path) -> None:
    """Seed 002's store status, as /api/status reports it and the agent ranks brokers."""
    import json
    import signal
    import urllib.request

    from tests.broker_process import BrokerProcess

    def status(broker: BrokerProcess) -> str:
        url = f"http://127.0.0.1:{broker.mgmt_port}/api/status"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(json.load(answer)["store_status"])

    data = tmp_path / "data"
    seen = []
    for stop in (signal.SIGTERM, signal.SIGKILL, signal.SIGTERM):
        broker = BrokerProcess(tmp_path / "b", args=[f"--data-dir={data}"]).start()
        try:
            seen.append(status(broker))
        finally:
            broker.stop(stop)
        broker.port = broker.mgmt_port = 0
    broker = BrokerProcess(tmp_path / "b", args=[f"--data-dir={data}"]).start()
    try:
        seen.append(status(broker))
    finally:
        broker.stop()
    assert seen == ["empty", "clean", "dirty", "clean"]
    no_dir = BrokerProcess(tmp_path / "n").start()
    try:
        assert status(no_dir) == "none"  # no --data-dir: no store (docs/store.md)
    finally:
        no_dir.stop()


def test_broker_stopped_says_why_and_how_the_store_was_left(tmp_path: Path) -> None:
    """The last line of a stopped broker's log was `broker_stopped` with its uptime only:
    an operator could not tell a SIGTERM (systemctl stop, qpid-ha stop-member) from an
    interrupt, nor whether the store was left clean, without the next start's line."""
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        broker = BrokerProcess(tmp_path / name, args=[f"--data-dir={tmp_path / name / 'd'}"])
        broker.start()
        assert broker.stop(sig) == 0
        stopped = [e for e in broker.events() if e.get("event") == "broker_stopped"]
        assert len(stopped) == 1
        assert (stopped[0]["reason"], stopped[0]["store_status"]) == (name, "clean")
    broker = BrokerProcess(tmp_path / "nostore").start()
    assert broker.stop() == 0
    stopped = [e for e in broker.events() if e.get("event") == "broker_stopped"]
    # It said "unknown", a word docs/log-schema.md did not have: "none" is (no store).
    assert (stopped[0]["reason"], stopped[0]["store_status"]) == ("SIGTERM", "none")
    assert problems(stopped[0]) == []


@pytest.mark.parametrize(
    ("args", "cluster"),
    [
        (["--ha-cluster=yes", "--ha-cluster-name=prod"], "prod"),
        (["--ha-cluster=yes", "--console-cluster=east"], "east"),  # the agents' --cluster
        (["--ha-cluster=yes"], None),  # a member not told its cluster's name
        (["--console-cluster=east"], None),  # outside a cluster
    ],
)
def test_a_cluster_members_log_lines_name_its_cluster(
    tmp_path: Path, args: list[str], cluster: str | None
) -> None:
    """docs/log-schema.md: ``cluster`` is the cluster's name, null outside a cluster."""
    if "--ha-cluster=yes" in args:
        args = [*args, "--ha-brokers-url=127.0.0.1:1"]
    broker = BrokerProcess(tmp_path, args=args).start()
    try:
        lines = broker.events()
    finally:
        broker.stop()
    assert "broker_started" in [e["event"] for e in lines]
    assert {e["cluster"] for e in lines} == {cluster}
    assert [p for e in lines for p in problems(e)] == []
