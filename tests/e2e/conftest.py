"""The headless browser of the page tests: Debian's chromium driven by Playwright, never a downloaded
browser, with the flags a machine without internet needs."""

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright import sync_api

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator["sync_api.Browser"]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()
