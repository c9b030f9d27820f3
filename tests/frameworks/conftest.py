"""The frameworks tier: PyTorch, JAX, XGBoost, TensorFlow, MPI and a user-defined JobType, each training across
replicas started by the embedded runtime, checked by the framework's own collective result.

The frameworks come from the environment hack/frameworks_env.py builds once from hack/frameworks.lock and caches
outside the repository. A cold build takes minutes (pip downloads about 4 GB: torch pulls the CUDA libraries);
it runs here, before the first test and outside any test's timeout. When it cannot be built every test of the
tier fails with the reason: the tier is never skipped.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import frameworks_env
from support.frameworks import FrameworksRuntime, frameworks_runtime

_BUILD_ERROR = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(item.path).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.frameworks)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build (or reuse) the frameworks environment before the first test of the tier."""
    if session.config.option.collectonly or not any(i.get_closest_marker("frameworks") for i in session.items):
        return
    if frameworks_env.is_built():
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            frameworks_env.build(out=sys.stderr)
    except frameworks_env.FrameworksEnvError as error:
        session.config.stash[_BUILD_ERROR] = str(error)


@pytest.fixture(scope="session")
def frameworks_dir(request: pytest.FixtureRequest) -> Path:
    """The built frameworks environment; every test fails, with the build's reason, when there is none."""
    error = request.config.stash.get(_BUILD_ERROR, None)
    if error is not None:
        pytest.fail(f"the frameworks environment could not be built: {error}", pytrace=False)
    if not frameworks_env.is_built():
        pytest.fail(
            f"the frameworks environment is not built ({frameworks_env.env_dir()}): "
            "run `python hack/frameworks_env.py`",
            pytrace=False,
        )
    return frameworks_env.env_dir()


@pytest.fixture
def fw(frameworks_dir: Path, tmp_path: Path) -> Iterator[FrameworksRuntime]:
    """A fresh Phalanx state directory and work directory, with the CLI run from the frameworks environment."""
    with frameworks_runtime(frameworks_dir, tmp_path) as runtime:
        yield runtime
