"""TLS (issue 13, item 1) with real clients: pika and aio-pika over AMQPS unchanged, a good
certificate, an expired one, one from another CA, mutual TLS with SASL EXTERNAL, a refused
client certificate, certificates reloaded on SIGHUP, and the management API over HTTPS."""

from __future__ import annotations

import asyncio
import http.client
import shutil
import signal
import ssl
from pathlib import Path

import aio_pika
import pika
import pytest

from broker.options import OptionsError, parse_options
from common.polling import free_port, poll_until
from tests.broker_process import BrokerProcess
from tests.security.certs import Certs, make_certs
from tests.security.users import write_users


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


class TlsBroker:
    def __init__(self, workdir: Path, certs: Certs, *extra: str, cert: tuple[Path, Path]) -> None:
        self.ssl_port = free_port()
        self.process = BrokerProcess(
            workdir,
            args=[
                f"--ssl-port={self.ssl_port}",
                f"--ssl-cert-file={cert[0]}",
                f"--ssl-key-file={cert[1]}",
                f"--ssl-ca-file={certs.ca.cert}",
                *extra,
            ],
        )

    def __enter__(self) -> TlsBroker:
        self.process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stop()


def client_context(ca: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def pika_params(
    port: int, context: ssl.SSLContext, credentials: pika.credentials.VALID_TYPES | None = None
) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        "localhost",
        port,
        credentials=credentials or pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(context, "localhost"),
        connection_attempts=1,
        socket_timeout=5,
    )


def pika_round_trip(params: pika.ConnectionParameters) -> bytes:
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.queue_declare("tls.q")
        channel.basic_publish("", "tls.q", b"over TLS")
        _, _, body = channel.basic_get("tls.q", auto_ack=True)
        return bytes(body or b"")
    finally:
        connection.close()


def handshake_fails(params: pika.ConnectionParameters) -> bool:
    try:
        pika.BlockingConnection(params).close()
    except (pika.exceptions.AMQPConnectionError, ssl.SSLError, OSError):
        return True
    return False


def test_pika_and_aio_pika_over_tls(tmp_path: Path, certs: Certs) -> None:
    with TlsBroker(tmp_path / "b", certs, cert=certs.server) as broker:
        context = client_context(certs.ca.cert)
        poll_until(lambda: not handshake_fails(pika_params(broker.ssl_port, context)), 10)
        assert pika_round_trip(pika_params(broker.ssl_port, context)) == b"over TLS"

        async def aio() -> bytes:
            connection = await aio_pika.connect(
                f"amqps://guest:guest@localhost:{broker.ssl_port}/", ssl_context=context
            )
            async with connection:
                channel = await connection.channel()
                queue = await channel.declare_queue("tls.aio")
                await channel.default_exchange.publish(aio_pika.Message(b"aio"), "tls.aio")
                message = await queue.get(timeout=5)
                await message.ack()
                return message.body

        assert asyncio.run(aio()) == b"aio"
        # A client that trusts another CA refuses the broker's certificate.
        assert handshake_fails(pika_params(broker.ssl_port, client_context(certs.other_ca.cert)))
        # The plain port still serves (beside TLS).
        pika.BlockingConnection(pika.URLParameters(broker.process.url)).close()
        opened = [e for e in broker.process.events() if e["event"] == "broker_started"]
        assert opened[0]["ssl_port"] == broker.ssl_port


@pytest.mark.parametrize("which", ["expired", "foreign"])
def test_expired_or_foreign_server_certificates_are_refused(
    tmp_path: Path, certs: Certs, which: str
) -> None:
    cert = certs.expired if which == "expired" else certs.foreign
    with TlsBroker(tmp_path / "b", certs, cert=cert) as broker:
        params = pika_params(broker.ssl_port, client_context(certs.ca.cert))
        assert handshake_fails(params)
        context = client_context(certs.ca.cert)
        with (
            pytest.raises(ssl.SSLCertVerificationError) as info,
            context.wrap_socket(
                __import__("socket").create_connection(("127.0.0.1", broker.ssl_port), 5),
                server_hostname="localhost",
            ),
        ):
            pass
        expected = "certificate has expired" if which == "expired" else "unable to get local"
        assert expected in str(info.value)


def test_mutual_tls_and_external(tmp_path: Path, certs: Certs) -> None:
    users = write_users(tmp_path / "users", {"guest": "guest", "alice": "not-used"})
    with TlsBroker(
        tmp_path / "b", certs, f"--sasl-users={users}", "--ssl-require-client-authentication=yes",
        cert=certs.server,
    ) as broker:  # fmt: skip
        port = broker.ssl_port
        external = pika.credentials.ExternalCredentials()
        with_cert = pika_params(port, client_context(certs.ca.cert, certs.alice), external)
        assert pika_round_trip(with_cert) == b"over TLS"
        # No client certificate, or one from another CA: the TLS handshake fails.
        assert handshake_fails(pika_params(port, client_context(certs.ca.cert)))
        assert handshake_fails(
            pika_params(port, client_context(certs.ca.cert, certs.mallory), external)
        )
        opened = [e for e in broker.process.events() if e["event"] == "connection_opened"]
        assert [e["user"] for e in opened] == ["alice"]


