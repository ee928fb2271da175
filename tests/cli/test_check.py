"""``ping``, ``status``, ``query`` and ``ready`` in process, against real brokers: a
stand-alone one and a primary with a ready backup."""

from __future__ import annotations

import json

import pytest

from tests.broker_process import BrokerProcess
from tests.cli.conftest import address, qpid_ha
from tests.ha.cluster import Cluster

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)


def test_ping(solo: BrokerProcess) -> None:
    result = qpid_ha("-b", address(solo, ""), "ping")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_status_of_a_standalone_broker(solo: BrokerProcess) -> None:
    result = qpid_ha("-b", address(solo, ""), "status")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "standalone\n", "")
    data = json.loads(qpid_ha("-b", address(solo, ""), "status", "--json").stdout)
    assert data["ha_state"] == "standalone" and data["amqp_port"] == solo.port


def test_status_expectations_exit_0_or_1_with_the_state(solo: BrokerProcess) -> None:
    b = address(solo, "")
    for args, code in [
        (["--expect=standalone"], 0),
        (["--expect=active"], 1),
        (["--expect=primary"], 1),
        (["--is-primary"], 1),
    ]:
        result = qpid_ha("-b", b, "status", *args)
        assert (result.exit_code, result.stdout, result.stderr) == (code, "standalone\n", ""), args


def test_status_all_of_a_standalone_broker_says_so_and_exits_1(solo: BrokerProcess) -> None:
    """Issue 15: it printed an empty table and exited 0."""
    for extra in ([], ["--json"]):
        result = qpid_ha("-b", address(solo, ""), "status", "--all", *extra)
        assert (result.exit_code, result.stdout) == (1, "")
        assert result.stderr == (
            f"qpid-ha: error: 127.0.0.1:{solo.mgmt_port} is a stand-alone broker, not a"
            " cluster member: status --all lists a cluster's members\n"
        )


def test_query_without_credentials_logs_in_as_guest(solo: BrokerProcess) -> None:
    """Issue 15: query did not fall back to the built-in user as the drill does."""
    result = qpid_ha("-b", address(solo, ""), "query")
    assert result.stderr.endswith("this broker is not an HA cluster member\n")  # not a 401
    wrong = qpid_ha("-b", address(solo, "guest/wrong"), "query")
    assert wrong.exit_code == 1 and "HTTP 401" in wrong.stderr


def test_query_of_a_backup_without_credentials(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[1], ""), "query")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "ready"


def test_status_of_a_primary_and_a_backup(pair: Cluster) -> None:
    primary, backup = (address(b) for b in pair.brokers)
    assert qpid_ha("-b", primary, "status", "--is-primary").stdout == "active\n"
    assert qpid_ha("-b", primary, "status", "--expect=primary").exit_code == 0
    result = qpid_ha("-b", backup, "status", "--is-primary")
    assert (result.exit_code, result.stdout) == (1, "ready\n")
    assert qpid_ha("-b", backup, "status", "--expect=ready").exit_code == 0


def test_status_all_lists_every_member(pair: Cluster) -> None:
    ha = pair.ha(0)
    result = qpid_ha("-b", address(pair.brokers[0]), "status", "--all")
    assert result.exit_code == 0, result.stderr
    header, *rows, public = result.stdout.splitlines()
    assert header.split() == ["ADDRESS", "STATE", "ID"]
    assert sorted(row.split()[1] for row in rows) == ["active", "ready"]
    assert {row.split()[2] for row in rows} == {m["id"] for m in ha["members"]}
    assert public == f"public URL (for clients): {ha['public_url']}"
    members = json.loads(
        qpid_ha("-b", address(pair.brokers[0]), "status", "--all", "--json").stdout
    )
    assert sorted(m["state"] for m in members) == ["active", "ready"]


def test_query_hides_the_members_unless_all(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[0]), "query")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["epoch"] == 1 and "members" not in data
    everything = json.loads(qpid_ha("-b", address(pair.brokers[0]), "query", "--all").stdout)
    assert len(everything["members"]) == 2


def test_query_of_a_standalone_broker_is_one_line_and_exit_1(solo: BrokerProcess) -> None:
    result = qpid_ha("-b", address(solo), "query")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"qpid-ha: error: 127.0.0.1:{solo.mgmt_port} answered HTTP 404 for /api/ha: "
        "this broker is not an HA cluster member\n"
    )


def test_ready(solo: BrokerProcess, pair: Cluster) -> None:
    for b, code, state in [
        (address(pair.brokers[0]), 0, "active"),
        (address(pair.brokers[1]), 0, "ready"),
        (address(solo), 1, "standalone"),
    ]:
        result = qpid_ha("-b", b, "ready")
        assert (result.exit_code, result.stdout, result.stderr) == (code, f"{state}\n", "")


def test_status_expect_of_an_unknown_state_is_a_wrong_use(solo: BrokerProcess) -> None:
    """A typo (--expect=activ) exited 1 with the state, as if the broker were not in it: a
    script could not tell a wrong command from a broker in another state. Now exit 2 with
    one line naming the value, before asking the broker; catchup is catch-up."""
    b = address(solo, "")
    for value in ("activ", "bogus", ""):
        result = qpid_ha("-b", b, "status", f"--expect={value}")
        assert (result.exit_code, result.stdout) == (2, ""), value
        assert result.stderr == (
            f"qpid-ha: error: --expect {value!r}: expected one of standalone, joining,"
            " catch-up, ready, recovering, active or primary\n"
        )
    result = qpid_ha("-b", b, "status", "--expect=Standalone")
    assert (result.exit_code, result.stdout) == (0, "standalone\n")
    assert qpid_ha("-b", b, "status", "--expect=catchup").exit_code == 1
