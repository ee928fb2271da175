"""qpidd's definitions export imported into a real RabbitMQ 3.10.8 (issue 30, "and the
reverse"); run by hand, not in ``make test`` (RabbitMQ with its management plugin takes
15-20 s to boot here, longer under load):

    .venv/bin/python bench/definitions_to_rabbitmq.py [--port 5692] [--mgmt-port 15692]

1. A throwaway RabbitMQ with its management plugin (``RMQ_MGMT_PORT=... bench/rabbitmq.sh
   start PORT``) and a stand-alone qpidd (tests/broker_process.py), both on loopback.
2. Into qpidd: RabbitMQ's own export (tests/management/data/rabbitmq-3.10.8-definitions.json:
   a user ``shopkeeper`` with RabbitMQ's salted SHA-256 hash of ``test12``, vhost ``shop``, a
   topic and a fanout exchange, a classic and a quorum queue, three bindings), and what is
   made on qpidd itself: vhost ``ledger`` with a queue (``x-max-length``), a direct exchange,
   a binding and a ``max-queues`` limit, a user ``clerk`` made with a password (scrypt) and
   its permission.
3. qpidd's ``GET /api/definitions`` posted to RabbitMQ's ``POST /api/definitions``; RabbitMQ
   must answer 204 (it refuses a whole file for one unknown hashing algorithm: the same file
   with ``clerk`` put in ``users`` is shown refused first).
4. In RabbitMQ: the vhosts, queues (with their arguments), exchanges, bindings, the
   shopkeeper's permission and the ledger's limit are there; ``shopkeeper`` logs in with
   ``test12`` over AMQP (pika) and its publish to ``shop.events`` reaches ``orders`` and
   (through ``shop.all``) ``audit``; ``clerk`` is not in RabbitMQ and qpidd's answer named
   it (``X-Qpidd-Not-For-RabbitMQ``, the ``qpidd_only`` section).

Prints one line per check and exits 0 when all hold, 1 naming the first that does not, 2
when RabbitMQ cannot be started here. Both brokers are stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pika  # noqa: E402

from common.polling import poll_until  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.ha.cluster import http  # noqa: E402

RABBITMQ_SH = ROOT / "bench" / "rabbitmq.sh"
RABBITMQ_FILE = ROOT / "tests" / "management" / "data" / "rabbitmq-3.10.8-definitions.json"


class CheckFailed(Exception):
    pass


def check(what: str, ok: bool, detail: object = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""))
    if not ok:
        raise CheckFailed(what)


def rabbit(
    port: int, method: str, path: str, body: bytes | None = None, user: str = "guest:guest"
) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    request.add_header("Authorization", "Basic " + base64.b64encode(user.encode()).decode())
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def qpidd_export(broker: BrokerProcess) -> tuple[dict[str, Any], str]:
    """What qpidd makes and exports: RabbitMQ's file imported, then objects of its own."""
    imported = http(
        "POST", broker.mgmt_port, "/api/definitions", json.loads(RABBITMQ_FILE.read_text())
    )
    check("qpidd imports RabbitMQ 3.10.8's export", "imported" in imported, imported)
    http("PUT", broker.mgmt_port, "/api/vhosts/ledger", {})
    made = http(
        "PUT", broker.mgmt_port, "/api/users/clerk", {"password": "clerk-pw", "tags": "monitoring"}
    )
    check("qpidd makes user clerk (scrypt)", made.get("name") == "clerk", made)
    http(
        "PUT",
        broker.mgmt_port,
        "/api/permissions/ledger/clerk",
        {"configure": "", "write": ".*", "read": ".*"},
    )
    http("PUT", broker.mgmt_port, "/api/vhost-limits/ledger/max-queues", {"value": 50})
    params = pika.ConnectionParameters(
        "127.0.0.1", broker.port, "ledger", pika.PlainCredentials("guest", "guest")
    )
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.exchange_declare("ledger.in", "direct", durable=True)
        channel.queue_declare("entries", durable=True, arguments={"x-max-length": 500})
        channel.queue_bind("entries", "ledger.in", "entry")
    finally:
        connection.close()
    request = urllib.request.Request(f"http://127.0.0.1:{broker.mgmt_port}/api/definitions")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response), response.headers.get("X-Qpidd-Not-For-RabbitMQ", "")


