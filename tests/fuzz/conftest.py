"""Fixtures of the fuzz tier: a real control plane per module, shared by the cases of that module.

The control plane is the runtime tier's (``tests/integration/runtime/conftest.py``): a real process on a
temporary state directory, reached through the SDK, the CLI and its local API.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from integration.runtime.conftest import ControlPlaneProcess, Runtime


@pytest.fixture(scope="module")
def fuzz_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    root = tmp_path_factory.mktemp("plane")
    work = root / "work"
    work.mkdir()
    runtime = Runtime(state_dir=root / "state", work_dir=work)
    try:
        yield runtime
    finally:
        runtime.cleanup()


@pytest.fixture(scope="module")
def control_plane(fuzz_runtime: Runtime) -> ControlPlaneProcess:
    return fuzz_runtime.start_control_plane()
