"""The ACL on a real broker with pika (issue 13, item 3): a denial is 403 on the channel,
SIGHUP and ``qpid-ha acl reload`` reload the file, a bad file is refused (at start: exit 2
naming the line; on reload: the running ACL stays)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from common.polling import free_port, poll_until
from tests.broker_process import QPIDD, BrokerProcess

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))

BASE = """
acl allow all access virtualhost
acl allow guest create queue name=app.*
acl allow guest bind exchange name=amq.direct queuename=app.*
acl allow guest publish exchange name=amq.direct routingkey=app.#
acl allow guest consume queue name=app.*
acl deny-log all all
"""


def _connect(broker: BrokerProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def _declare(connection: pika.BlockingConnection, queue: str) -> int:
    """0 if declared, else the channel's reply code."""
    channel = connection.channel()
    try:
        channel.queue_declare(queue)
    except ChannelClosedByBroker as exc:
        return int(exc.reply_code)
    channel.close()
    return 0


def test_acl_on_a_real_broker(tmp_path: Path) -> None:
    acl = tmp_path / "qpidd.acl"
    acl.write_text(BASE)
    broker = BrokerProcess(tmp_path / "b", args=[f"--acl-file={acl}"]).start()
    try:
        connection = _connect(broker)
        assert _declare(connection, "app.q") == 0
        assert _declare(connection, "other") == 403
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_bind("app.q", "amq.direct", "app.key")
        channel.basic_publish("amq.direct", "app.key", b"allowed")
        with pytest.raises(ChannelClosedByBroker) as info:
            channel.basic_publish("amq.direct", "elsewhere", b"denied")
        assert info.value.reply_code == 403
        channel = connection.channel()
        _, _, body = channel.basic_get("app.q", auto_ack=True)
        assert body == b"allowed"
        assert connection.is_open

        # SIGHUP: the file now allows "other".
        acl.write_text("acl allow guest create queue name=other\n" + BASE)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        poll_until(lambda: _declare(connection, "other") == 0, 10, "the reloaded ACL")

        # qpid-ha acl reload, a bad file: refused, the running ACL stays.
        acl.write_text("acl allow guest eat queue\n")
        mgmt = f"guest/guest@127.0.0.1:{broker.mgmt_port}"
        bad = subprocess.run([QPID_HA, "-b", mgmt, "acl", "reload"], capture_output=True,
                             text=True, timeout=30, check=False)  # fmt: skip
        assert bad.returncode == 1 and "unknown action 'eat'" in bad.stderr
        assert f"{acl}:1" in bad.stderr
        assert _declare(connection, "other") == 0
        acl.write_text(BASE)
        good = subprocess.run([QPID_HA, "-b", mgmt, "acl", "reload"], capture_output=True,
                              text=True, timeout=30, check=False)  # fmt: skip
        assert good.returncode == 0 and "6 rules" in good.stdout, good.stderr
        assert _declare(connection, "other") == 403
        connection.close()

        # Vhost access denied: the connection is refused with 403.
        acl.write_text("acl deny guest access virtualhost\nacl allow all all\n")
        broker.proc.send_signal(signal.SIGHUP)

        def refused() -> bool:
            try:
                _connect(broker).close()
            except (ConnectionClosedByBroker, pika.exceptions.ProbableAccessDeniedError):
                return True
            return False

        poll_until(refused, 10, "vhost access refused")
    finally:
        broker.stop()
    events = [e["event"] for e in broker.events()]
    assert {"acl_denied", "acl_reloaded", "acl_reload_failed"} <= set(events)
    assert [e for e in broker.events() if e["level"] == "error"] == []


def test_bad_acl_file_at_start_is_exit_2(tmp_path: Path) -> None:
    acl = tmp_path / "bad.acl"
    acl.write_text("acl allow all all\nacl frobnicate all all\n")
    result = subprocess.run(
        [QPIDD, f"--port={free_port()}", "--mgmt-port=0", f"--acl-file={acl}"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert f"{acl}:2: unknown permission 'frobnicate'" in result.stderr
    assert "Traceback" not in result.stderr
