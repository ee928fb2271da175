"""The znode layout: one place for every path, names checked."""

from __future__ import annotations

import pytest

from ha_agent.zk_layout import ROOT, ClusterLayout, check_name


def test_paths_of_a_cluster() -> None:
    layout = ClusterLayout("prod")
    assert ROOT == "/qpid-ha"
    assert layout.root == "/qpid-ha/prod"
    assert layout.members == "/qpid-ha/prod/members"
    assert layout.member("node-1.example.com") == "/qpid-ha/prod/members/node-1.example.com"
    assert layout.election == "/qpid-ha/prod/election"
    assert layout.primary == "/qpid-ha/prod/primary"
    assert layout.epoch == "/qpid-ha/prod/epoch"
    assert layout.in_sync == "/qpid-ha/prod/in-sync"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "/abs", "-x", "a b", "x\n", "é", "a" * 129])
def test_bad_names_are_refused_with_the_kind_named(name: str) -> None:
    with pytest.raises(ValueError, match="bad cluster name"):
        ClusterLayout(name)
    with pytest.raises(ValueError, match="bad node name"):
        ClusterLayout("ok").member(name)


@pytest.mark.parametrize("name", ["a", "n1", "node_2", "10.0.0.1", "A-b.c_d", "a" * 128])
def test_good_names(name: str) -> None:
    assert check_name("node", name) == name
