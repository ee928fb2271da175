"""Headless Chromium through chromedriver (selenium), for the tests that read pages in a real
browser: the web console's (tests/console) and the analytics report's (tests/analytics).
Debian's ``chromium`` and ``chromium-driver``, installed by ``make test``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def headless_chromium(width: int, height: int, *extra_arguments: str) -> Iterator[Any]:
    """A headless Chromium window of ``width`` x ``height``, quit on exit; the test fails
    (not skips) when the packages are missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: `make system-packages` installs Debian's chromium"
            " and chromium-driver"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        *extra_arguments,
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
