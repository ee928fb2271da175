"""Driving the console's page in Chromium: its address, logging in, waiting for what it
shows (the browser tests' helpers)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By

from common.polling import poll_until
from tests.console.support import USERS


def _replaced(exc: WebDriverException) -> bool:
    """The element went with the document it was found in: stale, or (Chromium, while a
    form post brings a new page) "Node with given id does not belong to the document"."""
    return isinstance(exc, StaleElementReferenceException) or (
        "does not belong to the document" in str(exc.msg)
    )


class Member(Protocol):
    """A broker whose console a test opens (an agent cluster's node, a BrokerProcess)."""

    @property
    def mgmt_port(self) -> int: ...


def console_url(node: Member, page: str = "cluster") -> str:
    return f"http://127.0.0.1:{node.mgmt_port}/console/#{page}"


def seen(browser: Any, check: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """Poll the page until ``check()`` is truthy (elements re-rendered meanwhile are
    looked up again)."""

    def attempt() -> Any:
        try:
            return check()
        except NoSuchElementException:
            return None
        except WebDriverException as exc:
            if _replaced(exc):
                return None
            raise

    try:
        return poll_until(attempt, timeout, what or None, interval=0.1)
    except AssertionError as exc:  # what the page showed, for the report
        picture = Path(tempfile.gettempdir()) / f"console-failed-{os.getpid()}.png"
        browser.save_screenshot(str(picture))
        raise AssertionError(f"{exc} (the page: {picture})") from None


def confirm_says(browser: Any, check: Callable[[str], bool], timeout: float = 10.0) -> str:
    """The confirmation dialog's question once ``check`` holds for it; its text. Polled:
    WebDriver reads the text of what is shown, and the dialog opened by a click may show
    only in a later frame (a loaded machine read '' right after the click); a dialog opened
    again may still say the last question."""

    def said() -> str | None:
        question = text(browser, "#confirm-text")
        return question if check(question) else None

    return str(seen(browser, said, timeout, "the confirmation's question"))


def click(browser: Any, css: str, timeout: float = 10.0, what: str = "") -> None:
    """Click the element ``css`` names in a live table (re-rendered every second): found
    and clicked again when the page replaced it between the two."""

    def clicked() -> bool:
        browser.find_element(By.CSS_SELECTOR, css).click()
        return True

    seen(browser, clicked, timeout, what or css)


def press(browser: Any, button: str) -> None:
    """Click a form's button (by id) even under the toast of the last action (it covers
    the page's lower right corner for a few seconds)."""
    browser.execute_script("arguments[0].click()", browser.find_element(By.ID, button))


def text(browser: Any, css: str) -> str:
    """The element's text; again if the page re-rendered it meanwhile (every second)."""
    for _ in range(20):
        try:
            return str(browser.find_element(By.CSS_SELECTOR, css).text)
        except WebDriverException as exc:
            if not _replaced(exc):
                raise
    raise AssertionError(f"{css} re-rendered 20 times in a row")


def classes(browser: Any, css: str) -> list[str]:
    """The element's classes; again if the page re-rendered it between its lookup and the
    read (a live table: stale in the read, cc1 of 2026-12-02)."""
    for _ in range(20):
        try:
            found = browser.find_element(By.CSS_SELECTOR, css)
            return str(found.get_attribute("class")).split()
        except WebDriverException as exc:
            if not _replaced(exc):
                raise
    raise AssertionError(f"{css} re-rendered 20 times in a row")


def log_in(
    browser: Any, node: Member, user: str, page: str = "cluster", password: str | None = None
) -> None:
    """Open ``node``'s console as ``user`` (logging out whoever was logged in there), with
    its password in ``support.USERS`` unless ``password`` is given (a user made in a test)."""
    browser.get(console_url(node, page))
    if browser.find_elements(By.ID, "logout"):
        seen(browser, lambda: browser.find_element(By.ID, "logout").is_displayed())
        me = text(browser, "#me")
        if me.startswith(f"{user} "):
            return
        browser.find_element(By.ID, "logout").click()
        seen(browser, lambda: browser.find_elements(By.ID, "login-button"))
    browser.find_element(By.ID, "user").send_keys(user)
    browser.find_element(By.ID, "password").send_keys(password or USERS[user][0])
    browser.find_element(By.ID, "login-button").click()
    seen(browser, lambda: text(browser, "#me").startswith(f"{user} "), what=f"{user} logged in")
    browser.get(console_url(node, page))
    seen(browser, lambda: browser.find_element(By.ID, "live").get_attribute("class") == "live")
