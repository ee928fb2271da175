"""The replication format of a link (broker.ha.link_format): announced by both sides,
chosen the same by both, refused with one line when there is none in common.

- sans-I/O: the choice from connection properties, the refusal's text, the codec of format 1
  (release 0.1.0's wire: the functions of broker.ha.wire, so batches are byte for byte
  what they were);
- the primary's admission (a HaBroker fed frames): a backup of no common format, or of no
  announcement (a build before 0.1.0), is closed with 540 NOT_IMPLEMENTED whose text names
  both ranges; an admin connection needs none;
- real brokers: a backup forced to speak only format 99 (the test-only environment
  variable) stays joining; each side logs ``ha_link_format_refused`` once, not at every
  redial; /api/ha shows the refusal as the backup's link_error.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from broker.core.errors import ReplyCode
from broker.ha import wire
from broker.ha.link_format import CODECS, NoCommonFormat, announced, codec_of, link_format
from broker.ha.names import FORMATS_PROPERTY
from common.formats import FormatRange
from common.polling import poll_until
from common.version import REPLICATION_FORMATS, TEST_REPLICATION_FORMATS_ENV
from tests.drill.log_schema import problems
from tests.ha.cluster import Cluster
from tests.ha.test_ha_broker import ha_broker, open_connection

ONE = FormatRange(1, 1)


def test_the_link_uses_the_highest_format_both_speak() -> None:
    assert link_format(ONE, {FORMATS_PROPERTY: "1-1"}, "backup b") == 1
    assert link_format(ONE, {FORMATS_PROPERTY: b"1-7"}, "backup b") == 1
    assert announced({}) is None


@pytest.mark.parametrize(
    ("announcement", "words"),
    [
        ("99-99", "backup b replication format 99: upgrade this broker"),
        (None, "backup b announced none (a build before release 0.1.0)"),
        ("nine", "backup b announced bad format range 'nine'"),
    ],
)
def test_no_common_format_is_one_line(announcement: str | None, words: str) -> None:
    properties: dict[str, Any] = {} if announcement is None else {FORMATS_PROPERTY: announcement}
    with pytest.raises(NoCommonFormat) as info:
        link_format(ONE, properties, "backup b")
    assert words in str(info.value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 230  # fits a reply text


def test_format_1_is_the_wire_of_release_0_1_0() -> None:
    assert FormatRange(1, 4) == REPLICATION_FORMATS and set(CODECS) == {1, 2, 3, 4}
    codec = codec_of(1)
    assert codec.encode_config_event is wire.encode_config_event
    assert codec.decode_config_event is wire.decode_config_event
    assert codec.decode_batch is wire.decode_batch
    assert codec.queue_stream("q") == ("qpid.ha-queue:q", {})


def test_format_2_streams_batches_as_format_1_does() -> None:
    """The publish path is the same in both formats: only configuration events and the
    stream's name differ."""
    codec = codec_of(2)
    assert codec.decode_batch is wire.decode_batch
    assert codec.queue_stream("q" * 255) == ("qpid.ha-queue", {"qpid.ha-queue": "q" * 255})
    assert link_format(REPLICATION_FORMATS, {FORMATS_PROPERTY: "1-1"}, "backup b") == 1
    assert link_format(REPLICATION_FORMATS, {FORMATS_PROPERTY: "1-2"}, "backup b") == 2


def test_format_3_is_format_2_with_the_member_lease() -> None:
    """Format 3 adds the lease stream; its events, streams and batches are format 2's."""
    two, three = codec_of(2), codec_of(3)
    assert not two.member_lease and three.member_lease
    assert three.encode_config_event is two.encode_config_event
    assert three.decode_batch is two.decode_batch
    assert three.queue_stream("q") == two.queue_stream("q")
    assert link_format(REPLICATION_FORMATS, {FORMATS_PROPERTY: "1-3"}, "backup b") == 3


