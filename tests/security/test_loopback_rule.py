"""The loopback rule of the authenticator, without sockets."""

from __future__ import annotations

import pytest

from broker.security.sasl import AuthenticationError, Authenticator, UserDatabase, is_loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("10.77.1.2", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("0.0.0.0", False),
        ("localhost", False),  # names are not addresses: the transport gives addresses
        ("", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_loopback_users_only_from_loopback() -> None:
    users = UserDatabase.from_passwords({"guest": "guest", "alice": "pw"})
    auth = Authenticator(users, True)
    assert auth.authenticate("PLAIN", b"\0guest\0guest", "127.0.0.1") == "guest"
    assert auth.authenticate("PLAIN", b"\0guest\0guest", None) == "guest"  # in-process
    with pytest.raises(AuthenticationError, match="loopback"):
        auth.authenticate("PLAIN", b"\0guest\0guest", "10.0.0.5")
    assert auth.authenticate("PLAIN", b"\0alice\0pw", "10.0.0.5") == "alice"
    # A wrong password from afar says "wrong password", not that the user is a loopback user.
    with pytest.raises(AuthenticationError, match="wrong"):
        auth.authenticate("PLAIN", b"\0guest\0nope", "10.0.0.5")
    opened = Authenticator(users, True, loopback_users=frozenset())
    assert opened.authenticate("PLAIN", b"\0guest\0guest", "10.0.0.5") == "guest"
