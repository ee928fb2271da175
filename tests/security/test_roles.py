"""Management roles (issue 13, item 4): monitoring reads, administrator changes objects and
connections, cluster-manager steers the cluster; a user without a role gets 403."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.amqp.context import BrokerContext
from broker.core.vhost import VirtualHost
from broker.security.roles import Permission, Role, allows, parse_roles, required_permission
from broker.security.sasl import Authenticator
from broker.security.users import UserDatabase
from common.polling import free_port
from tests.broker_process import BrokerProcess
from tests.management.support import FakeBroker, FakeOptions, basic, serve
from tests.security.users import write_users

M, A, C = Role.MONITORING, Role.ADMINISTRATOR, Role.CLUSTER_MANAGER


@pytest.mark.parametrize(
    ("method", "path", "needed"),
    [
        ("GET", "/api/queues", Permission.READ),
        ("GET", "/api/ha", Permission.READ),
        ("HEAD", "/api/connections", Permission.READ),
        ("PUT", "/api/queues/q", Permission.CONFIGURE),
        ("DELETE", "/api/exchanges/x", Permission.CONFIGURE),
        ("DELETE", "/api/connections/7", Permission.CONFIGURE),
        ("POST", "/api/ha/replicate", Permission.CONFIGURE),
        ("POST", "/api/ha/promote", Permission.STEER),
        ("POST", "/api/ha/lease", Permission.STEER),
        ("POST", "/api/ha/in-sync", Permission.STEER),
        ("POST", "/api/ha/members", Permission.STEER),
        ("POST", "/api/admin/stop", Permission.STEER),
        ("POST", "/api/ha/promote/", Permission.STEER),
        ("PUT", "/api/ha/promote", Permission.STEER),
        ("POST", "/api/store/backup", Permission.BACKUP),
    ],
)
def test_required_permission(method: str, path: str, needed: Permission) -> None:
    assert required_permission(method, path) is needed


def test_what_each_role_grants() -> None:
    table = {role: {p for p in Permission if allows(frozenset({role}), p)} for role in Role}
    assert table == {
        M: {Permission.READ},
        A: {Permission.READ, Permission.CONFIGURE, Permission.BACKUP},
        C: {Permission.READ, Permission.STEER, Permission.BACKUP},
    }
    assert not any(allows(frozenset(), p) for p in Permission)


@given(st.sets(st.sampled_from(list(Role))), st.sampled_from(list(Permission)))
def test_more_roles_never_grant_less(roles: set[Role], permission: Permission) -> None:
    if allows(frozenset(roles), permission):
        for extra in Role:
            assert allows(frozenset(roles | {extra}), permission)


def test_parse_roles() -> None:
    assert parse_roles(" monitoring, cluster-manager ,") == {M, C}
    assert parse_roles("") == frozenset()
    with pytest.raises(ValueError, match="unknown role 'admin'"):
        parse_roles("admin")


def _context(users: UserDatabase) -> BrokerContext:
    return BrokerContext(vhost=VirtualHost(), authenticator=Authenticator(users, True))


def test_roles_on_the_management_api() -> None:
    users = UserDatabase.from_passwords({"mon": "m"}, roles=[M])
    for name, roles in (("adm", [A]), ("mgr", [C]), ("app", [])):
        user = UserDatabase.from_passwords({name: name[0]}, roles=roles).get(name)
        assert user is not None
        users = users.with_user(user)
    broker = FakeBroker(context=_context(users), options=FakeOptions(auth=True))
    mon, adm, mgr, app = basic("mon", "m"), basic("adm", "a"), basic("mgr", "m"), basic("app", "a")

    async def scenario(client: Any) -> None:
        async def status(method: str, path: str, headers: dict[str, str], **kw: Any) -> int:
            response = await client.request(method, path, headers=headers, **kw)
            if response.status == 403:
                body = await response.json()
                assert body["error"] == "forbidden" and "needs the role" in body["reason"]
            return int(response.status)

        assert await status("GET", "/api/queues", mon) == 200
        assert await status("PUT", "/api/queues/q", mon) == 403
        assert "q" not in broker.vhost.queues
        assert await status("PUT", "/api/queues/q", adm) == 201
        assert await status("GET", "/api/queues", mgr) == 200
        assert await status("PUT", "/api/queues/q2", mgr) == 403
        body = {"cluster_manager": True, "epoch": 1}
        for headers in (mon, adm, app):
            assert await status("POST", "/api/ha/promote", headers, json=body) == 403
        # The cluster manager passes the role check: this broker is no HA member (404).
        assert await status("POST", "/api/ha/promote", mgr, json=body) == 404
        assert await status("GET", "/api/queues", app) == 403
        assert await status("GET", "/api/status", app) == 200  # open to health checks

    serve(broker, scenario)


def _post(port: int, path: str, user: str, password: str, body: dict[str, Any]) -> int:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_promote_by_a_non_manager_is_refused_with_403(tmp_path: Path) -> None:
    users = write_users(
        tmp_path / "users",
        {"guest": "guest", "alice": "a-pw", "agent": "g-pw"},
        {"alice": [A, M], "agent": [C]},
    )
    port = free_port()
    broker = BrokerProcess(
        tmp_path / "b",
        args=[f"--sasl-users={users}", "--ha-cluster=yes", f"--ha-brokers-url=127.0.0.1:{port}"],
        port=port,
    ).start()
    try:
        mgmt = broker.mgmt_port
        promote = {"cluster_manager": True, "epoch": 1}
        assert _post(mgmt, "/api/ha/promote", "alice", "a-pw", promote) == 403
        assert (
            _post(mgmt, "/api/ha/lease", "alice", "a-pw", {"cluster_manager": True, "lease": 5})
            == 403
        )
        assert broker.events() and all(
            e["event"] != "ha_promote_requested" for e in broker.events()
        )
        assert _post(mgmt, "/api/ha/promote", "agent", "g-pw", promote) == 200
        assert (
            _post(mgmt, "/api/ha/lease", "agent", "g-pw", {"cluster_manager": True, "lease": 5})
            == 200
        )
        denied = [e for e in broker.events() if e["event"] == "management_access_denied"]
        assert [(e["user"], e["path"], e["needed"]) for e in denied] == [
            ("alice", "/api/ha/promote", "steer"),
            ("alice", "/api/ha/lease", "steer"),
        ]
    finally:
        broker.stop()
