"""A real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright, for `make test-browser`.

Playwright's own browser download is never used (it cannot be fetched here): it drives the system
browser with the flags this machine needs — no sandbox as root, no GPU, no QUIC, no background
or component-update networking, a fresh profile in the test's temporary folder.
"""

import os
import shutil

import pytest

import shardlab as sl

CHROMIUM = os.environ.get("SHARDLAB_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

sl.setup_devices(4)  # this process runs the notebooks for the receipts it opens


@pytest.fixture
def browser(tmp_path):
    """A fresh Chromium context (its own --user-data-dir) that records console messages and every request."""
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM) or os.path.isfile(CHROMIUM), f"{CHROMIUM} missing: run `make test-browser` as root"
    with sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, args=FLAGS, headless=True
        )
        try:
            yield context
        finally:
            context.close()


def watch(page) -> dict:
    """Collect the page's console errors, uncaught exceptions and requested URLs as they happen."""
    seen = {"errors": [], "requests": []}
    page.on("console", lambda message: seen["errors"].append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: seen["errors"].append(str(error)))
    page.on("request", lambda request: seen["requests"].append(request.url))
    return seen
