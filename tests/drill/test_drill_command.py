"""``qpid-ha drill`` end to end against a real stand-alone qpidd, with pika as the client:
the check, the exit codes (0, 1 when a confirmed message is lost, 2, 3), the log events
validated against ``analytics/log_schema.json`` with the broker's own log."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from typer.testing import CliRunner

from qpid_ha_cli.main import app
from tests.broker_process import BrokerProcess, free_port
from tests.drill.log_schema import check_log_file

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))


def drill(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QPID_HA, "drill", *args], capture_output=True, text=True, timeout=timeout
    )


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def queue_status(broker: BrokerProcess, queue: str) -> int:
    """The HTTP status of the management API's GET /api/queues/QUEUE."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.mgmt_port}/api/queues/{queue}",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def check_numbers(line: str) -> dict[str, float]:
    """``drill OK: sent 300, confirmed 300, ...`` -> {"sent": 300, ...}."""
    _, _, counts = line.partition(": ")
    numbers: dict[str, float] = {}
    for part in counts.split(", "):
        *name, value = part.removesuffix(" ms").split()
        numbers[" ".join(name)] = float(value)
    return numbers


def test_count_against_a_standalone_broker(broker: BrokerProcess, tmp_path: Path) -> None:
    log = tmp_path / "drill.log"
    result = drill(
        "--url",
        f"amqp:guest/guest@127.0.0.1:{broker.port}",
        "--count=300",
        "--rate=0",
        f"--log-file={log}",
        "--node=d1",
        "--cluster=solo",
        "--scenario=standalone",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    (line,) = result.stdout.splitlines()
    assert line.startswith("drill OK: ")
    numbers = check_numbers(line)
    assert numbers["sent"] == numbers["confirmed"] == numbers["received"] == 300
    assert numbers["lost"] == numbers["duplicated"] == numbers["unconfirmed"] == 0
    logged = events(log)
    assert logged[0]["event"] == "drill_started"
    assert sorted(e["role"] for e in logged if e["event"] == "client_connected") == [
        "consumer",
        "publisher",
    ]
    started, finished = logged[0], logged[-1]
    assert started["scenario"] == "standalone" and started["gap_threshold_ms"] == 50.0
    assert started["url"] == f"amqp:guest/***@tcp:127.0.0.1:{broker.port}"
    assert finished["event"] == "drill_finished"
    assert (finished["sent"], finished["confirmed"], finished["received"]) == (300, 300, 300)
    assert finished["lost"] == 0 and finished["duplicated"] == 0
    for event in logged:
        assert (event["component"], event["node"], event["cluster"]) == ("drill", "d1", "solo")
        assert event["epoch"] is None  # a stand-alone broker announces no epoch
    # the drill's queue is gone (it named it itself)
    assert queue_status(broker, started["queue"]) == 404
    # every line of the drill's and the broker's logs follows the schema
    for path in (log, broker.log_file):
        checked, problems = check_log_file(path)
        assert checked > 0 and problems == [], problems[:5]


def test_duration_at_a_rate_with_broker_options(broker: BrokerProcess, tmp_path: Path) -> None:
    log = tmp_path / "drill.log"
    result = drill(
        "--broker",
        f"127.0.0.1:{free_port()}",  # nobody there: the next of the list is tried
        "--broker",
        f"guest/guest@127.0.0.1:{broker.port}",
        "--duration=1.5s",
        "--rate=100",
        "--gap-threshold=2s",
        "--queue=drill-rate",
        f"--log-file={log}",
    )
    assert result.returncode == 0, result.stderr
    numbers = check_numbers(result.stdout.strip())
    assert 20 <= numbers["sent"] <= 151  # 1.5 s at 100/s at most (the machine may be busy)
    assert numbers["sent"] == numbers["confirmed"] == numbers["received"]
    assert numbers["confirm gaps"] == 0  # nothing waited 2 s for its confirm
    assert check_log_file(log)[1] == []


def test_a_confirmed_message_lost_to_the_drill_exits_1(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """Another consumer on the drill's queue takes confirmed messages the drill never gets."""
    queue = "drill-thief"
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    stolen: list[bytes] = []
    stop = threading.Event()
    ready = threading.Event()

    def thief() -> None:
        ready.set()
        for method, _props, body in channel.consume(queue, inactivity_timeout=0.05):
            if method is not None:
                stolen.append(body)
                channel.basic_ack(method.delivery_tag)
            if stop.is_set():
                break
        channel.cancel()

    thread = threading.Thread(target=thief, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        result = drill(
            f"--url=127.0.0.1:{broker.port}",
            f"--queue={queue}",
            "--count=100",
            "--rate=0",
            "--drain-timeout=1",
            f"--log-file={tmp_path / 'drill.log'}",
        )
    finally:
        stop.set()
        thread.join(10)
        connection.close()
    assert result.returncode == 1, result.stderr
    numbers = check_numbers(result.stdout.strip())
    assert stolen and numbers["lost"] == len(stolen) > 0
    assert numbers["received"] + numbers["lost"] == numbers["confirmed"] == 100
    assert result.stdout.startswith("drill FAILED: ")
    finished = events(tmp_path / "drill.log")[-1]
    assert finished["event"] == "drill_finished" and finished["level"] == "error"


def test_no_broker_reachable_exits_3_in_one_line(tmp_path: Path) -> None:
    log = tmp_path / "drill.log"
    result = drill(
        f"--url=127.0.0.1:{free_port()},127.0.0.1:{free_port()}",
        "--connect-timeout=0.5",
        f"--log-file={log}",
    )
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("qpid-ha drill: error: no broker of amqp:tcp:127.0.0.1:")
    assert result.stdout == ""
    assert [e["event"] for e in events(log)] == ["drill_started", "drill_unreachable"]
    assert check_log_file(log)[1] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give the brokers"),
        (["--url=h1", "--broker=h2"], "not both"),
        (["--url=h1:notaport"], "invalid port 'notaport'"),
        (["--url=amqp://u:p@h1:99999"], "outside 1..65535"),
        (["--url=h1", "--rate=fast"], "--rate: expected a number, got 'fast'"),
        (["--url=h1", "--rate=-5"], "--rate: must be a finite number >= 0"),
        (["--url=h1", "--rate=nan"], "--rate: must be a finite number >= 0"),
        (["--url=h1", "--count=0"], "--count: must be at least 1"),
        (["--url=h1", "--count=1.5"], "--count: expected a whole number"),
        (["--url=h1", "--duration=0"], "--duration: must be more than 0"),
        (["--url=h1", "--duration=10min"], "--duration: invalid duration"),
        (["--url=h1", "--gap-threshold=-1"], "--gap-threshold: invalid duration"),
        (["--url=h1", "--log-level=loud"], "invalid log level 'loud'"),
        (["--url=h1", "--log-format=xml"], "invalid log format 'xml'"),
        (["--url=h1", "--log-file=/nonexistent/dir/drill.log"], "--log-file:"),
        (["--url=h1", "--queue="], "--queue: a queue name has 1 to 255 bytes"),
        (["--url=h1", "--queue-type=stream"], "--queue-type: expected one of classic, quorum"),
    ],
)
def test_bad_usage_exits_2_in_one_line(args: list[str], message: str) -> None:
    """In process (typer's CliRunner on qpid-ha's app): each run of the command costs
    seconds of imports on a busy machine; the next test runs the real command."""
    result = CliRunner().invoke(app, ["drill", *args])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("qpid-ha drill: error: ")
    assert message in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url=h1:notaport"], "invalid port 'notaport'"),
        (["--url=h1", "--rate=fast"], "--rate: expected a number, got 'fast'"),
    ],
)
def test_bad_usage_of_the_command_exits_2_in_one_line(args: list[str], message: str) -> None:
    result = drill(*args, timeout=30)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr == f"qpid-ha drill: error: {result.stderr.split(': ', 2)[2]}"
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
