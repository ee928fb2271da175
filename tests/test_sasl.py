"""broker.security.sasl: PLAIN, AMQPLAIN and ANONYMOUS for connection.start-ok."""

from __future__ import annotations

import struct
from pathlib import Path

import amqp.sasl  # type: ignore[import-untyped]  # py-amqp, kombu's transport
import pika
import pika.spec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import encode

from broker.security import AuthenticationError, Authenticator, UserDatabase
from broker.security.passwords import hash_password
from broker.security.roles import Role
from broker.security.sasl import ANONYMOUS_USER


def amqplain(table: dict[str, object]) -> bytes:
    """A field table without its 4-byte length prefix, as AMQPLAIN clients send it."""
    return encode.field_table(table)[4:]  # type: ignore[arg-type]


@pytest.fixture
def auth() -> Authenticator:
    return Authenticator(UserDatabase.default(), auth_enabled=True)


@pytest.fixture
def open_auth() -> Authenticator:
    return Authenticator(UserDatabase.default(), auth_enabled=False)


# -- mechanisms -----------------------------------------------------------------------


def test_mechanisms(auth: Authenticator, open_auth: Authenticator) -> None:
    assert auth.mechanisms() == ["PLAIN", "AMQPLAIN"]
    assert open_auth.mechanisms() == ["PLAIN", "AMQPLAIN", "ANONYMOUS"]


# -- PLAIN ----------------------------------------------------------------------------


def test_plain(auth: Authenticator) -> None:
    assert auth.authenticate("PLAIN", b"\x00guest\x00guest") == "guest"
    assert auth.authenticate("PLAIN", b"guest\x00guest\x00guest") == "guest"


def test_plain_as_pika_sends_it(auth: Authenticator) -> None:
    start = pika.spec.Connection.Start(mechanisms=" ".join(auth.mechanisms()))
    mechanism, response = pika.PlainCredentials("guest", "guest").response_for(start)
    assert auth.authenticate(mechanism, response) == "guest"


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (b"\x00guest\x00wrong", "wrong user name or password for 'guest'"),
        (b"\x00nobody\x00guest", "wrong user name or password for 'nobody'"),
        (b"\x00guest\x00", "wrong user name or password"),
        (b"\x00\x00guest", "empty user name"),
        (b"guest\x00guest", "malformed"),
        (b"\x00guest\x00gu\x00est", "malformed"),
        (b"", "malformed"),
        (b"\x00gu\xffest\x00guest", "not UTF-8"),
        (b"admin\x00guest\x00guest", "authorization identity 'admin'"),
    ],
)
def test_plain_refused(auth: Authenticator, response: bytes, reason: str) -> None:
    with pytest.raises(AuthenticationError, match=reason) as info:
        auth.authenticate("PLAIN", response)
    assert "wrong\x00" not in str(info.value)


def test_error_messages_never_contain_the_password(auth: Authenticator) -> None:
    with pytest.raises(AuthenticationError) as info:
        auth.authenticate("PLAIN", b"\x00guest\x00s3cr3t")
    assert "s3cr3t" not in str(info.value)
    with pytest.raises(AuthenticationError) as info:
        auth.authenticate("AMQPLAIN", amqplain({"LOGIN": "guest", "PASSWORD": "s3cr3t"}))
    assert "s3cr3t" not in str(info.value)


# -- AMQPLAIN -------------------------------------------------------------------------


def test_amqplain(auth: Authenticator) -> None:
    response = amqplain({"LOGIN": "guest", "PASSWORD": "guest"})
    assert auth.authenticate("AMQPLAIN", response) == "guest"


def test_amqplain_as_py_amqp_sends_it(auth: Authenticator) -> None:
    response = amqp.sasl.AMQPLAIN("guest", "guest").start(None)
    assert auth.authenticate("AMQPLAIN", response) == "guest"


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (amqplain({"LOGIN": "guest", "PASSWORD": "nope"}), "wrong user name or password"),
        (amqplain({"LOGIN": "guest"}), "no PASSWORD"),
        (amqplain({"PASSWORD": "guest"}), "no LOGIN"),
        (amqplain({"LOGIN": 5, "PASSWORD": "guest"}), "no LOGIN string"),
        # pamqp reads a string that runs past the end as a shorter one.
        (b"\x05LOGINS\x00\x00\x00\x09guest", "no PASSWORD"),
        (b"\x05LOGINZ", "malformed"),  # unknown field type
        (b"\xff", "malformed"),
        (struct.pack(">I", 4) + b"abcd", "malformed"),  # a table *with* its length prefix
    ],
)
def test_amqplain_refused(auth: Authenticator, response: bytes, reason: str) -> None:
    with pytest.raises(AuthenticationError, match=reason):
        auth.authenticate("AMQPLAIN", response)


def test_amqplain_empty_table(auth: Authenticator) -> None:
    with pytest.raises(AuthenticationError, match="no LOGIN"):
        auth.authenticate("AMQPLAIN", b"")


# -- mechanisms that are not offered, and auth disabled ------------------------------


