"""The virtual IP on a real interface (a network namespace): idempotent take and drop, and
a leftover of an agent that died holding it is dropped by the next agent's start."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from common.polling import poll_until
from ha_agent.vip import VirtualIp
from tests.netns import Host, Lan, is_root

pytestmark = pytest.mark.skipif(not is_root(), reason="network namespaces need root")

VIP = "10.77.41.100/24"


@pytest.fixture
def host() -> Iterator[Host]:
    lan = Lan(subnet=41).start()
    try:
        yield lan.add_host("n1", 1)
    finally:
        lan.delete()


def test_take_and_drop_are_idempotent(host: Host) -> None:
    vip = VirtualIp(VIP, "eth0", netns=host.namespace)
    assert vip.take() is True
    assert vip.take() is False  # already assigned: held, no error
    assert vip.held and "10.77.41.100" in host.addresses()
    assert vip.drop() is True
    assert vip.drop() is False
    assert "10.77.41.100" not in host.addresses()


def test_a_leftover_of_a_dead_agent_is_held_by_a_new_take_and_goes_with_a_drop(
    host: Host,
) -> None:
    VirtualIp(VIP, "eth0", netns=host.namespace).take()  # an agent that then died (SIGKILL)
    restarted = VirtualIp(VIP, "eth0", netns=host.namespace)
    assert restarted.take() is False and restarted.held  # was: "Address already assigned"
    assert restarted.drop() is True  # what the agent does when it starts
    assert "10.77.41.100" not in host.addresses()


def test_a_take_does_not_wait_for_the_announcement_and_a_held_address_is_not_announced_again(
    host: Host,
) -> None:
    """iputils' ``arping -U -c 1`` waits a second after sending: run inline in the take that
    follows a promotion, it held the agent's loop (and the new primary's lease renewal) that
    long, and a 1 s session's lease (0.9 s) ran out: the broker fenced itself at once."""
    vip = VirtualIp(VIP, "eth0", netns=host.namespace)
    began = time.monotonic()
    assert vip.take() is True
    took = time.monotonic() - began
    first = vip.announcing
    assert first is not None
    assert took < 0.5, f"take() waited {took:.3f} s"
    assert vip.take() is False  # held: no second announcement
    assert vip.announcing is first
    poll_until(lambda: not first.is_alive(), 10.0, "the announcement to end")
    vip.drop()
