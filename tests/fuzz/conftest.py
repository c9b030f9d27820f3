"""Fixtures of the fuzz tier: a real control plane per module, shared by the cases of that module.

The control plane is the runtime tier's (``tests/integration/runtime/conftest.py``): a real process on a
temporary state directory, reached through the SDK, the CLI and its local API.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.runtime.conftest import ControlPlaneProcess, Runtime


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `pytest -m fuzz` selects the tier; `-m "not fuzz"` leaves it out of a quick local run.
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.fuzz)


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
