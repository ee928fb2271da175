"""RabbitMQ's definitions file read without a broker (broker.management.definitions), and
RabbitMQ's salted SHA-256 password hash (broker.security.passwords, cluster_users)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from broker.management.definitions import (
    DefinitionsError,
    export,
    left_for_qpidd,
    parse,
    parse_text,
)
from broker.security.cluster_users import ClusterUser, ClusterUsers, VhostPermission
from broker.security.passwords import (
    RabbitSha256Hash,
    hash_password,
    parse_hash,
    rabbit_sha256,
    verify_password,
)
from broker.security.roles import Role
from broker.security.sasl import Authenticator
from broker.security.users import UserDatabase

RABBITMQ_FILE = Path(__file__).parent / "data" / "rabbitmq-3.10.8-definitions.json"
#: RabbitMQ's documented example: salt 908DC60A, password test12 (docs "Passwords").
TEST12 = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"


def test_rabbitmqs_documented_hash_is_computed_and_verified() -> None:
    assert rabbit_sha256("test12", bytes.fromhex("908DC60A")).rabbit_form() == TEST12
    stored = RabbitSha256Hash.parse(TEST12)
    assert verify_password("test12", stored) and not verify_password("test13", stored)
    assert parse_hash(stored.encode()) == stored  # as a users file writes it


def test_a_rabbitmq_export_reads_whole_and_lists_what_has_no_place_here() -> None:
    found = parse_text(RABBITMQ_FILE.read_bytes())
    assert found.vhosts == ["/", "shop"]
    assert [u.name for u in found.users] == ["shopkeeper", "guest"]
    assert found.users[0].roles == frozenset({Role.ADMINISTRATOR})
    assert [(q.vhost, q.name) for q in found.queues] == [("shop", "orders"), ("shop", "audit")]
    assert found.queues[0].arguments == {"x-queue-type": "classic", "x-max-length": 1000}
    assert [(b.source, b.destination_type) for b in found.bindings] == [
        ("shop.events", "queue"),
        ("shop.events", "exchange"),
        ("shop.all", "queue"),
    ]
    assert found.ignored == [
        "queues[1] 'audit' in vhost 'shop': x-queue-type 'quorum' is declared as a classic"
        " queue here (the argument is kept)",
        "policies[0] 'orders-ttl' in vhost 'shop': not supported here, ignored",
        "global_parameters[0] 'internal_cluster_id': not supported here, ignored",
    ]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"queues": [{"name": "q", "durable": "yes"}]}, "queues[0].durable: must be true or false"),
        ({"queues": [{"durable": True}]}, "queues[0].name: required"),
        ({"queues": {}}, "queues: must be a list"),
        ({"exchanges": [{"name": "e", "type": "x-delayed-message"}]}, "exchanges[0].type:"),
        ({"bindings": [{"source": "e", "destination": "q"}]}, "bindings[0].destination_type"),
        ({"users": [{"name": "u", "password_hash": "abc"}]}, "users[0].password_hash: not base64"),
        (
            {"users": [{"name": "u", "password_hash": TEST12, "hashing_algorithm": "md5"}]},
            "hashing_algorithm: 'md5' is not supported",
        ),
        ({"users": [{"name": "a:b", "password_hash": ""}]}, "users[0].name: invalid user name"),
        (
            {
                "permissions": [
                    {"user": "u", "vhost": "/", "configure": "(", "write": "", "read": ""}
                ]
            },
            "permissions[0].configure: not a regular expression",
        ),
        ({"vhosts": [{"name": ""}]}, "vhosts[0].name:"),
        ({"shovels": []}, "shovels: unknown section"),
    ],
)
def test_a_bad_field_is_named(change: dict[str, Any], reason: str) -> None:
    with pytest.raises(DefinitionsError) as info:
        parse(change)
    assert str(info.value).startswith(reason) or reason in str(info.value)


def test_vhost_limits_are_imported_and_user_limits_listed_as_ignored() -> None:
    """A vhost's limits come from its ``limits`` object or from RabbitMQ's ``vhost-limits``
    parameter (where RabbitMQ keeps and exports them); a user's have no place here."""
    found = parse(
        {
            "vhosts": [{"name": "v", "limits": {"max-connections": 5}}, {"name": "w"}],
            "users": [{"name": "u", "password_hash": "", "limits": {"max-channels": 2}}],
            "parameters": [
                {
                    "value": {"max-queues": 10, "max-connections": -1},
                    "vhost": "w",
                    "component": "vhost-limits",
                    "name": "limits",
                },
                {"value": {}, "vhost": "w", "component": "federation-upstream", "name": "up"},
            ],
        }
    )
    assert found.limits == {
        "v": {"max-connections": 5},
        "w": {"max-queues": 10, "max-connections": -1},
    }
    assert found.ignored == [
        "users[0] 'u': limits are not supported here, ignored",
        "parameters[1] 'up' (federation-upstream) in vhost 'w': not supported here, ignored",
    ]
    for bad, words in [
        ({"max-channels": 1}, "vhosts[0].limits: unknown vhost limit 'max-channels'"),
        ({"max-queues": "10"}, "vhosts[0].limits: max-queues: the value must be an integer"),
        ([1], "vhosts[0].limits: must be an object of limits"),
    ]:
        with pytest.raises(DefinitionsError, match=re.escape(words)):
            parse({"vhosts": [{"name": "v", "limits": bad}]})


