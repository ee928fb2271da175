"""The cluster's users on the configuration stream (replication format 4, issue 30): a link
of format 4 gets a ``users`` event after its snapshot and after each change, and the
backup's replicator applies it; a link of format 3 gets none (its backup would refuse an
unknown event)."""

from __future__ import annotations

from pamqp import commands

from broker.core.vhost import VirtualHost
from broker.ha.broker_replicator import BrokerReplicator
from broker.ha.streams import PrimaryStreams
from broker.ha.wire_config2 import decode_config_event
from broker.security.cluster_users import ClusterUser, ClusterUsers, VhostPermission
from broker.security.passwords import rabbit_sha256
from tests.amqp.helpers import Client, open_client
from tests.ha.test_streams import BACKUP_PROPS, bodies, primary_context


def config_link(formats: str) -> tuple[Client, ClusterUsers]:
    ctx, _ = primary_context()
    users = ctx.authenticator.cluster_users
    assert isinstance(ctx.streams, PrimaryStreams)
    ctx.streams.users.serve(users)
    props = {**BACKUP_PROPS, "qpid.ha-replication-formats": formats}
    backup = open_client(ctx, client_properties=props)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    return backup, users


def test_a_format_4_link_carries_the_users_and_the_backup_applies_them() -> None:
    backup, users = config_link("1-4")
    users.put_user(ClusterUser("shop", rabbit_sha256("pw"), ("administrator",)))
    users.set_permission(VhostPermission("shop", "/"))
    events = [decode_config_event(body) for body in bodies(backup)]
    assert [e["type"] for e in events] == ["snapshot", "users", "users", "users"]
    replica = BrokerReplicator(VirtualHost())
    replica.cluster_users = ClusterUsers()
    for event in events[1:]:
        replica.apply(event)
    assert replica.cluster_users.users == users.users
    assert replica.cluster_users.may_open("shop", "/")


def test_a_format_3_link_carries_no_users() -> None:
    backup, users = config_link("1-3")
    users.put_user(ClusterUser("shop", rabbit_sha256("pw")))
    events = [decode_config_event(body) for body in bodies(backup)]
    assert [e["type"] for e in events] == ["snapshot"]
