"""The console's HTTP side against a real stand-alone qpidd with a users file: login,
sessions, the cookie's rules, the live stream, the actions and their bad input.

One broker for the module (its queues are named by each test)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from broker.management.console.sessions import COOKIE
from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.console.support import Browserless, write_users
from tests.drill.log_schema import check_log_file

pytestmark = pytest.mark.xdist_group("console_http")


@pytest.fixture(scope="module")
def qpidd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("console-http")
    users = write_users(root / "users")
    process = BrokerProcess(root / "qpidd", args=[f"--sasl-users={users}"]).start()
    try:
        yield process
    finally:
        process.stop()


def logged_in(qpidd: BrokerProcess, user: str) -> Browserless:
    client = Browserless(qpidd.mgmt_port)
    answer = client.login(user)
    assert answer.status == 303, answer.text
    assert answer.headers["Location"] == "/console/"
    return client


def declare(qpidd: BrokerProcess, queue: str, messages: int) -> None:
    params = pika.URLParameters(qpidd.url)
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        for i in range(messages):
            channel.basic_publish("", queue, f"m{i}".encode())


def test_anonymous_visitors_get_the_login_form_only(qpidd: BrokerProcess) -> None:
    client = Browserless(qpidd.mgmt_port)
    page = client.request("GET", "/console/")
    assert page.status == 303 and page.headers["Location"] == "/console/login"
    assert client.request("GET", "/console").status == 302
    form = client.request("GET", "/console/login")
    assert form.status == 200 and 'name="password"' in form.text
    assert "default-src 'self'" in form.headers["Content-Security-Policy"]
    assert client.request("GET", "/console/static/login.css").status == 200
    for path in ("/console/static/console.js", "/console/static/tables.js"):
        assert client.request("GET", path).status == 401
    live = client.request("GET", "/api/console/live")
    assert live.status == 401 and "WWW-Authenticate" in live.headers
    assert client.request("GET", "/console/static/../../etc/passwd").status == 404
    # a page whose session ended under it (the broker restarted) says so, in a fixed text
    ended = client.request("GET", "/console/login?ended=session")
    assert "Your session ended: this broker no longer knows it" in ended.text
    odd = client.request("GET", "/console/login?ended=%3Cscript%3E")
    assert "<script>" not in odd.text and "session ended" not in odd.text


def test_a_wrong_password_or_a_user_without_a_role_is_refused(qpidd: BrokerProcess) -> None:
    client = Browserless(qpidd.mgmt_port)
    for user, password in (("admin", "nope"), ("nobody", "x"), ("app", "app-secret")):
        answer = client.login(user, password)
        assert answer.status == 401, (user, answer.status)
        assert "wrong user or password, or no management role" in answer.text
    assert not list(client.jar)
    assert client.request("POST", "/console/login", form={"user": "", "password": ""}).status == 400
    long = client.request("POST", "/console/login", form={"user": "x" * 5000, "password": "y"})
    assert long.status == 400
    events = [e["event"] for e in qpidd.events()]
    assert "console_login_failed" in events


def test_login_sets_a_strict_cookie_and_the_api_accepts_it(qpidd: BrokerProcess) -> None:
    client = Browserless(qpidd.mgmt_port)
    answer = client.login("watcher")
    cookie = answer.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}_{qpidd.mgmt_port}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert client.request("GET", "/console/").status == 200
    assert client.request("GET", "/console/static/console.js").status == 200
    assert client.request("GET", "/api/queues").status == 200
    # the cookie carries the user's roles: a monitoring user changes nothing
    refused = client.change("PUT", "/api/queues/by-watcher")
    assert refused.status == 403 and "administrator" in refused.json()["reason"]
    # logging out ends the session on the broker, not only in the browser
    token = next(c.value for c in client.jar)
    assert client.request("POST", "/console/logout").status == 303
    stale = Browserless(qpidd.mgmt_port)
    stale.opener.addheaders = [("Cookie", f"{COOKIE}_{qpidd.mgmt_port}={token}")]
    after = stale.request("GET", "/api/queues", headers={"X-Qpidd-Console": "1"})
    assert after.status == 401 and "WWW-Authenticate" not in after.headers


def test_a_change_with_the_cookie_needs_the_console_header(qpidd: BrokerProcess) -> None:
    client = logged_in(qpidd, "admin")
    bare = client.request("PUT", "/api/queues/csrf-q", {})
    assert bare.status == 403 and "X-Qpidd-Console" in bare.json()["reason"]
    assert client.change("PUT", "/api/queues/csrf-q", {}).status == 201


def test_the_live_stream_sends_a_snapshot_the_page_asked_then_deltas(qpidd: BrokerProcess) -> None:
    """A viewer gets a snapshot (state, lists, who it is) and its page of queues (filtered,
    sorted and paged by the server, with histories), then each second a delta; a bad
    query is a 400 naming the value."""
    declare(qpidd, "live-q", 3)
    declare(qpidd, "live-r", 1)
    client = logged_in(qpidd, "watcher")
    cookie = next(c for c in client.jar)
    headers = {"Cookie": f"{cookie.name}={cookie.value}"}
    base = f"http://127.0.0.1:{qpidd.mgmt_port}/api/console/live"
    query = "?name=live-&sort=messages&sort_reverse=true&page=1&page_size=1"
    events: list[tuple[str, dict[str, Any]]] = []
    with urllib.request.urlopen(
        urllib.request.Request(base + query, headers=headers), timeout=10
    ) as stream:
        assert stream.headers["Content-Type"] == "text/event-stream"
        kind = ""
        while sum(1 for k, _ in events if k == "delta") < 2:
            line = stream.readline()
            if line.startswith(b"event: "):
                kind = line[7:].strip().decode()
            elif line.startswith(b"data: "):
                events.append((kind, json.loads(line[6:])))
    assert [k for k, _ in events[:2]] == ["snapshot", "page"]
    snapshot, page = events[0][1], events[1][1]
    assert snapshot["me"] == {"user": "watcher", "roles": ["monitoring"], "auth": True}
    assert (
        snapshot["state"]["status"]["ha_state"] == "standalone" and snapshot["state"]["ha"] is None
    )
    assert snapshot["state"]["timeline"] == []
    assert {"exchanges", "bindings", "connections"} == set(snapshot["lists"])
    assert page["whole"] and page["keys"] == ["live-q"]  # the fuller of the two
    assert (page["filtered_count"], page["page_count"], page["item_count"]) == (2, 2, 1)
    assert page["rows"]["live-q"]["messages"] == 3 and "live-q" in page["history"]
    deltas = [d for k, d in events if k == "delta"]
    assert deltas[0]["since"] == page["version"] and deltas[1]["since"] == deltas[0]["version"]
    assert set(deltas[0]["lists"]) == {"exchanges", "bindings", "connections"}
    bad = client.request("GET", "/api/console/live?name=(a%2B)%2B&use_regex=true")
    assert bad.status == 400 and "repeats a repetition" in bad.json()["reason"]
    changes = client.request("GET", "/api/changes").json()
    assert changes["snapshot"] and changes["lists"]["queues"]["live-q"]["messages"] == 3
    later = client.request("GET", f"/api/changes?since={changes['version']}").json()
    assert not later["snapshot"] and later["since"] == changes["version"]
    assert client.request("GET", "/api/changes?since=x").status == 400


def test_a_viewer_that_pages_a_list_gets_its_page_not_the_whole_list(
    qpidd: BrokerProcess,
) -> None:
    """``exchanges.page=...``: the exchanges come as that viewer's page (filtered and
    paged by the server), not in its snapshot and deltas; the other lists as before. The
    channels and consumers come as pages when asked, never whole."""
    client = logged_in(qpidd, "watcher")
    cookie = next(c for c in client.jar)
    headers = {"Cookie": f"{cookie.name}={cookie.value}"}
    query = (
        "?page=1&page_size=1&exchanges.page=1&exchanges.page_size=2&exchanges.name=amq."
        "&channels.page=1&consumers.name=paged-tag"
    )
    url = f"http://127.0.0.1:{qpidd.mgmt_port}/api/console/live{query}"
    events: list[tuple[str, dict[str, Any]]] = []
    declare(qpidd, "paged-q", 0)
    params = pika.URLParameters(qpidd.url.replace("guest:guest", "app:app-secret"))
    with (
        pika.BlockingConnection(params) as connection,
        urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as got,
    ):
        connection.channel().basic_consume("paged-q", lambda *a: None, consumer_tag="paged-tag")
        kind = ""

        def consumer_paged() -> bool:
            return any(k == "page" and d["list"] == "consumers" and d["rows"] for k, d in events)

        # a delta, and the consumer (made as the stream began) on a page: now or a tick later
        while not any(k == "delta" for k, _ in events) or not consumer_paged():
            line = got.readline()
            if line.startswith(b"event: "):
                kind = line[7:].strip().decode()
            elif line.startswith(b"data: "):
                events.append((kind, json.loads(line[6:])))
    snapshot = next(data for k, data in events if k == "snapshot")
    assert set(snapshot["lists"]) == {"bindings", "connections"}
    pages = {data.get("list"): data for k, data in events if k == "page"}
    exchanges = pages["exchanges"]
    assert exchanges["whole"] and len(exchanges["keys"]) == 2
    assert all(key.startswith("amq.") for key in exchanges["keys"])
    assert (
        exchanges["filtered_count"] > 2 and exchanges["total_count"] > exchanges["filtered_count"]
    )
    delta = next(data for k, data in events if k == "delta")
    assert set(delta["lists"]) == {"bindings", "connections"}
    consumers = [data for k, data in events if k == "page" and data.get("list") == "consumers"]
    channels = [data for k, data in events if k == "page" and data.get("list") == "channels"]
    assert consumers[0]["whole"] and channels[0]["whole"]
    rows = {key: row for page in consumers for key, row in page["rows"].items()}
    assert [row["queue"]["name"] for row in rows.values()] == ["paged-q"]
    assert next(iter(rows)).endswith(":paged-tag")
    bad = client.request("GET", "/api/console/live?exchanges.sort=nope")
    assert bad.status == 400 and "nope" in bad.json()["reason"]


def test_an_administrator_purges_gets_and_publishes(qpidd: BrokerProcess) -> None:
    declare(qpidd, "act-q", 4)
    client = logged_in(qpidd, "admin")
    got = client.change("POST", "/api/queues/act-q/get", {"count": 2})
    assert got.status == 200
    assert [m["payload"] for m in got.json()] == ["m0", "m1"]
    again = client.change("POST", "/api/queues/act-q/get", {"count": 1, "requeue": False})
    assert again.json()[0] == {
        "payload": "m0",
        "payload_bytes": 2,
        "payload_encoding": "string",
        "routing_key": "act-q",
        "exchange": "",
        "redelivered": True,
        "message_count": 3,  # left after it, as get-ok says
        "properties": {},
    }
    sent = client.change("POST", "/api/exchanges/amq.default/publish", {"routing_key": "act-q"})
    assert sent.json() == {"routed": True, "queues": 1, "rejected": 0}
    purged = client.change("DELETE", "/api/queues/act-q/contents")
    assert purged.json() == {"name": "act-q", "messages_purged": 4}
    users = client.request("GET", "/api/users").json()
    assert {"name": "watcher", "roles": ["monitoring"], "source": "own", "tags": []} in users
    assert all("hash" not in json.dumps(u) for u in users)
    events = [e["event"] for e in qpidd.events()]
    assert {"queue_purged", "test_messages_got", "test_message_published"} <= set(events)


def test_a_monitoring_user_acts_on_nothing(qpidd: BrokerProcess) -> None:
    declare(qpidd, "watched-q", 1)
    client = logged_in(qpidd, "watcher")
    for method, path in (
        ("DELETE", "/api/queues/watched-q/contents"),
        ("POST", "/api/queues/watched-q/get"),
        ("POST", "/api/exchanges/amq.default/publish"),
        ("DELETE", "/api/queues/watched-q"),
    ):
        answer = client.change(method, path, {})
        assert answer.status == 403, (method, path, answer.text)
    assert client.request("GET", "/api/users").status == 403
    assert client.request("GET", "/api/definitions").status == 403  # it holds hashes
    assert client.change("PUT", "/api/users/x", {"password": "x"}).status == 403
    assert client.request("GET", "/api/queues/watched-q").json()["messages"] == 1


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("POST", "/api/queues/act-q/get", {"count": 0}, 400, "count"),
        ("POST", "/api/queues/act-q/get", {"count": True}, 400, "count"),
        ("POST", "/api/queues/act-q/get", {"requeue": "no"}, 400, "requeue"),
        ("POST", "/api/queues/act-q/get", {"cuont": 1}, 400, "cuont"),
        ("POST", "/api/queues/nope/get", {}, 404, "nope"),
        ("DELETE", "/api/queues/nope/contents", None, 404, "nope"),
        ("POST", "/api/exchanges/nope/publish", {}, 404, "nope"),
        ("POST", "/api/exchanges/amq.default/publish", {"payload": 5}, 400, "payload"),
        ("POST", "/api/exchanges/amq.default/publish", {"payload": "x" * 70000}, 400, "payload"),
        ("POST", "/api/exchanges/amq.default/publish", {"routing_key": "k" * 300}, 400, "key"),
    ],
)
def test_bad_input_is_a_clear_error(
    qpidd: BrokerProcess, method: str, path: str, body: object, status: int, reason: str
) -> None:
    client = logged_in(qpidd, "admin")
    answer = client.change(method, path, body)
    assert answer.status == status, answer.text
    assert reason in answer.json()["reason"]


def test_the_page_and_its_files_come_from_the_package(qpidd: BrokerProcess) -> None:
    client = logged_in(qpidd, "watcher")
    page = client.request("GET", "/console/").text
    static = Path(__file__).resolve().parents[2] / "broker/management/console/static"
    assert page == (static / "index.html").read_text()
    for name in ("console.js", "cluster.js", "tables.js", "charts.js", "console.css"):
        body = client.request("GET", f"/console/static/{name}").text
        assert body == (static / name).read_text()
        assert "http://" not in body.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in body


def test_the_console_events_follow_the_log_schema(qpidd: BrokerProcess) -> None:
    declare(qpidd, "schema-q", 1)
    client = logged_in(qpidd, "admin")
    client.login("admin", "wrong")
    client.change("DELETE", "/api/queues/schema-q/contents")
    client.request("POST", "/console/logout")
    checked, found = check_log_file(qpidd.log_file)
    assert checked and found == []
    events = {e["event"] for e in qpidd.events()}
    assert {"console_login", "console_login_failed", "console_logout", "queue_purged"} <= events


def test_the_channels_of_a_connection_as_rabbitmq_shows_them(qpidd: BrokerProcess) -> None:
    """GET /api/connections/{id}/channels and /api/channels: prefetch, consumers, unacked,
    confirm mode, a transaction, for a monitoring user; 400 and 404 for bad ids."""
    declare(qpidd, "channels-q", 3)
    params = pika.URLParameters(qpidd.url.replace("guest:guest", "app:app-secret"))
    with pika.BlockingConnection(params) as connection:
        consuming = connection.channel()
        consuming.basic_qos(prefetch_count=2)
        consuming.basic_consume("channels-q", lambda *a: None, consumer_tag="c-tag")
        confirming = connection.channel()
        confirming.confirm_delivery()
        transacting = connection.channel()
        transacting.tx_select()
        transacting.basic_publish("", "channels-q", b"held")
        client = logged_in(qpidd, "watcher")
        mine = [c for c in client.request("GET", "/api/connections").json() if c["user"] == "app"]
        assert len(mine) == 1 and mine[0]["channels"] == 3
        path = f"/api/connections/{mine[0]['id']}/channels"

        def delivered() -> list[dict[str, Any]] | None:
            channels = client.request("GET", path).json()
            return channels if channels[0]["messages_unacknowledged"] == 2 else None

        channels = poll_until(delivered, 10, "two deliveries unacknowledged")
        assert [c["number"] for c in channels] == [
            consuming.channel_number,
            confirming.channel_number,
            transacting.channel_number,
        ]
        first, second, third = channels
        assert first["prefetch_count"] == 2 and first["consumer_count"] == 1
        assert first["consumers"] == [
            {
                "consumer_tag": "c-tag",
                "queue": "channels-q",
                "ack_required": True,
                "prefetch_count": 2,
                "unacked": 2,
                "exclusive": False,
            }
        ]
        assert (first["confirm"], first["transactional"]) == (False, False)
        assert second["confirm"] and second["messages_unconfirmed"] == 0
        assert third["transactional"] and third["messages_uncommitted"] == 1
        assert {c["user"] for c in channels} == {"app"}
        assert all(c["name"] == f"{c['connection_name']} ({c['number']})" for c in channels)
        everyone = client.request("GET", "/api/channels").json()
        assert [c for c in everyone if c["connection"] == mine[0]["id"]] == channels
    assert client.request("GET", path).status == 404
    assert client.request("GET", "/api/connections/x/channels").status == 400
