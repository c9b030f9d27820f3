"""Debian's chromium driven by Playwright, for the dashboard's browser tests: found on PATH, never downloaded.

Playwright's own browser builds come from a host these machines cannot reach, so the tests launch the system
chromium (``hack/install-browser`` installs it). Nothing is skipped: a missing browser or a missing playwright
package fails the test with the command that installs it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

#: Where a run saves its screenshots when told to (docs/dashboard.md's are made this way).
SCREENSHOTS_ENV = "PHALANX_SCREENSHOTS"


def chromium_path() -> str:
    """The system chromium; fails the test with the install command when there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is not installed: run hack/install-browser (as root; it installs Debian's chromium)")
    return found


@contextlib.contextmanager
def system_chromium() -> Iterator[Browser]:
    """A headless system chromium under Playwright, closed afterwards."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[test]'")
    executable = chromium_path()
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where chromium refuses its sandbox; --disable-dev-shm-usage: a container's
        # small /dev/shm would crash the renderer, so it writes its shared memory to /tmp instead.
        arguments = ["--no-sandbox", "--disable-dev-shm-usage"]
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=arguments)
        try:
            yield browser
        finally:
            browser.close()


def screenshot_directory(default: Path) -> Path:
    """``$PHALANX_SCREENSHOTS`` when set (e.g. docs/images/dashboard), else ``default``; created."""
    directory = Path(os.environ.get(SCREENSHOTS_ENV) or default)
    directory.mkdir(parents=True, exist_ok=True)
    return directory
