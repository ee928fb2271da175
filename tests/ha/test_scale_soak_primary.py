"""How ``bench/scale_soak.py`` samples the primary: off the brokers' loops.

It asked each broker's ``GET /api/status`` (answered by the loop) within 1 s: at 10,000
queues and load 20-30 a primary whose loop ran late answered after that, and the second
was counted "without a primary". Now each broker's liveness answer (its liveness thread)
says it, the port learnt once per instance from ``GET /api/ha``. Sans I/O: the answers
come from a fake ``fetch``.
"""

from __future__ import annotations

import importlib
import json
import urllib.error
from typing import Any

import pytest

from tests.ha.scale_soak_module import scale_soak

scale_soak()  # puts bench/ on the path
clusters = importlib.import_module("soak_clusters")


def _live(state: str, epoch: int = 1, fenced: bool = False, pid: int = 10) -> dict[str, Any]:
    return {"alive": True, "ha_state": state, "epoch": epoch, "fenced": fenced, "pid": pid}


def test_the_primary_is_the_broker_that_says_so() -> None:
    answers = {"n1": _live("ready"), "n2": _live("active", 3), "n3": None}
    assert clusters.primary_of(answers) == "n2"
    assert clusters.primary_of({"n1": _live("recovering", 2)}) == "n1"


def test_no_primary_when_none_says_so_or_the_one_that_did_is_fenced() -> None:
    assert clusters.primary_of({"n1": _live("ready"), "n2": None, "n3": _live("joining")}) is None
    assert clusters.primary_of({"n1": _live("active", 4, fenced=True)}) is None
    assert clusters.primary_of({}) is None


def test_of_two_primaries_the_newest_epoch() -> None:
    """An old primary not told yet beside the new one: the new one is the primary."""
    answers = {"n1": _live("active", 4), "n2": _live("active", 5), "n3": _live("ready", 5)}
    assert clusters.primary_of(answers) == "n2"


class FakeBrokers:
    """Each node's management API (``None`` port) and liveness port, as ``fetch`` sees them."""

    def __init__(self) -> None:
        self.ports = {"n1": 4001, "n2": 4002}
        self.live: dict[str, dict[str, Any] | None] = {"n1": _live("ready"), "n2": _live("active")}
        self.slow: set[str] = set()  # the loop does not answer in time (the API only)
        self.down: set[str] = set()
        self.asked: list[tuple[str, int | None, str]] = []

    def fetch(self, node: str, port: int | None, path: str, timeout: float) -> bytes:
        self.asked.append((node, port, path))
        if node in self.down:
            raise urllib.error.URLError(ConnectionRefusedError(111, "refused"))
        if port is None:
            if node in self.slow:
                raise TimeoutError("timed out")
            assert path == "/api/ha?queues=summary"  # never a row per queue
            return json.dumps({"liveness": {"port": self.ports[node], "token": None}}).encode()
        if port != self.ports[node]:
            raise urllib.error.URLError(ConnectionRefusedError(111, "refused"))
        assert path == "/liveness"
        return json.dumps(self.live[node]).encode()


def test_a_primary_whose_loop_is_late_is_still_the_primary() -> None:
    """Once its port is known, the primary is read off its loop: a loop that does not
    answer ``/api`` in time is not "no primary"."""
    brokers = FakeBrokers()
    reader = clusters.LivenessReader(brokers.fetch)
    assert reader.primary(["n1", "n2"]) == "n2"
    brokers.slow = {"n1", "n2"}
    brokers.asked.clear()
    for _ in range(3):
        assert reader.primary(["n1", "n2"]) == "n2"
    assert all(port is not None for _node, port, _path in brokers.asked)  # the loop never asked


def test_a_restarted_broker_is_asked_its_new_port() -> None:
    brokers = FakeBrokers()
    reader = clusters.LivenessReader(brokers.fetch)
    assert reader.primary(["n1", "n2"]) == "n2"
    brokers.down = {"n2"}  # killed: nothing listens
    assert reader.primary(["n1", "n2"]) is None
    assert "n2" not in reader.ports
    brokers.down = set()
    brokers.ports["n2"] = 4012  # its next instance
    brokers.live["n2"] = _live("ready", pid=11)
    brokers.live["n1"] = _live("active", 2)
    assert reader.primary(["n1", "n2"]) == "n1"
    assert reader.ports["n2"] == 4012


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"liveness": null}'])
def test_an_answer_it_cannot_read_is_no_answer(body: bytes) -> None:
    def fetch(node: str, port: int | None, path: str, timeout: float) -> bytes:
        return body if port is not None or body != b"[1, 2]" else b'{"liveness": {"port": 1}}'

    reader = clusters.LivenessReader(fetch)
    assert reader.answer("n1") is None


def test_a_cluster_that_gives_every_broker_one_port_never_asks_the_api() -> None:
    brokers = FakeBrokers()
    brokers.ports = {"n1": 8673, "n2": 8673}
    reader = clusters.LivenessReader(brokers.fetch, 8673)
    brokers.down = {"n2"}
    assert reader.primary(["n1", "n2"]) is None
    brokers.down = set()
    assert reader.primary(["n1", "n2"]) == "n2"
    assert all(port == 8673 for _node, port, _path in brokers.asked)
