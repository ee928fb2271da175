"""Test certificates made with the openssl command: a CA, another CA, a server certificate
for 127.0.0.1/localhost, client certificates, and an expired server certificate.

``openssl ca`` (with a throw-away configuration and database) signs, because it can set any
validity dates: the expired certificate ran from 2020-01-01 to 2020-01-02.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = "openssl"
#: Every key is ECDSA P-256: an RSA-2048 key costs openssl 0.1-0.5 CPU s to find its primes
#: (seven keys a set, one set a module: 2.3 CPU s, 13 s of wall at load 17), a P-256 key
#: about 1 ms. What the tests use them for (handshakes, chains, dates, names, reloads) does
#: not depend on the key's type.
NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")

_CONFIG = """
[ca]
default_ca = testca
[testca]
dir = {dir}
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = anything
copy_extensions = copy
unique_subject = no
[anything]
commonName = supplied
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[server]
subjectAltName = IP:127.0.0.1,DNS:localhost
basicConstraints = CA:FALSE
[client]
basicConstraints = CA:FALSE
"""


def _run(*args: str) -> None:
    subprocess.run([OPENSSL, *args], check=True, capture_output=True, timeout=60)


@dataclass
class Ca:
    dir: Path
    name: str

    @property
    def cert(self) -> Path:
        return self.dir / f"{self.name}.pem"

    @property
    def key(self) -> Path:
        return self.dir / f"{self.name}.key"

    @classmethod
    def make(cls, dir: Path, name: str) -> Ca:
        dir.mkdir(parents=True, exist_ok=True)
        ca = cls(dir, name)
        _run("req", "-x509", *NEW_KEY, "-nodes", "-days", "30", "-subj",
             f"/CN={name}", "-keyout", str(ca.key), "-out", str(ca.cert))  # fmt: skip
        (dir / "index.txt").write_text("")
        (dir / "serial").write_text("1000\n")
        (dir / "openssl.cnf").write_text(_CONFIG.format(dir=dir))
        return ca

    def issue(
        self, name: str, cn: str, kind: str = "server", start: str | None = None,
        end: str | None = None,
    ) -> tuple[Path, Path]:  # fmt: skip
        """A certificate and key signed by this CA (``start``/``end``: YYYYMMDDHHMMSSZ)."""
        key, csr, cert = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
        _run("req", *NEW_KEY, "-nodes", "-subj", f"/CN={cn}", "-keyout",
             str(key), "-out", str(csr))  # fmt: skip
        dates = ["-startdate", start, "-enddate", end] if start and end else ["-days", "30"]
        _run("ca", "-batch", "-config", str(self.dir / "openssl.cnf"), "-cert", str(self.cert),
             "-keyfile", str(self.key), "-extensions", kind, "-extfile",
             str(self.dir / "openssl.cnf"), "-in", str(csr), "-out", str(cert), *dates)  # fmt: skip
        return cert, key


@dataclass
class Certs:
    ca: Ca
    other_ca: Ca
    server: tuple[Path, Path]
    expired: tuple[Path, Path]
    foreign: tuple[Path, Path]  #: a server certificate from the other CA
    alice: tuple[Path, Path]  #: a client certificate, CN=alice
    mallory: tuple[Path, Path]  #: a client certificate from the other CA


def make_certs(dir: Path) -> Certs:
    ca = Ca.make(dir / "ca", "test-ca")
    other = Ca.make(dir / "other", "other-ca")
    return Certs(
        ca=ca,
        other_ca=other,
        server=ca.issue("server", "localhost"),
        expired=ca.issue("expired", "localhost", start="20200101000000Z", end="20200102000000Z"),
        foreign=other.issue("foreign", "localhost"),
        alice=ca.issue("alice", "alice", kind="client"),
        mallory=other.issue("mallory", "alice", kind="client"),
    )
