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
from typing import TYPE_CHECKING, Any

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


#: How a screenshot shows the test's state directory: the default one a user's pages show (``default_state_dir``).
STATE_DIR_SHOWN = "~/.local/share/phalanx"

_HIDE_PATH = """([hidden, shown]) => {
    const replace = (root) => {
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            if (node.nodeValue.includes(hidden)) node.nodeValue = node.nodeValue.split(hidden).join(shown);
        }
    };
    replace(document.body);
    // The pages re-render as they poll: what they render while the picture is taken is rewritten too.
    window.__phalanxHidePath = new MutationObserver(() => replace(document.body));
    window.__phalanxHidePath.observe(document.body, {childList: true, subtree: true, characterData: true});
}"""

_SHOW_PATH = "() => { window.__phalanxHidePath.disconnect(); }"


def screenshot(page: Any, path: Path, state_dir: Path, **options: Any) -> None:
    """A screenshot of ``page`` at ``path``, the test's temporary state directory shown as a user's default one.

    The pages show paths under the state directory (where a job's outputs were stored); a test's is a
    temporary folder whose name would otherwise end up in the docs' images. Only the text on screen changes,
    while the picture is taken: the checks before and after it see the page as served.
    """
    page.evaluate(_HIDE_PATH, [str(state_dir), STATE_DIR_SHOWN])
    try:
        page.screenshot(path=str(path), **options)
    finally:
        page.evaluate(_SHOW_PATH)
