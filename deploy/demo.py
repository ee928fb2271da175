"""`make demo`: start a broker on embedded defaults, push and pull messages, stop cleanly.

Starts ``qpidd`` on free loopback ports, publishes messages with publisher confirms through
pika (an unmodified client), consumes them back with acknowledgements, reads the management
API, prints what happened and stops the broker with SIGTERM.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pika

MESSAGES = 1000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"qpidd exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"qpidd did not listen on port {port} in time")


def main() -> int:
    amqp_port, mgmt_port = free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="qpidd-demo-"))
    log_file = workdir / "qpidd.log"
    qpidd = Path(sys.executable).with_name("qpidd")
    cmd = [
        str(qpidd),
        "--interface=127.0.0.1",
        f"--port={amqp_port}",
        "--mgmt-interface=127.0.0.1",
        f"--mgmt-port={mgmt_port}",
        "--node-name=demo",
        f"--log-file={log_file}",
        "--log-format=json",
    ]
    print(f"$ {' '.join(cmd)}")
    proc = subprocess.Popen(cmd)
    try:
        wait_for_port(amqp_port, proc, time.monotonic() + 15)
        print(f"broker up: amqp://guest:guest@127.0.0.1:{amqp_port}/ (pid {proc.pid})")

        params = pika.ConnectionParameters("127.0.0.1", amqp_port)
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        channel.queue_declare("demo", arguments={"x-message-ttl": 60000})
        channel.confirm_delivery()
        started = time.perf_counter()
        for i in range(MESSAGES):
            channel.basic_publish(
                "",
                "demo",
                f"message {i}".encode(),
                pika.BasicProperties(message_id=str(i)),
                mandatory=True,
            )
        published = time.perf_counter() - started
        print(f"published and confirmed {MESSAGES} messages in {published:.2f} s")

        received: list[int] = []
        channel.basic_qos(prefetch_count=100)
        for method, props, _body in channel.consume("demo", inactivity_timeout=2):
            if method is None:
                break
            received.append(int(props.message_id))
            channel.basic_ack(method.delivery_tag)
            if len(received) == MESSAGES:
                break
        channel.cancel()
        print(
            f"received {len(received)} messages, in order: {received == list(range(MESSAGES))},"
            f" lost: {MESSAGES - len(set(received))},"
            f" duplicated: {len(received) - len(set(received))}"
        )

        with urllib.request.urlopen(f"http://127.0.0.1:{mgmt_port}/api/status", timeout=5) as r:
            status = json.load(r)
        print(f"management /api/status: {json.dumps(status)}")
        connection.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=15)
    events = [json.loads(line)["event"] for line in log_file.read_text().splitlines() if line]
    print(f"broker stopped with exit code {code}; log events: {', '.join(events)}")
    print(f"broker log: {log_file}")
    ok = code == 0 and len(received) == MESSAGES
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
