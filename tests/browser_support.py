"""One headless Chromium for all browser tests, and a page wrapper that records what went wrong.

Debian's ``/usr/bin/chromium`` driven by Playwright (Playwright never downloads a browser here).
The browser is started once per test session (module-level cache, closed at exit) because a
launch costs about a second.  :func:`open_page` loads a URL in a fresh context that records every
console error, page error, dialog (``alert`` would mean a script injection ran) and every request
that is not ``file:`` or ``data:`` (such requests are also aborted, so a test can never reach the
network).
"""

from __future__ import annotations

import atexit
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("PERFGUARD_CHROMIUM", "/usr/bin/chromium"))
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
DESKTOP = {"width": 1280, "height": 900}
MOBILE = {"width": 390, "height": 844}

_state: dict[str, Any] = {}


def shared_browser() -> Any:
    """The session's browser; without Chromium or Playwright the test is skipped, or fails under CI
    (``.ci/run`` and the tests workflow install both: a green CI must have looked at the pages)."""
    if "browser" in _state:
        return _state["browser"]
    if not CHROMIUM.exists() and shutil.which(str(CHROMIUM)) is None:
        missing = f"no Chromium at {CHROMIUM} (apt-get install chromium, or set PERFGUARD_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(f"CI needs Chromium for the report and site tests: {missing}")
        pytest.skip(missing)
    if os.environ.get("CI"):
        import playwright.sync_api as sync_api  # an ImportError fails the test under CI
    else:
        sync_api = pytest.importorskip("playwright.sync_api")
    playwright = sync_api.sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
    _state.update(playwright=playwright, browser=browser)

    def close() -> None:
        browser.close()
        playwright.stop()

    atexit.register(close)
    return browser


@dataclass
class Visit:
    """A loaded page and everything it did that a static report must never do."""

    page: Any
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)

    @property
    def foreign_requests(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(("file:", "data:"))] + self.blocked

    def assert_clean(self) -> None:
        assert self.console_errors == [], self.console_errors
        assert self.page_errors == [], self.page_errors
        assert self.dialogs == [], f"a dialog fired: {self.dialogs}"
        assert self.foreign_requests == [], f"network requests: {self.foreign_requests}"

    def goto(self, url: str) -> Visit:
        """Load another page in the same context (cheaper than a new one); the records start over."""
        for records in (self.console_errors, self.page_errors, self.dialogs, self.requests, self.blocked):
            records.clear()
        self.page.goto(url, wait_until="load")
        return self

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.page.context.close()


def open_page(url: str, *, viewport: dict[str, int] = DESKTOP) -> Visit:
    """Load ``url`` in a fresh context with every listener attached before navigation."""
    context = shared_browser().new_context(viewport=viewport, service_workers="block")
    page = context.new_page()
    visit = Visit(page=page)

    def on_route(route: Any) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:")):
            route.continue_()
        else:
            visit.blocked.append(url)
            route.abort()

    context.route("**/*", on_route)
    page.on("request", lambda r: visit.requests.append(r.url))
    page.on("console", lambda m: visit.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: visit.page_errors.append(str(e)))

    def on_dialog(dialog: Any) -> None:
        visit.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(url, wait_until="load")
    return visit
