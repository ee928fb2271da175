"""The HTML report rendered in headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``make system-packages``) at 1,280 px wide: the page does
not overflow sideways, every plot loads, every table is there and a wide one scrolls in its
own box. The report is the generated run's (``generated`` in ``conftest.py``).

With ``REPORT_SCREENSHOTS=1`` the test also writes PNG screenshots of the page to
``docs/analytics/`` (the pictures in ``docs/analytics.md``); otherwise to a temporary
directory, so ``make test`` leaves the tree as it was."""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analytics import generate, job
from tests.chromium import headless_chromium

pytestmark = pytest.mark.timeout(120)

WIDTH, HEIGHT = 1280, 900
DOCS = Path(__file__).resolve().parents[2] / "docs" / "analytics"
#: The report's tables: what to change is prose; tuning, tuning by kind, percentiles
#: (2), anomalies, fail-overs, primaries, line counts.
TABLES = 8


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium through chromedriver, its viewport exactly 1,280 x 900 CSS px."""
    with headless_chromium(WIDTH, HEIGHT) as driver:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        yield driver


@pytest.fixture(scope="module")
def page(browser: Any, generated: tuple[generate.Params, job.Result]) -> Any:
    """The generated run's report, loaded (images included: ``get`` waits for ``load``)."""
    _params, result = generated
    browser.get(result.html.resolve().as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    return browser


def test_no_horizontal_overflow_at_1280_px(page: Any) -> None:
    widths = page.execute_script(
        "const d = document.documentElement;"
        "return [window.innerWidth, d.clientWidth, d.scrollWidth, document.body.scrollWidth];"
    )
    assert widths[0] == WIDTH
    assert widths[2] <= widths[1] and widths[3] <= widths[1], widths
    # nothing drawn past the right edge: every element's box ends inside the window
    past = page.execute_script(
        "return [...document.body.querySelectorAll('*')]"
        ".filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth"
        " && !e.closest('.wide'))"
        ".map(e => e.tagName + '.' + e.className).slice(0, 5);"
    )
    assert past == []


def test_every_plot_loads_and_fits(page: Any) -> None:
    images = page.execute_script(
        "return [...document.images].map(i => [i.getAttribute('src'), i.complete,"
        " i.naturalWidth, i.getBoundingClientRect().width]);"
    )
    assert len(images) == 3
    for src, complete, natural, shown in images:
        assert complete and natural > 0, src
        assert 0 < shown <= WIDTH, (src, shown)


def test_tables_present_wide_ones_scroll_in_their_box(page: Any) -> None:
    boxes = page.execute_script(
        "return [...document.querySelectorAll('table')].map(t => {"
        " const box = t.closest('.wide');"
        " return [t.rows.length, box ? box.clientWidth : -1, box ? box.scrollWidth : -1,"
        " box ? getComputedStyle(box).overflowX : ''];});"
    )
    assert len(boxes) == TABLES
    for rows, client, scroll, overflow in boxes:
        assert rows >= 2  # a header and at least one row
        assert 0 < client <= WIDTH
        # a table wider than its box scrolls inside it, not the page
        assert scroll <= client or overflow in ("auto", "scroll"), (client, scroll, overflow)
    # the tuning table (first) has a row per measure and a column per configuration: it
    # fits the page with nothing to scroll
    _rows, client, scroll, _o = boxes[0]
    assert scroll <= client, (client, scroll)
    # the fail-over table (16 columns) is wider than the window: it is the one that scrolls
    assert any(scroll > client for _rows, client, scroll, _o in boxes)


def _shot(page: Any, path: Path, top: float, height: float) -> None:
    """The page from ``top`` (CSS px from its start) ``height`` px down, 1,280 px wide."""
    shot = page.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True,
         "clip": {"x": 0, "y": top, "width": WIDTH, "height": height, "scale": 1}},
    )  # fmt: skip
    path.write_bytes(base64.b64decode(shot["data"]))


def test_screenshots(page: Any) -> None:
    """What a person reads, at 1,280 px: the top (summary, what to change, the tuning
    table), the three plots, and the anomalies with the start of the fail-over table; in
    ``docs/analytics`` with ``REPORT_SCREENSHOTS=1``."""
    if os.environ.get("REPORT_SCREENSHOTS") == "1":
        target = DOCS
    else:
        target = Path(tempfile.mkdtemp(prefix="report-screenshots-"))
    # each h2's top and the bottom of the section it starts, from the page's start
    sections = page.execute_script(
        "const out = {}; const hs = [...document.querySelectorAll('h2')];"
        "hs.forEach((h, i) => { const next = hs[i + 1];"
        " const end = next ? next.getBoundingClientRect().top"
        "   : document.documentElement.scrollHeight - window.scrollY;"
        " out[h.textContent] = [h.getBoundingClientRect().top + window.scrollY,"
        "   end + window.scrollY]; });"
        "return out;"
    )
    margin = 16  # above a heading
    plots = sections["Phases per fail-over, slowest first"][0] - margin
    anomalies = sections["Anomalies"][0] - margin
    shots = {
        "report-top.png": (0, HEIGHT),
        "report-plots.png": (plots, sections["Fail-overs over time"][1] - plots),
        "report-failovers.png": (anomalies, HEIGHT),
    }
    for name, (top, height) in shots.items():
        _shot(page, target / name, top, height)
        png = target / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
