"""common.url: the broker URL grammar of seed 001 (section 1.12.3, footnote [a])."""

from __future__ import annotations

import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from common.url import (
    SCHEMES,
    Address,
    BrokerUrl,
    format_address,
    format_url,
    parse_address,
    parse_url,
)

# -- examples from the seed ----------------------------------------------------------


def test_plain_host_list() -> None:
    url = parse_url("node1,node2,node3")
    assert url == BrokerUrl((Address("node1"), Address("node2"), Address("node3")))
    assert url.user is None and url.password is None
    assert [str(a) for a in url.addresses] == ["node1:5672", "node2:5672", "node3:5672"]


def test_ip_list() -> None:
    url = parse_url("20.0.20.1,20.0.20.2,20.0.20.3")
    assert [a.host for a in url.addresses] == ["20.0.20.1", "20.0.20.2", "20.0.20.3"]
    assert {a.port for a in url.addresses} == {5672}
    assert {a.scheme for a in url.addresses} == {"tcp"}


def test_full_form_with_credentials_and_schemes() -> None:
    text = "amqp:guest/guest@tcp:host:5672,ssl:h2:5671"
    url = parse_url(text)
    assert url == BrokerUrl(
        (Address("host", 5672, "tcp"), Address("h2", 5671, "ssl")), "guest", "guest"
    )
    assert str(url) == text
    assert format_url(url) == text


def test_canonical_form_is_explicit() -> None:
    assert str(parse_url("node1,node2:5673")) == "amqp:tcp:node1:5672,tcp:node2:5673"
    assert str(parse_url("rdma:n1")) == "amqp:rdma:n1:5672"


def test_default_port() -> None:
    url = parse_url("a,b:1", default_port=5673)
    assert [a.port for a in url.addresses] == [5673, 1]


def test_user_without_password() -> None:
    url = parse_url("amqp:bob@h")
    assert (url.user, url.password) == ("bob", None)
    assert str(url) == "amqp:bob@tcp:h:5672"


def test_password_may_contain_slash_colon_comma() -> None:
    url = parse_url("u/p:a/s,s@h1,h2")
    assert (url.user, url.password) == ("u", "p:a/s,s")
    assert [a.host for a in url.addresses] == ["h1", "h2"]


def test_empty_password() -> None:
    url = parse_url("u/@h")
    assert url.password == ""
    assert parse_url(str(url)) == url


def test_case_insensitive_prefix_and_scheme() -> None:
    assert parse_url("AMQP:SSL:h:1") == BrokerUrl((Address("h", 1, "ssl"),))


def test_whitespace_around_is_ignored() -> None:
    assert parse_url("  node1:5672\n") == parse_url("node1:5672")


def test_ipv6() -> None:
    url = parse_url("[::1],ssl:[fe80::1]:5671")
    assert url.addresses == (Address("::1"), Address("fe80::1", 5671, "ssl"))
    assert str(url.addresses[0]) == "[::1]:5672"
    assert str(url) == "amqp:tcp:[::1]:5672,ssl:[fe80::1]:5671"


def test_address_str_and_format_address() -> None:
    assert str(Address("h", 1)) == "h:1"
    assert format_address(Address("h", 1, "ssl")) == "ssl:h:1"


def test_host_named_like_a_scheme() -> None:
    url = BrokerUrl((Address("amqp", 1), Address("tcp", 2), Address("ssl", 3, "ssl")))
    assert str(url) == "amqp:tcp:amqp:1,tcp:tcp:2,ssl:ssl:3"
    assert parse_url(str(url)) == url
    # The short form is ambiguous, read as qpid reads it: the prefix/scheme wins.
    assert parse_url("amqp:5673") == BrokerUrl((Address("5673"),))
    assert parse_url("tcp:5673") == BrokerUrl((Address("5673"),))