def rows(data: dict[str, Any], section: str, keys: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {tuple(json.dumps(row.get(k), sort_keys=True) for k in keys) for row in data[section]}


def verify(exported: dict[str, Any], header: str, mgmt: int, amqp: int) -> None:
    check("qpidd's answer names clerk as not for RabbitMQ", header == "clerk", header)
    check(
        "clerk is in the qpidd_only section, not in users",
        [u["name"] for u in exported["qpidd_only"]["users"]] == ["clerk"]
        and "clerk" not in [u["name"] for u in exported["users"]],
    )
    own = exported["qpidd_only"]
    whole = {k: v for k, v in exported.items() if k != "qpidd_only"}
    whole["users"] = exported["users"] + own["users"]
    status, answer = rabbit(mgmt, "POST", "/api/definitions", json.dumps(whole).encode())
    check(
        "RabbitMQ refuses a file with a scrypt user in users (why qpidd_only is)",
        status == 400 and b"not_base64" in answer,
        (status, answer),
    )
    body = json.dumps(exported).encode()
    status, answer = rabbit(mgmt, "POST", "/api/definitions", body)
    check(
        "RabbitMQ 3.10.8 imports qpidd's export (POST /api/definitions)",
        status == 204,
        (status, answer),
    )
    status, raw = rabbit(mgmt, "GET", "/api/definitions")
    there = json.loads(raw)
    names = {v["name"] for v in there["vhosts"]}
    check("vhosts shop and ledger are in RabbitMQ", {"shop", "ledger"} <= names, names)
    for section, keys in (
        ("queues", ("vhost", "name", "durable", "auto_delete", "arguments")),
        ("exchanges", ("vhost", "name", "type", "durable", "auto_delete", "internal", "arguments")),
        (
            "bindings",
            ("vhost", "source", "destination", "destination_type", "routing_key", "arguments"),
        ),
    ):
        ours, theirs = rows(exported, section, keys), rows(there, section, keys)
        check(
            f"all {len(ours)} {section} are in RabbitMQ, as exported", ours <= theirs, ours - theirs
        )
    wanted = {("shopkeeper", "shop", ".*", ".*", ".*")}
    perms = {
        (p["user"], p["vhost"], p["configure"], p["write"], p["read"]) for p in there["permissions"]
    }
    check("shopkeeper's permission in shop is in RabbitMQ", wanted <= perms, perms)
    users = {u["name"]: u for u in there["users"]}
    check(
        "shopkeeper is in RabbitMQ with its hash, clerk is not",
        "clerk" not in users
        and users.get("shopkeeper", {}).get("password_hash")
        == next(u["password_hash"] for u in exported["users"] if u["name"] == "shopkeeper"),
        sorted(users),
    )
    status, raw = rabbit(mgmt, "GET", "/api/vhost-limits/ledger")
    limits: list[dict[str, Any]] = json.loads(raw) if status == 200 else []
    values = [row["value"] for row in limits]
    check("ledger's max-queues limit is in RabbitMQ", values == [{"max-queues": 50}], raw)
    status, _ = rabbit(mgmt, "GET", "/api/whoami", user="shopkeeper:test12")
    check("shopkeeper logs in to RabbitMQ's management API with test12", status == 200, status)
    params = pika.ConnectionParameters(
        "127.0.0.1", amqp, "shop", pika.PlainCredentials("shopkeeper", "test12")
    )
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("shop.events", "order.new", b"o1")
        orders = channel.queue_declare("orders", durable=True, passive=True).method.message_count
        poll_until(
            lambda: (
                channel.queue_declare("audit", durable=True, passive=True).method.message_count == 1
            ),
            10,
            "the message in audit",
        )
    finally:
        connection.close()
    check(
        "shopkeeper logs in over AMQP; shop.events routes to orders and audit", orders == 1, orders
    )
    try:
        pika.BlockingConnection(
            pika.ConnectionParameters(
                "127.0.0.1", amqp, "shop", pika.PlainCredentials("shopkeeper", "wrong")
            )
        ).close()
        refused = False
    except pika.exceptions.ProbableAuthenticationError:
        refused = True
    check("a wrong password is refused", refused)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=5692, help="RabbitMQ's AMQP port")
    parser.add_argument("--mgmt-port", type=int, default=15692, help="its management port")
    args = parser.parse_args()
    env = {**os.environ, "RMQ_MGMT_PORT": str(args.mgmt_port)}
    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="defs-to-rmq-"))
    started = subprocess.run(  # in workdir: an Erlang crash dump goes there, not in the tree
        [str(RABBITMQ_SH), "start", str(args.port)],
        env=env,
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    if started.returncode != 0:
        print(f"RabbitMQ did not start: {started.stderr.strip()}", file=sys.stderr)
        return 2
    booted = time.monotonic() - began
    print(f"RabbitMQ 3.10.8 with its management plugin booted in {booted:.1f} s")
    broker = BrokerProcess(workdir, args=[f"--data-dir={workdir / 'data'}"]).start(timeout=60)
    try:
        poll_until(
            lambda: rabbit(args.mgmt_port, "GET", "/api/overview")[0] == 200,
            60,
            "RabbitMQ's management API",
        )
        exported, header = qpidd_export(broker)
        verify(exported, header, args.mgmt_port, args.port)
    except CheckFailed:
        return 1
    finally:
        broker.stop()
        subprocess.run([str(RABBITMQ_SH), "stop", str(args.port)], capture_output=True)
    print(f"all checks hold ({time.monotonic() - began:.1f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
