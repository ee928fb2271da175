"""/api/users, /api/permissions and /api/definitions over HTTP (aiohttp's test server, a
real vhost and authenticator): each bad field a 400 naming it, the broker's own users kept,
a vhost's definitions in and out."""

from __future__ import annotations

from typing import Any

from broker.core.vhosts import VirtualHosts
from tests.management.support import FakeBroker, serve

TEST12 = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"


async def reason(response: Any) -> str:
    return str((await response.json())["reason"])


def test_users_and_permissions_with_their_bad_fields() -> None:
    broker = FakeBroker()
    authenticator = broker.context.authenticator

    async def scenario(client: Any) -> None:
        made = await client.put("/api/users/ops", json={"password": "pw", "tags": "monitoring"})
        assert made.status == 201
        assert await made.json() == {
            "name": "ops",
            "source": "cluster",
            "tags": ["monitoring"],
            "roles": ["monitoring"],
            "password": True,
        }
        body = {"password_hash": TEST12, "tags": ["administrator", "custom"]}
        assert (await client.put("/api/users/ops", json=body)).status == 200  # replaced
        assert authenticator.authenticate("PLAIN", b"\0ops\0test12") == "ops"
        fast = {"password": "pw2", "hashing_algorithm": "rabbit_password_hashing_sha256"}
        assert (await client.put("/api/users/fast", json=fast)).status == 201
        assert authenticator.authenticate("PLAIN", b"\0fast\0pw2") == "fast"
        for bad, words in (
            ({}, "password: required (or password_hash)"),
            ({"password": ""}, "password: must be a non-empty string"),
            ({"password": "a", "password_hash": TEST12}, "not both"),
            ({"password_hash": "!!"}, "password_hash: not base64"),
            ({"password_hash": TEST12, "hashing_algorithm": "md5"}, "hashing_algorithm: 'md5'"),
            ({"password": "a", "tags": 3}, "tags: must be a comma-separated string"),
            ({"password": "a", "role": "x"}, "unknown field 'role'"),
            ({"password": "a", "limits": {"max-connections": 1}}, "limits: user limits"),
        ):
            answer = await client.put("/api/users/bad", json=bad)
            assert answer.status == 400 and words in await reason(answer), (bad, words)
        own = await client.put("/api/users/guest", json={"password": "x"})
        assert own.status == 409 and "qpid-ha users" in await reason(own)
        listed = await (await client.get("/api/users")).json()
        assert [(u["name"], u["source"]) for u in listed] == [
            ("guest", "own"),
            ("fast", "cluster"),
            ("ops", "cluster"),
        ]
        assert "hash" not in str(listed)
        rules = {"configure": "", "write": ".*", "read": ".*"}
        assert (await client.put("/api/permissions/%2F/ops", json=rules)).status == 201
        assert authenticator.may_open("ops", "/") and not authenticator.may_open("fast", "/")
        for path, bad, status, words in (
            ("/api/permissions/%2F/ops", {"configure": "", "write": ""}, 400, "read: required"),
            ("/api/permissions/%2F/ops", {**rules, "read": "("}, 400, "read: not a regular"),
            ("/api/permissions/nowhere/ops", rules, 404, "no vhost 'nowhere'"),
            ("/api/permissions/%2F/nobody", rules, 404, "no user 'nobody'"),
            ("/api/permissions/%2F/guest", rules, 409, "this broker's own"),
        ):
            answer = await client.put(path, json=bad)
            assert answer.status == status and words in await reason(answer), (path, bad)
        assert (await (await client.get("/api/users/ops/permissions")).json()) == [
            {"user": "ops", "vhost": "/", **rules}
        ]
        assert (await client.delete("/api/users/ops")).status == 200
        assert (await client.delete("/api/users/ops")).status == 404
        assert await (await client.get("/api/permissions")).json() == []  # went with its user
        # a scrypt user (a password given here): not for RabbitMQ, named in the answer
        assert (await client.put("/api/users/ä b", json={"password": "pw"})).status == 201
        assert (await client.put("/api/permissions/%2F/ä b", json=rules)).status == 201
        exported = await client.get("/api/definitions")
        assert exported.headers["X-Qpidd-Not-For-RabbitMQ"] == "%C3%A4%20b"
        whole = await exported.json()
        assert [u["name"] for u in whole["users"]] == ["fast"]
        assert [u["name"] for u in whole["qpidd_only"]["users"]] == ["ä b"]
        assert whole["permissions"] == [] and len(whole["qpidd_only"]["permissions"]) == 1
        assert "X-Qpidd-Not-For-RabbitMQ" not in (await client.get("/api/definitions/%2F")).headers

    serve(broker, scenario)