@pytest.mark.parametrize("mechanism", ["ANONYMOUS", "EXTERNAL", "plain", "", "CRAM-MD5"])
def test_unoffered_mechanisms(auth: Authenticator, mechanism: str) -> None:
    with pytest.raises(AuthenticationError, match="unsupported mechanism"):
        auth.authenticate(mechanism, b"\x00guest\x00guest")


def test_auth_disabled_accepts_anything(open_auth: Authenticator) -> None:
    assert open_auth.authenticate("ANONYMOUS", b"") == ANONYMOUS_USER == "anonymous"
    assert open_auth.authenticate("ANONYMOUS", b"trace info") == "anonymous"
    assert open_auth.authenticate("PLAIN", b"\x00alice\x00whatever") == "alice"
    assert open_auth.authenticate("PLAIN", b"\x00\x00") == "anonymous"
    response = amqplain({"LOGIN": "bob", "PASSWORD": "x"})
    assert open_auth.authenticate("AMQPLAIN", response) == "bob"


def test_auth_disabled_still_refuses_malformed(open_auth: Authenticator) -> None:
    with pytest.raises(AuthenticationError, match="malformed"):
        open_auth.authenticate("PLAIN", b"no separators")


@settings(deadline=None)  # an unknown user costs one slow (scrypt) hash
@given(st.binary(max_size=64), st.sampled_from(["PLAIN", "AMQPLAIN", "ANONYMOUS", "X"]))
def test_only_authentication_errors(response: bytes, mechanism: str) -> None:
    auth = Authenticator(UserDatabase.default(), auth_enabled=True)
    try:
        user = auth.authenticate(mechanism, response)
    except AuthenticationError:
        return
    assert user == "guest"


@settings(deadline=None)
@given(
    st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s),
    st.text(max_size=12).filter(lambda s: "\x00" not in s),
)
def test_any_user_and_password_round_trip(user: str, password: str) -> None:
    auth = Authenticator(UserDatabase.default(), auth_enabled=False)
    plain = b"\x00" + user.encode() + b"\x00" + password.encode()
    assert auth.authenticate("PLAIN", plain) == user
    assert auth.authenticate("AMQPLAIN", amqplain({"LOGIN": user, "PASSWORD": password})) == user


# -- the users file -------------------------------------------------------------------


def test_default_database() -> None:
    users = UserDatabase.default()
    assert list(users) == ["guest"]
    assert users.check("guest", "guest")
    assert not users.check("guest", "Guest")
    assert not users.check("nobody", "guest")


def test_users_file(tmp_path: Path) -> None:
    path = tmp_path / "users"
    alice, bob, ce = (hash_password(pw, log_n=10) for pw in ("wonder:land", "builder", "pässwörd"))
    path.write_text(
        f"# qpidd users\n\nalice:{alice}:monitoring\n  bob : {bob}  \n# carol:x\nçé:{ce}:\n",
        encoding="utf-8",
    )
    users = UserDatabase.load(path)
    assert sorted(users) == ["alice", "bob", "çé"]
    assert "carol" not in users and "guest" not in users
    assert users.check("alice", "wonder:land")  # the password may contain ':'
    assert users.check("bob", "builder")
    assert users.check("çé", "pässwörd")
    assert users.roles("alice") == {Role.MONITORING} and users.roles("bob") == frozenset()
    auth = Authenticator(users, auth_enabled=True)
    assert auth.authenticate("PLAIN", "\x00çé\x00pässwörd".encode()) == "çé"
    with pytest.raises(AuthenticationError):
        auth.authenticate("PLAIN", b"\x00guest\x00guest")


HASH = hash_password("x", log_n=10, salt=b"fixed-test-salt!")  # same ids on every worker


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"alice:{HASH}\nbob\n", ":2: expected name:hash:roles"),
        (":secret\n", ":1: expected name:hash:roles"),
        ("alice:\n", ":1: user 'alice' has no password hash"),
        ("alice:wonderland\n", ":1: user 'alice' has no password hash"),
        ("alice:$scrypt$ln=14$x$y\n", ":1: user 'alice': not a $scrypt$"),
        ("alice:$scrypt$ln=30,r=8,p=1$c2FsdHNhbHQ$" + "A" * 43 + "\n", ":1: user 'alice': scrypt"),
        (f"alice:{HASH}:root\n", ":1: user 'alice': unknown role 'root'"),
        (f"alice:{HASH}\n\nalice:{HASH}\n", ":3: user 'alice' is listed twice"),
    ],
)
def test_bad_users_file(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "users"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        UserDatabase.load(path)
    assert str(info.value).startswith(f"{path}{reason}")
    assert "wonderland" not in str(info.value)  # a plain-text password is never echoed


def test_unreadable_users_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read users file .*missing"):
        UserDatabase.load(tmp_path / "missing")
    binary = tmp_path / "binary"
    binary.write_bytes(b"a:\xff\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        UserDatabase.load(binary)


def test_invalid_database_values() -> None:
    with pytest.raises(ValueError):
        UserDatabase.from_passwords({"": "x"})
    with pytest.raises(ValueError):
        UserDatabase.from_passwords({"a": ""})
    assert "guest" not in repr(UserDatabase.from_passwords({"u": "guest"}))
