"""The web dashboard: its static files (``ui/``, shipped in the package) served under ``/ui/``.

Plain HTML, CSS and ES modules, no build step and nothing loaded from elsewhere at run time: the pages read the
REST API of the same server with the token the user logged in with (kept in the browser's sessionStorage, sent
as ``Authorization: Bearer``). The files themselves hold no data, so they are served to anyone; every API read
they make is authorized like any other request. The address ``/`` and ``/ui`` lead to ``/ui/``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

#: Where the dashboard's files are, inside the installed package.
UI_DIRECTORY = Path(__file__).with_name("ui")


def add_dashboard_routes(app: FastAPI) -> None:
    """Serve the dashboard under ``/ui/`` (``index.html`` at ``/ui/``), and send ``/`` and ``/ui`` there."""

    def to_dashboard() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    app.add_api_route("/", to_dashboard, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui", to_dashboard, methods=["GET"], include_in_schema=False)
    app.mount("/ui", StaticFiles(directory=UI_DIRECTORY, html=True), name="dashboard")