def test_password_is_redacted_and_not_in_repr() -> None:
    url = parse_url("amqp:u/secret@h")
    assert "secret" not in repr(url)
    assert url.redacted() == "amqp:u/***@tcp:h:5672"
    assert parse_url("h").redacted() == "amqp:tcp:h:5672"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("amqp:", "no address"),
        ("h:abc", "invalid port 'abc'"),
        ("h:", "invalid port ''"),
        ("h:0", "outside 1..65535"),
        ("h:65536", "outside 1..65535"),
        ("h:123456", "invalid port"),
        ("h:-1", "invalid port"),
        ("foo:h:5672", "unknown scheme 'foo'"),
        ("tcp:", "empty host"),
        ("tcp::5672", "empty host"),
        (":5672", "empty host"),
        ("h,,i", "empty address"),
        ("h,", "empty address"),
        (",h", "empty address"),
        ("h x", "invalid host"),
        ("h!", "invalid host"),
        ("h/x", "invalid host"),
        ("@h", "empty user"),
        ("/pw@h", "empty user"),
        ("u@", "no address"),
        ("a b@h", "invalid user"),
        ("u/p w@h", "password"),
        ("::1", "brackets"),
        ("[::1", "missing ']'"),
        ("[]:5672", "invalid IPv6"),
        ("[1.2.3.4]", "invalid IPv6"),
        ("[::g]", "invalid IPv6"),
        ("[::1]x", "unexpected 'x'"),
        ("u@h@i", "invalid host"),
    ],
)
def test_bad_urls_name_the_value(text: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_url(text)
    message = str(info.value)
    assert message.startswith(f"invalid broker URL {text!r}")
    assert reason in message


def test_bad_default_port() -> None:
    with pytest.raises(ValueError, match="default port"):
        parse_url("h", default_port=0)


# -- parse_address (the CLI's -b) -----------------------------------------------------


def test_parse_address() -> None:
    assert parse_address("node1") == Address("node1", 5672)
    assert parse_address("node1:5673") == Address("node1", 5673)
    assert parse_address("node1", default_port=8672) == Address("node1", 8672)
    assert parse_address("[::1]:1") == Address("::1", 1)
    assert parse_address("ssl:h:1") == Address("h", 1, "ssl")


@pytest.mark.parametrize("text", ["", "h:0", "h:x", "a,b", "u@h", "::1"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_address(text)
    assert str(info.value).startswith(f"invalid broker address {text!r}")


# -- the values validate themselves ---------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Address(""),
        lambda: Address("h", 0),
        lambda: Address("h", 70000),
        lambda: Address("h", 1, "http"),
        lambda: Address("[::1]"),
        lambda: Address("::g"),
        lambda: Address("a b"),
        lambda: BrokerUrl(()),
        lambda: BrokerUrl((Address("h"),), None, "pw"),
        lambda: BrokerUrl((Address("h"),), "a:b"),
        lambda: BrokerUrl((Address("h"),), "u", "a@b"),
    ],
)
def test_invalid_values_are_refused(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


# -- round trips ----------------------------------------------------------------------

_LABEL = st.text(alphabet=string.ascii_letters + string.digits + "-._~", min_size=1, max_size=12)
_HOSTS = st.one_of(
    _LABEL,
    st.sampled_from(["amqp", "tcp", "ssl", "rdma", "AMQP", "Tcp"]),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
)
_PORTS = st.integers(min_value=1, max_value=65535)
_ADDRESSES = st.builds(Address, host=_HOSTS, port=_PORTS, scheme=st.sampled_from(SCHEMES))
_USER = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp"), exclude_characters="/@:,"
    ),
    min_size=1,
    max_size=10,
).filter(lambda s: s == "".join(s.split()))
_PASSWORD = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp"), exclude_characters="@"
    ),
    max_size=10,
).filter(lambda s: s == "".join(s.split()))


@st.composite
def broker_urls(draw: st.DrawFn) -> BrokerUrl:
    addresses = tuple(draw(st.lists(_ADDRESSES, min_size=1, max_size=4)))
    user = draw(st.none() | _USER)
    password = None if user is None else draw(st.none() | _PASSWORD)
    return BrokerUrl(addresses, user, password)


@given(broker_urls())
def test_parse_of_format_is_identity(url: BrokerUrl) -> None:
    assert parse_url(format_url(url)) == url
    assert parse_url(str(url)) == url


@st.composite
def url_texts(draw: st.DrawFn) -> str:
    """Canonical URL text, built from the grammar rather than from format_url."""
    addrs = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        host = draw(_HOSTS)
        if ":" in host:
            host = f"[{host}]"
        addrs.append(f"{draw(st.sampled_from(SCHEMES))}:{host}:{draw(_PORTS)}")
    credentials = ""
    user = draw(st.none() | _USER)
    if user is not None:
        password = draw(st.none() | _PASSWORD)
        credentials = user + ("" if password is None else "/" + password) + "@"
    return "amqp:" + credentials + ",".join(addrs)


@given(url_texts())
def test_format_of_parse_is_identity(text: str) -> None:
    assert format_url(parse_url(text)) == text


@given(url_texts())
def test_short_forms_mean_the_same(text: str) -> None:
    """Dropping "amqp:", "tcp:" and ":5672" does not change the meaning.

    Except for a host named like a scheme or "amqp": "amqp:5673" is the host "5673" and
    "tcp:5673" too, as in qpid. The canonical form (always with schemes) has no such trap.
    """
    url = parse_url(text)
    assume(all(a.host.lower() not in {"amqp", *SCHEMES} for a in url.addresses))
    short = ",".join(
        ("" if a.scheme == "tcp" else a.scheme + ":")
        + a.host_text
        + ("" if a.port == 5672 else f":{a.port}")
        for a in url.addresses
    )
    if url.user is not None:
        creds = url.user + ("" if url.password is None else "/" + url.password)
        short = creds + "@" + short
    assert parse_url(short) == url


@given(st.text(max_size=30))
def test_parse_only_raises_value_error(text: str) -> None:
    try:
        url = parse_url(text)
    except ValueError as exc:
        assert repr(text) in str(exc)
    else:
        assert parse_url(str(url)) == url