def test_the_primary_refuses_a_backup_of_no_common_format(tmp_path: Path) -> None:
    ha, _ = ha_broker(tmp_path)
    asyncio_run_promote(ha)
    assert ha.server_properties()[FORMATS_PROPERTY] == "1-4"
    link = {"qpid.ha-backup": True, "qpid.ha-url": "n3:5672"}
    for announcement, words in [
        ("99-99", "backup n3:5672 replication format 99"),
        (None, "backup n3:5672 announced none"),
    ]:
        properties = (
            dict(link) if announcement is None else {**link, FORMATS_PROPERTY: announcement}
        )
        close = open_connection(ha, properties).expect(commands.Connection.Close)
        assert close.reply_code == ReplyCode.NOT_IMPLEMENTED
        assert close.reply_text.startswith("NOT_IMPLEMENTED - no common replication format: ")
        assert words in close.reply_text and "this broker speaks replication formats 1-4" in (
            close.reply_text
        )
    ok = open_connection(ha, {**link, FORMATS_PROPERTY: "1-4"})
    ok.expect(commands.Connection.OpenOk)
    admin = open_connection(ha, {"qpid.ha-admin": True})  # agents, qpid-ha: no formats asked
    admin.expect(commands.Connection.OpenOk)


def asyncio_run_promote(ha: Any) -> None:
    asyncio.run(ha.promote(epoch=1))


def format_refusals(cluster: Cluster, i: int) -> list[dict[str, Any]]:
    events = cluster.brokers[i].events()
    return [e for e in events if e.get("event") == "ha_link_format_refused"]


def test_a_backup_of_an_unknown_format_is_refused_with_one_line(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2)
    cluster.brokers[1].env = {TEST_REPLICATION_FORMATS_ENV: "99-99"}
    try:
        cluster.start()
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        primary = f"127.0.0.1:{cluster.ports[0]}"

        def refused_often() -> dict[str, Any] | None:
            error = cluster.ha(1)["link_error"]
            if not error or error["address"] != primary or error["count"] < 5:
                return None
            # the primary's refusals, not the dials before the promotion (their
            # connection.start said "not a primary (joining)")
            return None if "not a primary" in error["reason"] else dict(error)

        started = time.monotonic()
        error = poll_until(refused_often, 15, "broker 1 refused 5 times by the primary")
        elapsed = time.monotonic() - started
        assert "no common replication format" in error["reason"], error
        assert cluster.state(1) == "joining"
        # redials are paced by link-maintenance-interval (0.1 s here), never a tight loop
        assert error["count"] <= 20 * (elapsed + 1), (error, elapsed)

        [backup_line] = format_refusals(cluster, 1)  # one line for the same refusal
        assert backup_line["level"] == "warning" and backup_line["address"] == primary
        assert (
            "NOT_IMPLEMENTED - no common replication format: this broker speaks"
            in (backup_line["reason"])
        )
        assert "replication format 99: upgrade this broker" in backup_line["reason"]
        assert problems(backup_line) == []
        [primary_line] = format_refusals(cluster, 0)
        assert primary_line["level"] == "warning" and problems(primary_line) == []
        assert primary_line["reason"].startswith(
            "no common replication format: this broker speaks replication formats 1-4, backup "
        )
        for i in (0, 1):
            assert not [e for e in cluster.brokers[i].events() if "traceback" in str(e).lower()]
            assert cluster.brokers[i].alive()
    finally:
        cluster.stop()


def test_a_primary_remembers_the_backups_it_refuses_until_one_links_or_stops_dialling() -> None:
    from broker.ha.admission import REFUSED_FOR, RefusedLinks

    refused = RefusedLinks()
    refused.dialled("127.0.0.1:5673", "no common replication format: ...", 10.0)
    refused.dialled("127.0.0.1:5673", "no common replication format: ...", 11.0)
    refused.dialled("127.0.0.1:5674", None, 11.0)  # admitted: nothing to say
    [view] = refused.views(11.5, 1_000_000.0)
    assert (view["url"], view["count"]) == ("127.0.0.1:5673", 2)
    assert view["since"] == "1970-01-12T13:46:38.500000Z"  # the first refusal, wall clock
    refused.dialled("127.0.0.1:5673", None, 12.0)  # a link admitted: forgotten
    assert refused.views(12.0, 0.0) == []
    refused.dialled("127.0.0.1:5673", "no common replication format: ...", 13.0)
    assert refused.views(13.0 + REFUSED_FOR + 0.1, 0.0) == []  # it stopped dialling
