"""Debian's headless Chromium through Selenium, for the tests of the pages (nothing is downloaded)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest


def chromium(*, performance_log: bool = False) -> Any:
    """A headless Chromium driver, or skip when selenium or Debian's chromium/chromium-driver are missing.

    ``performance_log=True`` keeps the CDP performance log (the page's network events).
    """
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (dev extra)")
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chrome or not driver_path:
        pytest.skip("needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,900"):
        opts.add_argument(arg)
    if performance_log:
        opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
