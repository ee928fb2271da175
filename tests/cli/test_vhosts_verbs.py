"""``qpid-ha vhosts list|add|delete`` and ``qpid-ha definitions export|import`` in
process, against the shared primary and backup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.polling import poll_until
from tests.cli.conftest import address, qpid_ha
from tests.ha.cluster import Cluster, http

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)

RABBITMQ_FILE = (
    Path(__file__).parent.parent / "management" / "data" / "rabbitmq-3.10.8-definitions.json"
)


def backup_vhosts(pair: Cluster) -> list[str]:
    return [v["name"] for v in http("GET", pair.brokers[1].mgmt_port, "/api/vhosts")]


def test_add_list_and_delete_a_vhost_replicated_to_the_backup(pair: Cluster) -> None:
    primary = address(pair.brokers[0])
    added = qpid_ha("-b", primary, "vhosts", "add", "cli-tenant")
    assert (added.exit_code, added.stdout, added.stderr) == (0, "vhost cli-tenant: created\n", "")
    again = qpid_ha("-b", primary, "vhosts", "add", "cli-tenant")
    assert again.stdout == "vhost cli-tenant: exists\n"
    listed = qpid_ha("-b", primary, "vhosts", "list")
    assert listed.exit_code == 0
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("/  queues=")
    assert "cli-tenant  queues=0 exchanges=6 messages=0 connections=0" in lines
    poll_until(lambda: "cli-tenant" in backup_vhosts(pair), 10, "the vhost on the backup")
    refused = qpid_ha("-b", address(pair.brokers[1]), "vhosts", "add", "elsewhere")
    assert (refused.exit_code, refused.stdout) == (1, "")
    assert "answered HTTP 409" in refused.stderr and "on the primary" in refused.stderr
    assert refused.stderr.count("\n") == 1
    deleted = qpid_ha("-b", primary, "vhosts", "delete", "cli-tenant")
    assert (deleted.exit_code, deleted.stdout) == (
        0,
        "vhost cli-tenant: deleted (0 connections closed)\n",
    )
    poll_until(lambda: "cli-tenant" not in backup_vhosts(pair), 10, "the vhost gone on the backup")
    missing = qpid_ha("-b", primary, "vhosts", "delete", "cli-tenant")
    assert missing.exit_code == 1 and "no vhost 'cli-tenant'" in missing.stderr


@pytest.mark.parametrize("name", ["", "x" * 256])
def test_a_bad_vhost_name_is_one_line_and_exit_2(pair: Cluster, name: str) -> None:
    result = qpid_ha("-b", address(pair.brokers[0]), "vhosts", "add", name)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("qpid-ha: error: ") and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/queues/made-on-backup", {"durable": True}),
        ("PUT", "/api/exchanges/made-on-backup", {"type": "fanout"}),
        ("DELETE", "/api/exchanges/amq.fanout", None),
        ("DELETE", "/api/queues/any", None),
    ],
)
def test_object_changes_on_a_backup_are_409_naming_the_primary(
    pair: Cluster, method: str, path: str, body: dict[str, object] | None
) -> None:
    """A backup's objects come from the primary only: a declare or delete through its
    management API would be a divergence the primary never sees."""
    backup = pair.brokers[1].mgmt_port
    answer = http(method, backup, path, body)
    assert answer["http_status"] == 409, answer
    assert "HA backup" in answer["reason"] and "act on the primary" in answer["reason"], answer
    queues = [q["name"] for q in http("GET", backup, "/api/queues")]
    exchanges = [e["name"] for e in http("GET", backup, "/api/exchanges")]
    assert "made-on-backup" not in queues + exchanges and "amq.fanout" in exchanges


def test_definitions_export_and_import(pair: Cluster, tmp_path: Path) -> None:
    """``qpid-ha definitions``: a RabbitMQ file imported into the primary (its users
    replicated), the broker's exported to a file of mode 0600 (a user RabbitMQ cannot
    import named on the error stream); a bad file is exit 2 before
    any call, a refused field exit 1 naming it, the backup 409."""
    primary, backup = address(pair.brokers[0]), address(pair.brokers[1])
    imported = qpid_ha("-b", primary, "definitions", "import", str(RABBITMQ_FILE))
    assert imported.exit_code == 0, imported.stderr
    lines = imported.stdout.splitlines()
    assert lines[0] == (
        "imported: 2 vhosts, 1 users, 1 permissions, 2 exchanges, 2 queues, 3 bindings, 0 limits"
    )
    assert "ignored: policies[0] 'orders-ttl' in vhost 'shop': not supported here, ignored" in (
        lines
    )
    assert any(line.startswith("skipped: users[1] 'guest'") for line in lines)
    users = lambda: [u["name"] for u in http("GET", pair.brokers[1].mgmt_port, "/api/users")]  # noqa: E731
    poll_until(lambda: "shopkeeper" in users(), 10, "the imported user on the backup")
    out = tmp_path / "out.json"
    exported = qpid_ha("-b", primary, "definitions", "export", str(out), "--vhost", "shop")
    assert (exported.exit_code, exported.stdout) == (0, f"definitions written to {out}\n")
    assert out.stat().st_mode & 0o777 == 0o600
    assert {q["name"] for q in json.loads(out.read_text())["queues"]} == {"orders", "audit"}
    # a user made here (scrypt): the whole export names it, in qpidd's own section
    mgmt = pair.brokers[0].mgmt_port
    assert http("PUT", mgmt, "/api/users/cli-clerk", {"password": "pw"})["name"] == "cli-clerk"
    try:
        whole = qpid_ha("-b", primary, "definitions", "export", str(out))
        assert whole.exit_code == 0 and whole.stderr == (
            "not for RabbitMQ: 1 user(s) with scrypt password hashes, which RabbitMQ cannot"
            " import, are in the file's qpidd_only section (qpidd imports them, RabbitMQ"
            " passes over it): cli-clerk\n"
        )
        data = json.loads(out.read_text())
        assert [u["name"] for u in data["users"]] == ["shopkeeper"]
        assert [u["name"] for u in data["qpidd_only"]["users"]] == ["cli-clerk"]
    finally:
        http("DELETE", mgmt, "/api/users/cli-clerk")
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    refused = qpid_ha("-b", primary, "definitions", "import", str(bad))
    assert (refused.exit_code, refused.stdout) == (2, "") and refused.stderr.count("\n") == 1
    bad.write_text('{"queues": [{"name": "q", "durable": "yes"}]}')
    refused = qpid_ha("-b", primary, "definitions", "import", str(bad))
    assert refused.exit_code == 1 and "queues[0].durable: must be true or false" in refused.stderr
    on_backup = qpid_ha("-b", backup, "definitions", "import", str(RABBITMQ_FILE))
    assert on_backup.exit_code == 1 and "answered HTTP 409" in on_backup.stderr
