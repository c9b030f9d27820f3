"""schemathesis against a live `phalanx server`: requests generated from its own OpenAPI document, with a token.

Every operation of the document (list, create, read, delete of every kind; the OpenAPI document is fetched from
the server) gets schemathesis's coverage cases (boundary and invalid values of each parameter and body field)
and generated ones, sent with an admin token so every route runs to its end. Checks: no 5xx
(``not_a_server_error``), and every 4xx is a Status whose message is a sentence (``schemathesis_checks``). The
seed is fixed, so a failure reproduces; the run's output names the request that failed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_rest_server_e2e import make_token, start_server

from conftest import Runtime

pytest.importorskip("schemathesis")
SEED = "20261127"
HERE = Path(__file__).resolve().parent


@pytest.mark.timeout(900)
def test_generated_requests_get_no_5xx_and_every_4xx_says_why(runtime: Runtime, tmp_path: Path) -> None:
    base = start_server(runtime, tmp_path / "server.log")
    token = make_token(runtime, "fuzz", "admin", "*")
    command = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    result = subprocess.run(
        [
            command, "run", f"{base}/openapi.json",
            "--checks", "not_a_server_error,refusals_are_statuses",
            "--phases", "coverage,fuzzing",
            "--max-examples", "10",
            "--seed", SEED,
            "--workers", "1",
            # A watch (watch=true) streams until the client leaves: schemathesis reads one until the request
            # timeout, or the next heartbeat past it (15 s). 5 s bounds each of the many watch cases.
            "--request-timeout", "5",
            "--header", f"Authorization: Bearer {token}",
        ],
        capture_output=True,
        text=True,
        timeout=840,
        cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_checks", "PYTHONPATH": str(HERE)},
    )  # fmt: skip
    report = result.stdout + result.stderr
    (tmp_path / "schemathesis.txt").write_text(report)
    failures = report[report.find("FAILURES") :][:6000] if "FAILURES" in report else report[-6000:]
    assert result.returncode == 0, failures
    selected = re.search(r"Selected: (\d+)/(\d+)", report)
    tested = re.search(r"Tested: (\d+)", report)
    assert selected and tested, report[-3000:]
    # Every operation of the document was tested (33 when this was written; other routes join as they come).
    assert int(selected.group(1)) == int(selected.group(2)) == int(tested.group(1)) >= 33