def test_bad_json_and_a_vhosts_file_with_users_are_refused() -> None:
    with pytest.raises(DefinitionsError, match="not valid JSON"):
        parse_text(b"{nope")
    with pytest.raises(DefinitionsError, match="must be a JSON object"):
        parse_text(b"[]")
    with pytest.raises(DefinitionsError, match="users: not taken by a vhost's import"):
        parse({"users": [{"name": "u", "password_hash": ""}]}, vhost="shop")
    one = parse({"queues": [{"name": "q", "vhost": "elsewhere"}]}, vhost="shop")
    assert one.queues[0].vhost == "shop"  # a vhost's file: its objects go to that vhost


def test_an_export_reads_back_the_same() -> None:
    user = ClusterUser("u", RabbitSha256Hash.parse(TEST12), ("monitoring", "custom"))
    permission = VhostPermission("u", "/", "^a", "^b", "^c")
    queue = {"name": "q", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}
    limits = {"/": {"max-queues": 3}}
    data = export("0.1.0", ["/"], [user], [permission], [queue], [], [], limits)
    again = parse(json.loads(json.dumps(data)))
    assert again.users == [user] and again.permissions == [permission]
    assert again.limits == limits and again.ignored == []
    assert data["parameters"] == [  # as RabbitMQ exports them
        {"value": {"max-queues": 3}, "vhost": "/", "component": "vhost-limits", "name": "limits"}
    ]
    assert data["users"][0] == {
        "name": "u",
        "password_hash": TEST12,
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": "monitoring,custom",
        "limits": {},
    }


def test_the_brokers_own_user_wins_and_a_cluster_user_needs_a_permission() -> None:
    own = UserDatabase.from_passwords({"guest": "guest"})
    authenticator = Authenticator(own, auth_enabled=True)
    cluster: ClusterUsers = authenticator.cluster_users
    cluster.update(
        [ClusterUser("guest", RabbitSha256Hash.parse(TEST12), ("monitoring",))],
        [],
    )
    cluster.put_user(ClusterUser("shop", rabbit_sha256("s3cret"), ("administrator",)))
    assert authenticator.authenticate("PLAIN", b"\0guest\0guest") == "guest"
    assert Role.CLUSTER_MANAGER in authenticator.roles("guest")  # the own user's roles
    assert authenticator.authenticate("PLAIN", b"\0shop\0s3cret") == "shop"
    assert authenticator.roles("shop") == frozenset({Role.ADMINISTRATOR})
    assert authenticator.may_open("guest", "any") and not authenticator.may_open("shop", "/")
    cluster.set_permission(VhostPermission("shop", "/"))
    assert authenticator.may_open("shop", "/")
    copy = ClusterUsers()
    copy.replace(cluster.event())  # as a backup applies the users event
    assert copy.users == cluster.users and copy.permissions == cluster.permissions
    cluster.vhost_deleted("/")
    assert not authenticator.may_open("shop", "/")
    cluster.delete_user("shop")
    with pytest.raises(Exception, match="wrong user name or password"):
        authenticator.authenticate("PLAIN", b"\0shop\0s3cret")


def test_an_export_is_for_rabbitmq_and_keeps_scrypt_users_for_qpidd() -> None:
    """RabbitMQ 3.10.8 refuses a whole file for one user of an algorithm it does not know:
    scrypt users and their permissions go to ``qpidd_only`` (RabbitMQ passes over a section
    it does not know; bench/definitions_to_rabbitmq.py shows it on a real RabbitMQ), named
    there, and qpidd's own import takes them back whole."""
    rabbit = ClusterUser("shopkeeper", RabbitSha256Hash.parse(TEST12), ("administrator",))
    scrypt = ClusterUser("clerk", parse_hash(hash_password("pw", log_n=10)), ("monitoring",))
    grants = [VhostPermission("shopkeeper", "/"), VhostPermission("clerk", "/", "", "^a", "^b")]
    data = json.loads(json.dumps(export("0.1.0", ["/"], [rabbit, scrypt], grants, [], [], [])))
    assert {u["hashing_algorithm"] for u in data["users"]} == {"rabbit_password_hashing_sha256"}
    assert [u["name"] for u in data["users"]] == ["shopkeeper"]
    assert [p["user"] for p in data["permissions"]] == ["shopkeeper"]
    own = data["qpidd_only"]
    assert "RabbitMQ cannot import" in own["reason"] and left_for_qpidd(data) == ["clerk"]
    assert own["users"][0]["hashing_algorithm"] == "qpidd_password_hashing_scrypt"
    assert own["permissions"] == [grants[1].definition()]
    again = parse(data)
    assert again.users == [rabbit, scrypt] and again.permissions == grants
    assert again.ignored == []
    only_rabbit = export("0.1.0", ["/"], [rabbit], grants[:1], [], [], [])
    assert "qpidd_only" not in only_rabbit and left_for_qpidd(only_rabbit) == []
    for bad, words in [
        ({"qpidd_only": []}, "qpidd_only: must be an object"),
        ({"qpidd_only": {"users": {}}}, "qpidd_only.users: must be a list"),
        ({"qpidd_only": {"users": [{"password_hash": ""}]}}, "qpidd_only.users[0].name: required"),
        ({"qpidd_only": {"permissions": [{"user": "u"}]}}, "qpidd_only.permissions[0].vhost"),
    ]:
        with pytest.raises(DefinitionsError, match=re.escape(words)):
            parse(bad)
    with pytest.raises(DefinitionsError, match="qpidd_only: not taken by a vhost's import"):
        parse({"qpidd_only": {"users": []}}, vhost="shop")