def test_certificates_reload_on_sighup_and_https_management(tmp_path: Path, certs: Certs) -> None:
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "server.pem", live / "server.key"
    shutil.copy(certs.server[0], cert)
    shutil.copy(certs.server[1], key)
    with TlsBroker(tmp_path / "b", certs, "--mgmt-ssl=yes", cert=(cert, key)) as broker:
        context = client_context(certs.ca.cert)
        https = http.client.HTTPSConnection(
            "localhost", broker.process.mgmt_port, context=context, timeout=5
        )
        https.request("GET", "/api/status")
        assert https.getresponse().status == 200
        https.close()
        assert not handshake_fails(pika_params(broker.ssl_port, context))
        # Replace the files with the other CA's certificate: after SIGHUP new handshakes
        # present it (and a client trusting only test-ca refuses it).
        shutil.copy(certs.foreign[0], cert)
        shutil.copy(certs.foreign[1], key)
        assert broker.process.proc is not None
        broker.process.proc.send_signal(signal.SIGHUP)
        poll_until(lambda: handshake_fails(pika_params(broker.ssl_port, context)), 10)
        other = client_context(certs.other_ca.cert)
        assert not handshake_fails(pika_params(broker.ssl_port, other))
        # A broken file: the running certificate stays.
        cert.write_text("not a certificate\n")
        broker.process.proc.send_signal(signal.SIGHUP)
        poll_until(
            lambda: any(e["event"] == "tls_reload_failed" for e in broker.process.events()), 10
        )
        assert not handshake_fails(pika_params(broker.ssl_port, other))


def test_half_a_tls_configuration_is_exit_2(tmp_path: Path, certs: Certs) -> None:
    import subprocess

    from tests.broker_process import QPIDD

    for args, reason in [
        ([f"--ssl-cert-file={certs.server[0]}"], "ssl-cert-file and ssl-key-file go together"),
        (["--ssl-require-client-authentication=yes"], "needs ssl-cert-file"),
        (
            [f"--ssl-cert-file={certs.server[0]}", f"--ssl-key-file={certs.alice[1]}"],
            "cannot use certificate",
        ),
        (["--mgmt-ssl=yes"], "mgmt-ssl=yes needs ssl-cert-file"),
    ]:
        result = subprocess.run(
            [QPIDD, f"--port={free_port()}", "--mgmt-port=0", *args],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert result.returncode == 2, (args, result.stderr)
        assert reason in result.stderr and "Traceback" not in result.stderr


def test_kombu_over_tls(tmp_path: Path, certs: Certs) -> None:
    from kombu.connection import Connection as KombuConnection

    with TlsBroker(tmp_path / "b", certs, cert=certs.server) as broker:
        url = f"amqp://guest:guest@localhost:{broker.ssl_port}//"
        ssl_options = {"ca_certs": str(certs.ca.cert), "cert_reqs": ssl.CERT_REQUIRED,
                       "server_hostname": "localhost"}  # fmt: skip
        with KombuConnection(url, ssl=ssl_options, connect_timeout=5) as connection:
            queue = connection.SimpleQueue("tls.kombu")
            queue.put({"over": "tls"})
            message = queue.get(timeout=5)
            assert message.payload == {"over": "tls"}
            message.ack()
            queue.close()


def test_qpid_ha_reaches_an_https_management_api(tmp_path: Path, certs: Certs) -> None:
    import os
    import subprocess
    import sys

    qpid_ha = str(Path(sys.executable).with_name("qpid-ha"))
    with TlsBroker(tmp_path / "b", certs, "--mgmt-ssl=yes", cert=certs.server) as broker:
        port = broker.process.mgmt_port
        env = {**os.environ, "QPID_HA_SSL_CA_FILE": str(certs.ca.cert)}

        def run(address: str, ca: Path) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [qpid_ha, "-b", address, "ping"], capture_output=True, text=True, timeout=30,
                check=False, env={**env, "QPID_HA_SSL_CA_FILE": str(ca)},
            )  # fmt: skip

        ok = run(f"guest/guest@ssl:localhost:{port}", certs.ca.cert)
        assert ok.returncode == 0, ok.stderr
        other = run(f"guest/guest@ssl:localhost:{port}", certs.other_ca.cert)
        assert other.returncode == 3 and "certificate verify failed" in other.stderr
        plain = run(f"guest/guest@localhost:{port}", certs.ca.cert)
        assert plain.returncode == 3  # plain HTTP to an HTTPS port: not answered


def test_require_encryption_refuses_plain_amqp(tmp_path: Path, certs: Certs) -> None:
    """``--require-encryption``: a plain AMQP client is refused at login with 530 and the
    reason; TLS clients carry on. Without TLS configured, or with a plain ha-brokers-url
    address, it is a usage error."""
    with TlsBroker(tmp_path / "b", certs, "--require-encryption=yes", cert=certs.server) as tls:
        plain = pika.ConnectionParameters(
            "127.0.0.1", tls.process.port, connection_attempts=1, socket_timeout=5
        )
        with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
            pika.BlockingConnection(plain)
        assert "encryption required" in repr(refused.value), repr(refused.value)
        context = client_context(certs.ca.cert)
        assert pika_round_trip(pika_params(tls.ssl_port, context)) == b"over TLS"
        events = tls.process.events()
    refusals = [e for e in events if e["event"] == "connection_refused_unencrypted"]
    assert len(refusals) == 1 and refusals[0]["level"] == "warning"
    assert not [e for e in events if e["event"] == "authentication_failed"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "require-encryption needs ssl-cert-file and ssl-key-file"),
        (
            [
                "--ha-cluster=yes",
                "--ha-brokers-url=ssl:127.0.0.1:5671,tcp:127.0.0.1:5672",
                "--ssl-cert-file=c.pem",
                "--ssl-key-file=k.pem",
            ],
            "ha-brokers-url address 127.0.0.1:5672 is not ssl:",
        ),
    ],
)
def test_require_encryption_without_tls_is_a_usage_error(args: list[str], message: str) -> None:
    with pytest.raises(OptionsError) as error:
        parse_options(["--require-encryption=yes", *args])
    assert message in str(error.value)
