"""Password hashes run off the event loop (issue 13): a burst of logins, each paying the
scrypt hash (a wrong password: about 50 ms of CPU each), does not stall a consumer on the
same broker. Measured with a real broker process and real sockets: the consumer's round
trips (publish, then receive the delivery) while 12 clients log in with wrong passwords as
fast as they can. On the loop, 12 logins in flight would stop every round trip for about
12 hashes at a time."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from pathlib import Path

import pika
from pamqp import commands, frame

from broker.amqp import framing
from broker.security.passwords import hash_password, parse_hash
from broker.security.roles import Role
from broker.security.users import User, UserDatabase, save
from tests.broker_process import BrokerProcess

LOGINS_IN_FLIGHT = 12
#: Round trips go on until this many logins were refused (about 1.5 s of hashing on 2
#: threads): the consumer is measured while the hashes run.
LOGINS = 30


def _refused_login(port: int, source: str, user: str) -> bool:
    """One AMQP login with a wrong password, raw: True when the broker refused it."""
    with socket.create_connection(
        ("127.0.0.1", port), timeout=10, source_address=(source, 0)
    ) as sock:
        sock.sendall(framing.PROTOCOL_HEADER)
        sock.recv(4096)  # connection.start
        start_ok = commands.Connection.StartOk(
            client_properties={"product": "hammer"}, mechanism="PLAIN", response=f"\0{user}\0wrong"
        )
        sock.sendall(frame.marshal(start_ok, 0))
        answer = b""
        while chunk := sock.recv(4096):  # connection.close 403, then the broker hangs up
            answer += chunk
            if b"ACCESS_REFUSED" in answer:
                return True
        return False


def test_logins_do_not_stall_a_consumer(tmp_path: Path) -> None:
    users = UserDatabase(
        [
            User("guest", parse_hash(hash_password("guest", log_n=10)), frozenset(Role)),
            User("app", parse_hash(hash_password("right")), frozenset()),  # ln=14: the real cost
        ]
    )
    save(users, tmp_path / "users")
    broker = BrokerProcess(tmp_path / "b", args=[f"--sasl-users={tmp_path / 'users'}"]).start()
    stop = threading.Event()
    refused: list[bool] = []

    def hammer(i: int) -> None:
        # each from its own source as its own (unknown: same hash) user, so that the
        # back-off after failed logins (test_login_backoff_broker.py) does not slow them
        while not stop.is_set():
            refused.append(_refused_login(broker.port, f"127.0.0.{10 + i}", f"app{i}"))

    threads = [
        threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(LOGINS_IN_FLIGHT)
    ]
    try:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("rtt")
        for thread in threads:
            thread.start()
        began = time.monotonic()
        trips: list[float] = []
        deadline = began + 60
        while len(refused) < LOGINS and time.monotonic() < deadline:
            i = len(trips)
            sent = time.monotonic()
            channel.basic_publish("", "rtt", str(i).encode())
            for _method, _props, _body in channel.consume("rtt", auto_ack=True):
                break
            trips.append(time.monotonic() - sent)
        elapsed = time.monotonic() - began
        channel.cancel()
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        connection.close()
    finally:
        stop.set()
        broker.stop()
    hashed = len(refused)
    trips.sort()
    p99 = trips[int(len(trips) * 0.99) - 1]
    print(
        f"\n{hashed} refused logins in {elapsed:.2f} s beside {len(trips)} round trips:"
        f" median {statistics.median(trips) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms,"
        f" max {trips[-1] * 1000:.1f} ms"
    )
    assert all(refused) and hashed >= LOGINS  # the hashes ran meanwhile
    # Measured on 2 shared cores: hashing on the loop, median 136 ms and p99 290 ms; in the
    # threads, median 0.2 ms and p99 5 ms.
    assert statistics.median(trips) < 0.02, "logins stall the loop"
    assert p99 < 0.5, f"p99 round trip {p99:.3f} s: logins stall the loop"  # load slack
    events = [e["event"] for e in broker.events()]
    assert events.count("authentication_failed") >= hashed
    assert "internal_error" not in events
