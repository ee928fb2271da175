"""Virtual hosts end to end: real qpidd processes, pika clients, the management API over HTTP.

Two vhosts hold queues of the same name apart; connection.open of a vhost that does not
exist is closed 530; deleting a vhost closes its connections with 320 and takes its objects;
a vhost with a durable queue and persistent messages comes back after a restart on the same
``--data-dir``.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.e2e.support import pika_params, unique

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def api(broker: BrokerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(HTTP status, JSON answer) of a management request as guest."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.mgmt_port}{path}", data=data, method=method
    )
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def vhost_path(name: str) -> str:
    return "/api/vhosts/" + urllib.parse.quote(name, safe="")


def open_in(broker: BrokerProcess, vhost: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika_params(broker, virtual_host=vhost))


def test_two_vhosts_keep_same_named_queues_apart(shared_broker: BrokerProcess) -> None:
    vhost = unique("vh")
    assert api(shared_broker, "PUT", vhost_path(vhost))[0] == 201
    assert api(shared_broker, "PUT", vhost_path(vhost))[0] == 200  # idempotent
    queue = unique("q")
    default, other = open_in(shared_broker, "/"), open_in(shared_broker, vhost)
    try:
        for connection, body in ((default, b"in /"), (other, b"in vhost")):
            channel = connection.channel()
            channel.queue_declare(queue)
            channel.basic_publish("", queue, body)
            channel.basic_publish("amq.direct", "nowhere", b"unbound")
        for connection, body in ((default, b"in /"), (other, b"in vhost")):
            channel = connection.channel()

            def one_message(c: Any = channel) -> bool:
                return bool(c.queue_declare(queue, passive=True).method.message_count == 1)

            poll_until(one_message, 10)
            _method, _props, got = channel.basic_get(queue, auto_ack=True)
            assert got == body
            assert channel.basic_get(queue)[0] is None
        names = [(q["vhost"], q["name"]) for q in api(shared_broker, "GET", "/api/queues")[1]]
        assert ("/", queue) in names and (vhost, queue) in names
        status, only = api(shared_broker, "GET", f"/api/queues?vhost={urllib.parse.quote(vhost)}")
        assert status == 200 and [q["name"] for q in only] == [queue]
        path = f"/api/queues/{urllib.parse.quote(vhost, safe='')}/{queue}"
        assert api(shared_broker, "GET", path)[1]["vhost"] == vhost
        exchanges = {
            e["name"] for e in api(shared_broker, "GET", "/api/exchanges")[1] if e["vhost"] == vhost
        }
        assert {
            "",
            "amq.direct",
            "amq.fanout",
            "amq.topic",
            "amq.headers",
            "amq.match",
        } <= exchanges
        listed = {v["name"]: v for v in api(shared_broker, "GET", "/api/vhosts")[1]}
        assert listed[vhost]["queues"] == 1 and listed[vhost]["connections"] == 1
        assert "/" in listed
    finally:
        default.close()
        other.close()
        api(shared_broker, "DELETE", vhost_path(vhost))


def test_an_unknown_vhost_is_refused_530(shared_broker: BrokerProcess) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        open_in(shared_broker, "no-such-vhost")
    assert "(530) 'NOT_ALLOWED - vhost no-such-vhost not found'" in str(info.value)


def test_deleting_a_vhost_closes_its_connections_and_takes_its_objects(
    shared_broker: BrokerProcess,
) -> None:
    vhost = unique("gone")
    api(shared_broker, "PUT", vhost_path(vhost))
    connection = open_in(shared_broker, vhost)
    bystander = open_in(shared_broker, "/")
    try:
        connection.channel().queue_declare("work")
        status, answer = api(shared_broker, "DELETE", vhost_path(vhost))
        assert status == 200 and answer == {"name": vhost, "connections_closed": 1}
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            connection.process_data_events(time_limit=5)
            connection.channel()
        assert info.value.reply_code == 320
        assert bystander.is_open and bystander.channel().is_open
        assert api(shared_broker, "GET", vhost_path(vhost))[0] == 404
        assert all(q["vhost"] != vhost for q in api(shared_broker, "GET", "/api/queues")[1])
        assert api(shared_broker, "DELETE", vhost_path(vhost))[0] == 404
        assert api(shared_broker, "DELETE", vhost_path("/"))[0] == 403
        assert api(shared_broker, "PUT", vhost_path("x" * 300))[0] == 400
        events = [e for e in shared_broker.events() if e.get("vhost") == vhost]
        assert [e["event"] for e in events if e["event"].startswith("vhost_")] == [
            "vhost_created",
            "vhost_deleted",
        ]
    finally:
        if connection.is_open:
            connection.close()
        bystander.close()


def test_a_vhost_its_durable_queue_and_messages_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(tmp_path / "run1", [f"--data-dir={data}"]).start()
    try:
        assert api(first, "PUT", vhost_path("orders"))[0] == 201
        assert api(first, "PUT", vhost_path("empty"))[0] == 201
        connection = open_in(first, "orders")
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("jobs", durable=True)
        channel.exchange_declare("fan", "fanout", durable=True)
        channel.queue_bind("jobs", "fan")
        for n in range(3):
            channel.basic_publish("fan", "", f"job {n}".encode(), PERSISTENT)
        connection.close()
        first.stop()
        second = BrokerProcess(tmp_path / "run2", [f"--data-dir={data}"]).start()
        try:
            names = [v["name"] for v in api(second, "GET", "/api/vhosts")[1]]
            assert names == ["/", "empty", "orders"]
            assert all(q["name"] != "jobs" for q in api(second, "GET", "/api/queues?vhost=%2F")[1])
            connection = open_in(second, "orders")
            channel = connection.channel()
            assert channel.queue_declare("jobs", passive=True).method.message_count == 3
            channel.basic_publish("fan", "", b"job 3", PERSISTENT)  # the binding came back
            got: list[bytes] = []
            while len(got) < 4:
                method, _props, body = channel.basic_get("jobs", auto_ack=True)
                if method is not None:
                    got.append(body)
            assert got == [b"job 0", b"job 1", b"job 2", b"job 3"]
            connection.close()
            assert api(second, "DELETE", vhost_path("empty"))[0] == 200
        finally:
            second.stop()
        third = BrokerProcess(tmp_path / "run3", [f"--data-dir={data}"]).start()
        try:
            assert [v["name"] for v in api(third, "GET", "/api/vhosts")[1]] == ["/", "orders"]
        finally:
            third.stop()
    finally:
        first.stop()


def test_vhost_limits_refuse_connections_and_queues_as_rabbitmq_does(
    shared_broker: BrokerProcess,
) -> None:
    """max-connections: the next connection.open, AMQP 0-9-1 (pika) or 1.0 (Proton), is
    530 NOT_ALLOWED naming the limit; max-queues: the next new queue is 406; a vhost's limits
    go with it (issue 30)."""
    from proton import ConnectionException
    from proton.utils import BlockingConnection, ConnectionClosed

    vhost = unique("limited")
    path = "/api/vhost-limits/" + urllib.parse.quote(vhost, safe="")
    assert api(shared_broker, "PUT", vhost_path(vhost))[0] == 201
    assert api(shared_broker, "PUT", path + "/max-connections", {"value": 1})[0] == 201
    assert api(shared_broker, "PUT", path + "/max-queues", {"value": 1})[0] == 201
    status, listed = api(shared_broker, "GET", path)
    assert (status, listed) == (
        200,
        [{"vhost": vhost, "value": {"max-connections": 1, "max-queues": 1}}],
    )
    first = open_in(shared_broker, vhost)
    try:
        channel = first.channel()
        channel.queue_declare("one")
        channel.queue_declare("one")  # the same queue again: not a new one
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("two")
        assert refused.value.reply_code == 406
        assert refused.value.reply_text == (
            f"PRECONDITION_FAILED - cannot declare queue 'two': queue limit in vhost '{vhost}'"
            " (1) is reached"
        )
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
            open_in(shared_broker, vhost)
        assert (
            f"(530) \"NOT_ALLOWED - access to vhost '{vhost}' refused for user 'guest':"
            ' connection limit (1) is reached"'
        ) in str(info.value)
        with pytest.raises(
            (ConnectionException, ConnectionClosed), match=r"connection limit \(1\) is reached"
        ):
            BlockingConnection(
                f"amqp://guest:guest@127.0.0.1:{shared_broker.port}",
                allowed_mechs="PLAIN",
                timeout=10,
                virtual_host=f"vhost:{vhost}",
            ).close()
        assert open_in(shared_broker, "/").close() is None  # another vhost: no limit
    finally:
        first.close()
    assert api(shared_broker, "DELETE", path + "/max-connections")[0] == 200
    open_in(shared_broker, vhost).close()
    assert api(shared_broker, "DELETE", path + "/max-connections")[0] == 404
    api(shared_broker, "DELETE", vhost_path(vhost))
    assert all(row["vhost"] != vhost for row in api(shared_broker, "GET", "/api/vhost-limits")[1])
