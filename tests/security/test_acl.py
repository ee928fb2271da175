"""The ACL file in Qpid's syntax (issue 13, item 3): parsing and decisions without I/O, and
the connection's checks with the sans-I/O AMQP pair (403 on the channel, on open)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from broker.amqp import framing
from broker.amqp.access import AccessControl, acl_request
from broker.security.acl import Acl, AclError
from tests.amqp.helpers import Client, make_context
from tests.security.test_hardening import Events

SAMPLE = """
# operators
group admins alice@QPID \\
      bob
group ops admins carol          # a group holding a group
acl allow ops all all
acl deny-log dave create queue name=tmp.* durable=true
acl allow dave create queue
acl allow all access virtualhost name=/
acl allow all publish exchange name=amq.topic routingkey=stock.#
acl allow-log all consume queue name=work
acl deny-log all all
"""


def test_parse_groups_and_rules() -> None:
    acl = Acl.parse(SAMPLE, "sample.acl")
    assert acl.members("admins") == {"alice", "bob"}
    assert acl.members("ops") == {"alice", "bob", "carol"}
    assert [r.line for r in acl.rules] == [6, 7, 8, 9, 10, 11, 12]
    assert acl.rules[1].text() == "acl deny-log dave create queue name=tmp.* durable=true"


@pytest.mark.parametrize(
    ("user", "action", "obj", "props", "allowed", "line"),
    [
        ("alice", "delete", "queue", {"name": "x"}, True, 6),
        ("alice@QPID", "purge", "queue", {"name": "x"}, True, 6),
        ("carol", "bind", "exchange", {"name": "x", "queuename": "q"}, True, 6),
        ("dave", "create", "queue", {"name": "tmp.1", "durable": "true"}, False, 7),
        ("dave", "create", "queue", {"name": "tmp.1", "durable": "false"}, True, 8),
        ("dave", "create", "queue", {"name": "other", "durable": "true"}, True, 8),
        ("dave", "access", "virtualhost", {"name": "/"}, True, 9),
        ("erin", "access", "virtualhost", {"name": "/other"}, False, 12),
        ("erin", "publish", "exchange", {"name": "amq.topic", "routingkey": "stock.a.b"}, True, 10),
        ("erin", "publish", "exchange", {"name": "amq.topic", "routingkey": "bond.x"}, False, 12),
        ("erin", "publish", "exchange", {"name": "amq.direct", "routingkey": "stock.x"}, False, 12),
        ("erin", "consume", "queue", {"name": "work"}, True, 11),
        ("erin", "consume", "queue", {"name": "works"}, False, 12),
        ("erin", "delete", "queue", {"name": "work"}, False, 12),
    ],
)
def test_first_matching_rule_decides(
    user: str, action: str, obj: str, props: dict[str, str], allowed: bool, line: int
) -> None:
    decision = Acl.parse(SAMPLE).decide(user, action, obj, props)
    assert (decision.allowed, decision.line) == (allowed, line)


def test_no_rule_matches_is_deny() -> None:
    acl = Acl.parse("acl allow alice all all\n")
    decision = acl.decide("bob", "consume", "queue", {"name": "q"})
    assert not decision.allowed and decision.line == 0 and decision.logged
    assert Acl.parse("").decide("alice", "access", "virtualhost", {"name": "/"}).allowed is False


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("acl allow\n", ":1: expected: acl PERMISSION"),
        ("acl permit all all\n", ":1: unknown permission 'permit'"),
        ("\nacl allow all eat queue\n", ":2: unknown action 'eat'"),
        ("acl allow all consume table\n", ":1: unknown object 'table'"),
        ("acl allow all consume queue name\n", ":1: expected property=value, got 'name'"),
        ("acl allow all consume queue colour=red\n", ":1: unknown property 'colour'"),
        ("group g\n", ":1: expected: group NAME MEMBER"),
        ("group all a b\n", ":1: 'all' cannot be a group name"),
        ("allow all all\n", ":1: expected 'acl' or 'group'"),
        ("# c\nacl allow all \\\n  consume queue \\\n  nope=1\n", ":2: unknown property 'nope'"),
    ],
)
def test_bad_acl_files(text: str, reason: str) -> None:
    with pytest.raises(AclError) as info:
        Acl.parse(text, "f.acl")
    assert str(info.value).startswith("f.acl" + reason)


names = st.sampled_from(["q1", "q2", "tmp.a", "work"])
users = st.sampled_from(["alice", "bob", "carol", "dave", "erin"])
actions = st.sampled_from(["create", "delete", "consume", "purge"])


@given(users, actions, names)
def test_a_final_allow_all_allows_what_no_earlier_deny_matches(
    user: str, action: str, name: str
) -> None:
    rules = "acl deny bob all queue name=tmp.*\nacl deny all purge all\nacl allow all all\n"
    decision = Acl.parse(rules).decide(user, action, "queue", {"name": name})
    denied = (user == "bob" and name.startswith("tmp.")) or action == "purge"
    assert decision.allowed is not denied


@given(users, actions, names)
def test_decisions_are_remembered_faithfully(user: str, action: str, name: str) -> None:
    acl = Acl.parse(SAMPLE)
    props = {"name": name, "durable": "true"}
    first = acl.decide(user, action, "queue", props)
    assert acl.decide(user, action, "queue", dict(props)) == first
    assert Acl.parse(SAMPLE).decide(user, action, "queue", props) == first


def test_methods_map_to_acl_requests() -> None:
    assert acl_request(commands.Queue.Declare(queue="q", durable=True)) == (
        "create", "queue", {"name": "q", "durable": "true", "exclusive": "false",
                            "autodelete": "false"},
    )  # fmt: skip
    assert acl_request(commands.Queue.Declare(queue="q", passive=True)) == (
        "access", "queue", {"name": "q"}
    )  # fmt: skip
    assert acl_request(commands.Queue.Bind(queue="q", exchange="x", routing_key="k")) == (
        "bind", "exchange", {"name": "x", "queuename": "q", "routingkey": "k"}
    )  # fmt: skip
    assert acl_request(commands.Basic.Get(queue="q")) == ("consume", "queue", {"name": "q"})
    assert acl_request(commands.Basic.Qos()) is None


# -- the connection asks the ACL -----------------------------------------------------------
RULES = """
acl allow all access virtualhost
acl allow guest create queue name=ok.*
acl allow guest consume queue name=ok.*
acl allow guest bind exchange name=amq.direct queuename=ok.*
acl allow guest publish exchange name=amq.direct routingkey=ok
acl deny-log all all
"""


def _client(rules: str = RULES) -> tuple[Client, Events]:
    ctx = make_context()
    events = Events()
    ctx.log = events
    ctx.acl = AccessControl(Acl.parse(rules), events)
    client = Client(ctx)
    return client, events


def _closed(client: Client, channel: int) -> commands.Channel.Close | None:
    for number, value in client.take():
        if number == channel and isinstance(value, commands.Channel.Close):
            return value
    return None


def test_each_action_is_checked_and_a_denial_closes_the_channel_with_403() -> None:
    client, events = _client()
    client.handshake()
    client.open_channel(1)
    cases = [
        (commands.Queue.Declare(queue="ok.1"), None),
        (commands.Queue.Declare(queue="no.1"), "create queue 'no.1'"),
        (commands.Queue.Bind(queue="ok.1", exchange="amq.direct", routing_key="ok"), None),
        (commands.Queue.Bind(queue="ok.1", exchange="amq.fanout"), "bind exchange 'amq.fanout'"),
        (commands.Queue.Unbind(queue="ok.1", exchange="amq.direct", routing_key="ok"), "unbind"),
        (commands.Basic.Consume(queue="ok.1", consumer_tag="c"), None),
        (commands.Queue.Purge(queue="ok.1"), "purge queue 'ok.1'"),
        (commands.Queue.Delete(queue="ok.1"), "delete queue 'ok.1'"),
        (commands.Exchange.Declare(exchange="x"), "create exchange 'x'"),
        (commands.Exchange.Delete(exchange="amq.direct"), "delete exchange"),
    ]
    number = 1
    for method, denied in cases:
        client.send(number, method)
        close = _closed(client, number)
        if denied is None:
            assert close is None, method
            continue
        assert close is not None and close.reply_code == 403, method
        assert denied in close.reply_text and "ACCESS_REFUSED" in close.reply_text
        client.send(number, commands.Channel.CloseOk())
        number += 1
        client.open_channel(number)
    assert client.conn.is_open  # denials are channel errors
    warnings = [f for level, event, f in events.lines if event == "acl_denied"]
    assert len(warnings) == 7 and warnings[0]["user"] == "guest"


def test_publish_is_checked_per_exchange_and_routing_key() -> None:
    client, _ = _client()
    client.handshake()
    client.open_channel(1)
    client.send(1, commands.Queue.Declare(queue="ok.p"))
    client.send(1, commands.Queue.Bind(queue="ok.p", exchange="amq.direct", routing_key="ok"))
    client.take()
    client.publish(1, b"yes", exchange="amq.direct", routing_key="ok")
    assert _closed(client, 1) is None
    assert client.ctx.vhost.queues["ok.p"].message_count == 1
    client.publish(1, b"no", exchange="amq.direct", routing_key="other")
    close = _closed(client, 1)
    assert close is not None and close.reply_code == 403 and (close.class_id, close.method_id) == (
        60, 40,
    )  # fmt: skip
    assert client.ctx.vhost.queues["ok.p"].message_count == 1
    assert client.conn.is_open


def test_vhost_access_denied_closes_the_connection_with_403() -> None:
    client, _ = _client("acl allow alice access virtualhost\nacl deny all all\n")
    client.send_bytes(framing.PROTOCOL_HEADER)
    client.send(0, commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"))
    client.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
    client.send(0, commands.Connection.Open(virtual_host="/"))
    close = client.expect(commands.Connection.Close)
    assert close.reply_code == 403 and "access virtualhost" in close.reply_text
    assert not client.conn.is_open


def test_replace_swaps_the_rules() -> None:
    client, _ = _client()
    control = client.ctx.acl
    assert control is not None
    client.handshake()
    client.open_channel(1)
    client.send(1, commands.Queue.Declare(queue="later"))
    assert _closed(client, 1) is not None
    control.replace(Acl.parse(RULES + "\n".join(["", "acl allow all create queue"])))
    control.replace(Acl.parse("acl allow all all\n"))
    client.send(1, commands.Channel.CloseOk())
    client.open_channel(2)
    client.send(2, commands.Queue.Declare(queue="later"))
    assert _closed(client, 2) is None and "later" in client.ctx.vhost.queues
