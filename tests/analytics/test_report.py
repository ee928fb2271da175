"""The report's rules without Spark: slowest fail-overs first, a single sample visible in
the CDF, HA/agent/drill rows in the line counts, "what to change" from a tuning row, and
a page whose wide tables scroll in their own box."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analytics import advice, plots, report


def failover(epoch: int, total: float | None, config: str = "c", **f: Any) -> dict[str, Any]:
    return {"kind": "failover", "cluster": "x", "epoch": epoch, "config": config,
            "scenario": "s", "failover_ms": total, "failure_us": 1_800_000_000_000_000 + epoch,
            **f}  # fmt: skip


def test_slowest_first_whatever_the_order_in_time() -> None:
    rows = [failover(2, 500.0), failover(3, 4990.0), failover(4, None, client_outage_ms=900.0),
            failover(5, 700.0)]  # fmt: skip
    assert [r["epoch"] for r in plots.slowest(rows, limit=3)] == [3, 4, 5]
    assert plots.bar_label(rows[1]) == "c | x e3"


def test_single_sample_cdf_is_a_visible_rise() -> None:
    assert plots.cdf_points([4990.0]) == ([4990.0, 4990.0], [0.0, 1.0])
    assert plots.cdf_points([3.0, 1.0]) == ([1.0, 1.0, 3.0], [0.0, 0.5, 1.0])


def test_line_counts_put_ha_agent_and_drill_events_first() -> None:
    noise = [{"source": "broker", "node": f"n{i}", "event": "connection_opened", "lines": 1000 + i}
             for i in range(50)]  # fmt: skip
    ours = [
        {"source": "broker", "node": "n1", "event": "ha_state_changed", "lines": 3},
        {"source": "agent", "node": "n1", "event": "election_won", "lines": 1},
        {"source": "drill", "node": "d", "event": "confirm_gap", "lines": 1},
    ]
    shown = report.count_rows(noise + ours, others=5)
    assert [r["event"] for r in shown[:3]] == ["election_won", "ha_state_changed", "confirm_gap"]
    assert [r["lines"] for r in shown[3:]] == [1049, 1048, 1047, 1046, 1045]


TUNING = {
    "config": "session-timeout 8s", "failovers": 10, "spurious": 2, "incomplete": 1,
    "session_timeout_s": 8.0, "p50_detection_ms": 6000.0, "p50_election_ms": 500.0,
    "p50_promotion_ms": 50.0, "p50_recovering_ms": 100.0, "p50_failover_ms": 6650.0,
    "p50_client_outage_ms": 7000.0, "detection_p50_per_timeout": 0.75,
    "backup_timeout_fired": 0,
}  # fmt: skip


def test_advice_names_the_dominant_setting_and_the_spurious_cost() -> None:
    said = advice.for_config(TUNING)
    assert said[0].startswith(
        "session-timeout 8s: detection dominates the fail-over (6000 ms of 6650 ms at the "
        "median, 90% of the phases)"
    )
    assert "0.75 x the 8 s session timeout: the session's expiry detects" in said[0]
    assert "2 of 10 fail-overs here were spurious" in said[0]
    assert said[1].startswith("session-timeout 8s: 1 of 10 fail-overs have incomplete evidence")


def test_advice_on_recovering_and_across_timeouts() -> None:
    slow_backups = {
        **TUNING, "config": "b", "p50_detection_ms": 100.0, "p50_recovering_ms": 5000.0,
        "backup_timeout_fired": 7, "incomplete": 0,
    }  # fmt: skip
    (said,) = advice.for_config(slow_backups)
    assert (
        "b: recovering dominates" in said and "fired (or a backup was dropped) in 7 of 10" in said
    )
    two = [{**TUNING, "session_timeout_s": 2.0, "p50_detection_ms": 1500.0, "spurious": 4}, TUNING]
    assert advice.across(two) == [
        "Detection at the median by session timeout: 2 s: 1500 ms (4 of 10 spurious), "
        "8 s: 6000 ms (2 of 10 spurious)."
    ]


def test_page_tables_scroll_in_their_own_box(tmp_path: Path) -> None:
    rows = [failover(2, 4990.0, config="unlabelled", recovering_ms=100.0,
                     evidence="failure_inferred, no_agent_logs")]  # fmt: skip
    summary = report.Summary(paths=["/logs"], lines=10, skipped=0, events_used=10, seconds=1.0)
    page = report.render(tmp_path, {"failovers": rows}, summary).read_text()
    assert page.count("<div class='wide'><table>") == page.count("<table>") == 1
    assert ".wide { overflow-x: auto;" in page
    assert all((tmp_path / "plots" / f"{n}.png").stat().st_size > 3000
               for n in ("phases", "outage_cdf", "timeline"))  # fmt: skip


def test_advice_uses_what_the_configurations_show() -> None:
    two = [{**TUNING, "session_timeout_s": 2.0, "p50_detection_ms": 1500.0,
            "p50_failover_ms": 2150.0}, TUNING]  # fmt: skip
    assert advice.detection_scales(two) is True
    assert advice.detection_scales([TUNING]) is None
    flat = [{**TUNING, "session_timeout_s": 2.0, "p50_detection_ms": 6000.0}, TUNING]
    assert advice.detection_scales(flat) is False
    said = advice.advice(two)
    assert "it grew with the session timeout across the configurations measured" in said[0]
    # no agent logs: 100 ms of recovering out of a 4,990 ms fail-over says nothing
    unsplit = {"config": "unlabelled", "failovers": 1, "p50_recovering_ms": 100.0,
               "p50_failover_ms": 4990.0, "incomplete": 1}  # fmt: skip
    assert advice.for_config(unsplit)[0].startswith("unlabelled: 1 fail-over(s), none split")
