"""broker.core.vhost_limits: RabbitMQ's max-connections and max-queues, their refusals in
RabbitMQ's codes and words, and how they travel with the cluster's users (issue 30)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from broker.core.errors import AmqpError, ReplyCode
from broker.core.vhost import VirtualHost
from broker.core.vhost_limits import MAX_CONNECTIONS, MAX_QUEUES, VhostLimits
from broker.core.vhosts import VirtualHosts
from broker.security.cluster_users import ClusterUsers, UserError

limits_values = st.integers(-3, 6)
counts = st.integers(0, 8)


@given(limit=limits_values, count=counts)
@example(limit=-1, count=10**6)  # RabbitMQ's "no limit"
@example(limit=0, count=0)  # 0: none allowed
@example(limit=3, count=2)
@example(limit=3, count=3)
def test_refused_exactly_when_the_vhost_holds_its_limit(limit: int, count: int) -> None:
    limits = VhostLimits()
    limits.set("v", MAX_CONNECTIONS, limit)
    limits.set("v", MAX_QUEUES, limit)
    over = 0 <= limit <= count
    try:
        limits.check_connection("v", "u", count)
    except AmqpError as exc:
        assert over and exc.reply_code == ReplyCode.NOT_ALLOWED and exc.closes_connection
        assert exc.reply_text == (
            f"access to vhost 'v' refused for user 'u': connection limit ({limit}) is reached"
        )
    else:
        assert not over
    try:
        limits.check_queue("v", "q", count)
    except AmqpError as exc:
        assert over and exc.reply_code == ReplyCode.PRECONDITION_FAILED
        assert not exc.closes_connection  # a channel error
        assert (
            exc.reply_text
            == f"cannot declare queue 'q': queue limit in vhost 'v' ({limit}) is reached"
        )
    else:
        assert not over
    limits.check_connection("other", "u", count)  # another vhost: no limit
    limits.check_queue("other", "q", count)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("max-channels", 1, "unknown vhost limit 'max-channels'"),
        (MAX_QUEUES, "1", "the value must be an integer"),
        (MAX_QUEUES, True, "the value must be an integer"),
        (MAX_QUEUES, 1.5, "the value must be an integer"),
        (MAX_QUEUES, 2**63, "out of range"),
    ],
)
def test_a_bad_limit_is_named(name: str, value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        VhostLimits().set("v", name, value)  # type: ignore[arg-type]


def test_a_vhost_refuses_a_clients_new_queue_over_max_queues_only() -> None:
    limits = VhostLimits()
    vhosts = VirtualHosts()
    vhosts.hold_limits(limits)
    shop, _ = vhosts.create("shop")  # made after: holds the limits too
    limits.set("shop", MAX_QUEUES, 1)
    shop.declare_queue("a")
    shop.declare_queue("a")  # declared again: not new
    with pytest.raises(AmqpError, match=r"queue limit in vhost 'shop' \(1\) is reached"):
        shop.declare_queue("b")
    with pytest.raises(AmqpError, match="queue limit"):
        shop.declare_queue("")  # a server-named one too
    shop.declare_queue("b", replicated=True)  # what the primary accepted: never refused
    vhosts.default.declare_queue("b")  # another vhost
    assert sorted(shop.queues) == ["a", "b"]
    standalone = VirtualHost()
    assert standalone.limits is None  # a vhost without limits asks nothing


def test_limits_travel_with_the_cluster_users_and_go_with_their_vhost() -> None:
    primary, backup = ClusterUsers(), ClusterUsers()
    changes: list[int] = []
    primary.listeners.append(lambda: changes.append(1))
    primary.set_limit("shop", MAX_CONNECTIONS, 10)
    primary.set_limits({"shop": {MAX_QUEUES: 5}, "tenant": {MAX_QUEUES: -1}})
    assert len(changes) == 2
    event = primary.event()
    assert event["limits"] == [
        {"vhost": "shop", "value": {MAX_CONNECTIONS: 10, MAX_QUEUES: 5}},
        {"vhost": "tenant", "value": {MAX_QUEUES: -1}},
    ]
    held = backup.limits  # the vhosts hold this object: replaced in place
    backup.replace(event)
    assert backup.limits is held and held.all() == primary.limits.all()
    backup.replace({"type": "users", "users": [], "permissions": []})  # a primary with none
    assert held.all() == {}
    with pytest.raises(UserError, match="malformed users event: unknown vhost limit"):
        backup.replace({"limits": [{"vhost": "v", "value": {"max-channels": 1}}]})
    with pytest.raises(UserError, match="unknown vhost limit"):
        primary.set_limit("v", "max-channels", 1)
    primary.vhost_deleted("shop")
    assert primary.limits.all() == {"tenant": {MAX_QUEUES: -1}}
    primary.clear_limit("tenant", MAX_QUEUES)
    assert primary.limits.all() == {}
    with pytest.raises(KeyError):
        primary.clear_limit("tenant", MAX_QUEUES)