def test_a_vhosts_definitions_in_and_out() -> None:
    broker = FakeBroker()
    vhosts = VirtualHosts(default=broker.context.vhost)
    broker.context.vhosts = vhosts
    setattr(broker, "vhosts", vhosts)  # noqa: B010 - what broker.server.Broker has

    async def scenario(client: Any) -> None:
        assert (await client.put("/api/vhosts/v2")).status == 201
        file = {
            "queues": [{"name": "q", "durable": True, "arguments": {"x-max-length": 5}}],
            "exchanges": [{"name": "e", "type": "direct"}],
            "bindings": [
                {"source": "e", "destination": "q", "destination_type": "queue",
                 "routing_key": "k", "arguments": {}},
            ],
        }  # fmt: skip
        answer = await client.post("/api/definitions/v2", json=file)
        assert answer.status == 200, await answer.text()
        assert (await answer.json())["imported"]["bindings"] == 1
        out = await (await client.get("/api/definitions/v2")).json()
        assert "users" not in out and "vhosts" not in out
        assert out["queues"] == [
            {"name": "q", "durable": True, "auto_delete": False, "arguments": {"x-max-length": 5}}
        ]
        assert [b["routing_key"] for b in out["bindings"]] == ["k"]
        whole = await (await client.get("/api/definitions?download=x.json")).json()
        assert [v["name"] for v in whole["vhosts"]] == ["/", "v2"]
        assert {q["vhost"] for q in whole["queues"]} == {"v2"}
        other = {"queues": [{"name": "q", "durable": True, "arguments": {"x-max-length": 6}}]}
        answer = await client.post("/api/definitions/v2", json=other)
        assert answer.status == 400 and (await reason(answer)).startswith(
            "queues[0] 'q': inequivalent arg 'x-max-length' for queue 'q' in vhost 'v2'"
        )
        for path, body, words in (
            ("/api/definitions", b"{nope", "not valid JSON"),
            ("/api/definitions", b'{"queues": [{"name": "q", "vhost": "v9"}]}', "queues[0].vhost"),
            ("/api/definitions/v2", b'{"vhosts": [{"name": "x"}]}', "vhosts: not taken"),
        ):
            answer = await client.post(path, data=body)
            assert answer.status == 400 and words in await reason(answer), path
        assert (await client.post("/api/definitions/v9", data=b"{}")).status == 404

    serve(broker, scenario)


def test_vhost_limits_put_get_delete_and_in_definitions() -> None:
    """RabbitMQ's /api/vhost-limits: each bad name or value a 400 naming it; the limits are
    enforced (a queue PUT over max-queues is refused) and exported and imported as RabbitMQ's
    ``vhost-limits`` parameters."""
    broker = FakeBroker()
    vhosts = VirtualHosts(default=broker.context.vhost)
    vhosts.hold_limits(broker.context.authenticator.cluster_users.limits)
    broker.context.vhosts = vhosts
    setattr(broker, "vhosts", vhosts)  # noqa: B010 - what broker.server.Broker has

    async def scenario(client: Any) -> None:
        assert (await client.put("/api/vhosts/v2")).status == 201
        put = await client.put("/api/vhost-limits/v2/max-queues", json={"value": 1})
        assert put.status == 201
        assert await put.json() == {"vhost": "v2", "name": "max-queues", "value": 1}
        again = await client.put("/api/vhost-limits/v2/max-queues", json={"value": 2})
        assert again.status == 200
        for path, body, status, words in (
            ("/api/vhost-limits/v2/max-channels", {"value": 1}, 400, "unknown vhost limit"),
            ("/api/vhost-limits/v2/max-queues", {"value": "1"}, 400, "must be an integer"),
            ("/api/vhost-limits/v2/max-queues", {}, 400, "field 'value' is required"),
            ("/api/vhost-limits/v2/max-queues", {"value": 1, "x": 2}, 400, "unknown field 'x'"),
            ("/api/vhost-limits/v9/max-queues", {"value": 1}, 404, "no vhost 'v9'"),
        ):
            answer = await client.put(path, json=body)
            assert answer.status == status and words in await reason(answer), (path, body)
        wanted = [{"vhost": "v2", "value": {"max-queues": 2}}]
        assert await (await client.get("/api/vhost-limits")).json() == wanted
        assert await (await client.get("/api/vhost-limits/v2")).json() == wanted
        assert await (await client.get("/api/vhost-limits/%2F")).json() == []
        for name in ("a", "b"):
            assert (await client.put(f"/api/queues/v2/{name}", json={})).status in (200, 201)
        over = await client.put("/api/queues/v2/c", json={})
        assert "queue limit in vhost 'v2' (2) is reached" in await reason(over)
        whole = await (await client.get("/api/definitions")).json()
        assert whole["parameters"] == [
            {"value": {"max-queues": 2}, "vhost": "v2", "component": "vhost-limits",
             "name": "limits"}
        ]  # fmt: skip
        assert (await client.delete("/api/vhost-limits/v2/max-queues")).status == 200
        assert (await client.delete("/api/vhost-limits/v2/max-queues")).status == 404
        imported = await client.post("/api/definitions", json=whole)
        assert (await imported.json())["imported"]["limits"] == 1
        assert await (await client.get("/api/vhost-limits")).json() == wanted

    serve(broker, scenario)
