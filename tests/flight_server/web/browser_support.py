"""Headless Chromium for the watch-page tests (Debian's chromium and chromium-driver, installed
by scripts/fetch-browser), and screenshots kept as test artefacts.

Screenshots go to ``$ICEFLOE_TEST_ARTIFACTS/watch_page/`` (default ``test-artifacts/`` at the
repository root, ignored by git): CI uploads that folder, a developer opens the PNGs.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1200"]
ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("ICEFLOE_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "watch_page"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip("Debian's chromium / chromium-driver are not installed (scripts/fetch-browser)",
                allow_module_level=True)

from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

__all__ = ["By", "WebDriverWait", "chromium", "screenshot"]


def chromium() -> Iterator[Any]:
    """A headless Chromium WebDriver, quit afterwards (a test module's ``browser`` fixture
    yields from it)."""
    profile = tempfile.mkdtemp(prefix="icefloe-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: Any, request: pytest.FixtureRequest, step: str) -> Path:
    """Save the whole page as ``<test name>-<step>.png`` in the artefacts folder."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{request.node.name}-{step}")
    path = ARTIFACTS / f"{name}.png"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, max(900, min(int(height) + 40, 6000)))
    driver.save_screenshot(str(path))
    return path
