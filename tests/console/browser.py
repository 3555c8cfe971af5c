"""A real headless Chromium (Debian's `chromium` and `chromium-driver`) driven by Selenium, with
screenshots of whole pages at desktop and phone width."""

from __future__ import annotations

import base64
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,900")
WIDTHS = {"desktop": (1280, 900, False), "phone": (390, 844, True)}


def available() -> bool:
    return Path(CHROMIUM).exists() and Path(DRIVER).exists()


@contextmanager
def chromium() -> Iterator[WebDriver]:
    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


class Shots:
    """Saves `NN-name-desktop.png` and `NN-name-phone.png` of the whole page."""

    def __init__(self, driver: WebDriver, directory: Path) -> None:
        self.driver = driver
        self.directory = directory
        self.count = 0
        self.saved: list[Path] = []

    def __call__(self, name: str) -> None:
        self.count += 1
        for label, (width, height, mobile) in WIDTHS.items():
            self._metrics(width, height, mobile)
            full = int(self.driver.execute_script(
                "return Math.max(document.documentElement.scrollHeight, "
                "document.body ? document.body.scrollHeight : 0)"))
            self._metrics(width, min(max(full, height), 6000), mobile)
            shot = self.driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
            path = self.directory / f"{self.count:02d}-{name}-{label}.png"
            path.write_bytes(base64.b64decode(shot["data"]))
            self.saved.append(path)
        self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    def _metrics(self, width: int, height: int, mobile: bool) -> None:
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
