"""How the console reaches the agents' ZooKeeper (common.zk_access, --console-zk-auth and
--console-zk-ssl*): parsing, bad values as one line naming the option, never the password.
The real reads (TLS, digest, NoAuth, a wrong CA) are in tests/security/test_zk_tls.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.management.console.agents_view import zk_access
from broker.options import OptionsError, parse_options
from common.zk_access import ZkAccess, ZkDigest, check_tls_files, kazoo_options, parse_digest


def test_a_digest_from_the_value_or_a_file(tmp_path: Path) -> None:
    assert parse_digest("agent:s3cret:x", "--o") == ZkDigest("agent", "s3cret:x")
    (tmp_path / "auth").write_text("agent:from-file\nignored\n")
    assert parse_digest(f"@{tmp_path / 'auth'}", "--o") == ZkDigest("agent", "from-file")
    assert "from-file" not in repr(parse_digest(f"@{tmp_path / 'auth'}", "--o"))
    for bad, message in (
        ("agent", "--o: expected USER:PASSWORD"),
        (":pw", "--o: expected USER:PASSWORD"),
        ("@/nonexistent", "--o: cannot read '/nonexistent': FileNotFoundError"),
    ):
        with pytest.raises(ValueError) as caught:
            parse_digest(bad, "--o")
        assert str(caught.value) == message


def test_tls_files_must_be_there_and_a_certificate_needs_its_key(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    check_tls_files("p", str(ca), None, None)
    with pytest.raises(ValueError, match=r"^p-cert-file and p-key-file go together$"):
        check_tls_files("p", None, str(ca), None)
    with pytest.raises(ValueError, match=r"^p-ca-file: no such file '/nonexistent'$"):
        check_tls_files("p", "/nonexistent", None, None)


def test_kazoo_options() -> None:
    assert kazoo_options(ZkAccess()) == {}
    options = kazoo_options(ZkAccess(ZkDigest("u", "p"), tls=True, ca_file="ca.pem"))
    assert options["auth_data"] == [("digest", "u:p")]
    assert options["use_ssl"] and options["verify_certs"] and options["check_hostname"]
    assert (options["ca"], options["certfile"], options["keyfile"]) == ("ca.pem", None, None)


def test_the_brokers_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    options = parse_options([f"--console-zk-ssl-ca-file={ca}", "--console-zk-auth=u:pw"])
    assert zk_access(options) == ZkAccess(ZkDigest("u", "pw"), tls=True, ca_file=str(ca))
    assert "pw" not in repr(options).replace("console_zk_ssl", "")
    assert zk_access(parse_options(["--console-zk-ssl=yes"])).tls
    assert zk_access(parse_options([])) == ZkAccess()
    for argv, message in (
        (["--console-zk-auth=nocolon"], "console-zk-auth: expected USER:PASSWORD"),
        ([f"--console-zk-ssl-cert-file={ca}"], "console-zk-ssl-cert-file and"),
        (["--console-zk-ssl-ca-file=/nonexistent"], "no such file '/nonexistent'"),
    ):
        with pytest.raises(OptionsError, match=message):
            parse_options(argv)
