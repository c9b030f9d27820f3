"""The dashboard's routes: its static files are served to any caller (they hold no data), and whole.

The tenancy matrix of the dashboard is short: ``/``, ``/ui`` and ``/ui/...`` answer the same to every caller
(no token, a revoked one, another namespace's, a viewer, an admin), while the API reads the pages make stay
refused without a token. The files are checked as the browser will load them: every ES module a page imports
exists and is served as JavaScript, and nothing is loaded from another host (no CDN).
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from test_rest_tenancy import API, Tokens, bearer, served  # noqa: F401  # served: the fixture, used by name

from phalanx.entrypoints.server.dashboard import UI_DIRECTORY
from support.memory_backend import MemoryBackend

CALLERS = {
    "no token": None,
    "revoked": "revoked-token",
    "other namespace": "editor-cv",
    "viewer": "viewer-ml",
    "admin": "admin-all",
}
IMPORT = re.compile(r"""^import .* from "(\.{1,2}/[^"]+)";""", re.MULTILINE)


@pytest.mark.parametrize("caller", CALLERS)
def test_the_dashboard_files_are_served_to_every_caller(
    served: tuple[TestClient, MemoryBackend, Tokens],  # noqa: F811
    caller: str,
) -> None:
    client, _, _ = served
    headers = bearer(CALLERS[caller])
    page = client.get("/ui/", headers=headers)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="app.js">' in page.text
    for path in ("/", "/ui"):
        moved = client.get(path, headers=headers, follow_redirects=False)
        assert (moved.status_code, moved.headers["location"]) == (307, "/ui/")
    # What the pages read is not public: the API still wants a token, and shows a token its own namespaces only.
    listed = client.get(f"{API}/trainingjobs", headers=headers)
    assert listed.status_code == {"no token": 401, "revoked": 401}.get(caller, 200), listed.text
    reach = {"other namespace": {"cv"}, "viewer": {"ml"}}.get(caller)
    if reach is not None:
        assert {item["metadata"]["namespace"] for item in listed.json()["items"]} <= reach, listed.text


def test_every_module_the_pages_import_is_served_as_javascript(
    served: tuple[TestClient, MemoryBackend, Tokens],  # noqa: F811
) -> None:
    client, _, _ = served
    pending, seen = ["app.js"], set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        answer = client.get(f"/ui/{module}")
        assert answer.status_code == 200, f"{module}: {answer.status_code}"
        assert "javascript" in answer.headers["content-type"], module
        folder = module.rpartition("/")[0]
        for target in IMPORT.findall(answer.text):
            parts = [p for p in f"{folder}/{target}".split("/") if p not in ("", ".")]
            resolved: list[str] = []
            for part in parts:
                if part == "..":
                    resolved.pop()
                else:
                    resolved.append(part)
            pending.append("/".join(resolved))
    on_disk = {str(p.relative_to(UI_DIRECTORY)) for p in UI_DIRECTORY.rglob("*.js")}
    assert seen == on_disk  # every page module is reached from app.js; none is left over
    pages = {"jobs", "job", "queues", "nodes", "datasets", "history", "sweeps", "pipelines"}
    assert {f"pages/{page}.js" for page in pages} <= seen


def test_the_dashboard_loads_nothing_from_another_host() -> None:
    for path in UI_DIRECTORY.rglob("*"):
        if path.is_file():
            # The SVG namespace is a name, not a download.
            text = path.read_text().replace("http://www.w3.org/2000/svg", "")
            assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", text), path.name


def test_a_file_that_is_not_there_is_a_status_naming_it(
    served: tuple[TestClient, MemoryBackend, Tokens],  # noqa: F811
) -> None:
    client, _, _ = served
    missing = client.get("/ui/nothing.js")
    assert missing.status_code == 404
    body = missing.json()
    assert body["kind"] == "Status" and body["code"] == 404
    assert "/ui/nothing.js" in body["message"]
