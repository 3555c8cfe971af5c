"""The console in a real headless Chromium: a failing consumer fills a dead-letter queue; a person
logs in with a token, finds the message by filter, reads its timeline with every retry, resends
it (a consumer receives it), and purges the rest after confirming. Screenshots of every page, at
desktop and phone width, are saved (see `conftest.artifacts`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.console import browser
from tests.console.gateway_proc import (
    ADMIN_TOKEN,
    APP_TOKEN,
    Consumer,
    Gateway,
    fill_dead_letters,
    publish,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not browser.available(), reason="needs Debian's chromium and "
                       "chromium-driver (.ci/run installs them)"),
]

NEEDLE = "needle-7f3a"
XSS_BODY = b"<img src=x onerror=\"document.title='pwned'\"><script>window.pwned=1</script>"


def wait(driver: WebDriver, timeout_s: float = 15) -> WebDriverWait[WebDriver]:
    return WebDriverWait(driver, timeout_s, ignored_exceptions=(StaleElementReferenceException,
                                                                NoSuchElementException))


def texts(driver: WebDriver, css: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def gone(element: WebElement) -> Callable[[WebDriver], bool]:
    """True once `element` left the document (the page was replaced). Chromium reports such a
    node as stale or, now and then, with "Node with given id does not belong to the document"
    (a plain WebDriverException), which `ec.staleness_of` does not take for gone."""
    def check(_driver: WebDriver) -> bool:
        try:
            element.is_enabled()
        except WebDriverException:  # StaleElementReferenceException included
            return True
        return False
    return check


def login(driver: WebDriver, token: str) -> None:
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait(driver).until(gone(page))


def test_console_end_to_end(gw: Gateway, artifacts: Path) -> None:
    topic, group = "orders", "billing"
    ids = fill_dead_letters(gw, topic, group, [
        (json.dumps({"order": 1001, "customer": "ada", "note": NEEDLE}).encode(),
         {"region": "eu-west", "trace": "4bf92f3577b34da6"}),
        (bytes(range(256)) * 2, {"content-type": "application/octet-stream"}),
        (XSS_BODY, {"<b>bold</b>": "<script>window.pwned=2</script>"}),
    ])
    wanted = ids[0]
    with browser.chromium() as driver:
        shot = browser.Shots(driver, artifacts)
        driver.get(gw.console + "/")
        wait(driver).until(ec.url_contains("/login"))
        shot("login")

        login(driver, "not-a-token")
        assert "does not know this token" in driver.find_element(By.CSS_SELECTOR,
                                                                  ".notice.error").text
        login(driver, APP_TOKEN)
        assert "not an admin" in driver.find_element(By.CSS_SELECTOR, ".notice.error").text
        shot("login-refused")
        login(driver, ADMIN_TOKEN)
        wait(driver).until(ec.presence_of_element_located((By.ID, "overview")))
        assert "/login" not in driver.current_url

        # Overview: the group with its dead letters; the live part refreshes without a reload.
        wait(driver).until(lambda d: "rocketmq" in d.find_element(
            By.CSS_SELECTOR, "table.groups tbody tr").text)
        driver.execute_script("window.notReloaded = true")
        live = driver.find_element(By.ID, "overview")
        wait(driver, 20).until(gone(live))
        assert driver.execute_script("return window.notReloaded") is True
        shot("overview")

        # A group with waiting retries: the chart by attempt, the next due, its consumers.
        publish(gw, "shipments", [(f"parcel {i}".encode(), {}) for i in range(5)])
        shipping = Consumer(gw, "shipments", "shipping", {"max_retries": "5"})
        try:
            later = 18  # 2 h, 7.2 s at this gateway's time scale
            batch = [shipping.next() for _ in range(5)]
            for i, d in enumerate(batch):  # attempt 1: two wait long, three come back soon
                shipping.fail(d, "carrier down", delay_level=later if i < 2 else None)
            batch = [shipping.next() for _ in range(3)]
            for i, d in enumerate(batch):  # attempt 2: two wait long, one comes back soon
                shipping.fail(d, "carrier down", delay_level=later if i < 2 else None)
            shipping.fail(shipping.next(), "carrier down", delay_level=later)  # attempt 3

            def chart(d: WebDriver) -> bool:
                d.get(gw.console + "/group?topic=shipments&group=shipping")
                return len(d.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar")) == 3

            wait(driver, 6).until(chart)
            labels = driver.find_element(By.CSS_SELECTOR, "svg.chart").text
            assert "attempt 1" in labels and "attempt 3" in labels
            assert "No consumer" not in driver.page_source
            shot("group")
        finally:
            shipping.close()

        # Dead letters: choose the group, find the message by filter, open it.
        driver.find_element(By.LINK_TEXT, "Dead letters").click()
        shot("dead-letter-groups")
        driver.find_element(By.PARTIAL_LINK_TEXT, group).click()
        wait(driver).until(ec.presence_of_element_located((By.ID, "filters")))
        assert len(driver.find_elements(By.CSS_SELECTOR, "table.letters tbody tr")) == 3
        shot("dead-letters")
        driver.find_element(By.ID, "f-text").send_keys(NEEDLE)
        driver.find_element(By.ID, "apply").click()
        wait(driver).until(ec.url_contains("text=" + NEEDLE))
        rows = driver.find_elements(By.CSS_SELECTOR, "table.letters tbody tr")
        assert len(rows) == 1 and wanted in rows[0].text
        shot("dead-letters-filtered")
        driver.find_element(By.LINK_TEXT, wanted).click()
        wait(driver).until(ec.presence_of_element_located((By.ID, "timeline")))

        # The message: pretty JSON, properties, reason, and every transition of every retry.
        assert '"customer": "ada"' in driver.find_element(By.ID, "body").text
        assert "eu-west" in driver.page_source
        steps = texts(driver, "#timeline .step .badge")
        # Whatever READY transitions the engine emits (published, retry due) come in between.
        moves = [s for s in steps if s != "READY"]
        assert moves == ["INFLIGHT", "WAITING_RETRY"] * 2 + ["INFLIGHT", "DEAD_LETTERED"], steps
        timeline = driver.find_element(By.ID, "timeline").text
        assert "Delivered (attempt 3)" in timeline and "retry in 10 s" in timeline
        assert "retry in 30 s" in timeline and "%DLQ%billing" in timeline
        assert "3 deliveries, 2 retries" in driver.page_source
        shot("message")

        # Resend: a consumer of the original topic receives it.
        receiver = Consumer(gw, topic, group, {"max_retries": "2"})
        try:
            driver.find_element(By.ID, "resend").click()
            wait(driver).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".notice.ok")))
            assert "Resent 1 message" in driver.find_element(By.CSS_SELECTOR, ".notice.ok").text
            got = receiver.next(30)
            assert got.message_id == wanted and got.attempt == 1
            receiver.ack(got)
        finally:
            receiver.close()
        shot("message-resent")

        # Bodies and properties with HTML are shown as text, never run.
        driver.get(gw.console + f"/message?topic={topic}&group={group}&id={ids[2]}")
        assert "<img src=x" in driver.find_element(By.ID, "body").text
        assert "<script>window.pwned=2</script>" in driver.page_source.replace("&lt;", "<") \
            .replace("&gt;", ">")
        assert driver.execute_script("return window.pwned") is None
        assert driver.title != "pwned"
        shot("message-html-body")
        driver.get(gw.console + f"/message?topic={topic}&group={group}&id={ids[1]}")
        assert "00000000  00 01 02 03" in driver.find_element(By.ID, "body").text
        shot("message-binary-body")

        # Purge asks first; Cancel keeps everything; confirming deletes.
        driver.get(gw.console + f"/dead-letters?topic={topic}&group={group}")
        # Two are left; on a loaded machine the resent one may have timed out in the receiver
        # (the 1 min push timeout is 60 ms at this time scale) and be a dead letter again.
        left = len(driver.find_elements(By.CSS_SELECTOR, "table.letters tbody tr"))
        assert left in (2, 3)
        driver.find_element(By.ID, "purge").click()
        wait(driver).until(ec.presence_of_element_located((By.ID, "confirm")))
        assert f"Purge all {left} dead letters" in driver.find_element(By.CSS_SELECTOR,
                                                                         ".question").text
        shot("purge-confirm")
        driver.find_element(By.ID, "cancel").click()
        wait(driver).until(ec.presence_of_element_located((By.ID, "filters")))
        assert len(driver.find_elements(By.CSS_SELECTOR, "table.letters tbody tr")) == left
        driver.find_element(By.ID, "purge").click()
        wait(driver).until(ec.presence_of_element_located((By.ID, "confirm"))).click()
        wait(driver).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".notice.ok")))
        assert f"Purged {left} dead letters" in driver.find_element(By.CSS_SELECTOR,
                                                                      ".notice.ok").text
        assert not driver.find_elements(By.CSS_SELECTOR, "table.letters tbody tr")
        shot("purged")

        # After logging out, pages ask for a login again.
        driver.find_element(By.CSS_SELECTOR, ".logout button").click()
        wait(driver).until(ec.url_contains("/login"))
        driver.get(gw.console + "/dead-letters")
        assert "/login" in driver.current_url
    assert len(shot.saved) >= 20
    for path in shot.saved:
        assert path.stat().st_size > 5000, path


def test_a_long_name_does_not_widen_the_pages(gw: Gateway, artifacts: Path) -> None:
    """Topic and group names may be 255 characters without a space: every page still fits a
    phone's width and a desktop's (no sideways scrolling), the overview's numbers included."""
    topic, group = "t-" + "x" * 253, "g-" + "y" * 120
    fill_dead_letters(gw, topic, group, [(b"long-named", {})])
    query = f"topic={topic}&group={group}"
    with browser.chromium() as driver:
        driver.get(f"{gw.console}/login")
        login(driver, ADMIN_TOKEN)
        (artifacts / "long-names").mkdir(exist_ok=True)
        shots = browser.Shots(driver, artifacts / "long-names")
        for name, path in [("overview", "/"), ("group", f"/group?{query}"),
                           ("dead-letters", f"/dead-letters?{query}")]:
            driver.get(gw.console + path)
            shots(name)
            for width, height, mobile in browser.WIDTHS.values():
                driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": width, "height": height, "deviceScaleFactor": 1,
                    "mobile": mobile})
                overflow = driver.execute_script(
                    "return document.documentElement.scrollWidth - window.innerWidth")
                assert overflow <= 0, f"{name} at {width} px is {overflow} px too wide"
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
