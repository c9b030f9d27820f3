"""Fixtures for the Kubernetes e2e tier: one real control plane for the whole session.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run as local processes (hack/k8s_testenv.py);
kwok simulates the nodes with our stages in tests/e2e/stages. The binaries are built from Go modules on first use
and cached outside the repository (``${PHALANX_CACHE:-~/.cache/phalanx}/k8s``), so only the first run is slow.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

import k8s_testenv
from components import STAGES, Kube, component_logs, components, node_name, phalanx_installed  # noqa: F401 - fixtures

_BUILD_ERROR = pytest.StashKey[str]()
_ENV = pytest.StashKey[k8s_testenv.TestEnv]()


def _selected_e2e(session: pytest.Session) -> bool:
    return any(item.get_closest_marker("e2e") for item in session.items)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the e2e tier last: the other tiers fail faster, and the control plane is not up while they run."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)  # stable: keeps the order otherwise


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build (or reuse) the binaries before the first e2e test, outside any test's timeout.

    A cold build takes many minutes; it runs here, with its progress shown, so that pytest-timeout does not
    count it against the first test. A failure (no Go, no module proxy) is reported by every e2e test.
    """
    if session.config.option.collectonly or not _selected_e2e(session):
        return
    try:
        missing = k8s_testenv.stale_binaries()
        if missing:
            capture = session.config.pluginmanager.getplugin("capturemanager")
            with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
                print(f"\n[e2e] building {', '.join(missing)} (cached afterwards) ...", file=sys.stderr, flush=True)
                k8s_testenv.build(out=sys.stderr)
    except k8s_testenv.TestEnvError as error:
        session.config.stash[_BUILD_ERROR] = str(error)


@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """A real control plane for the session; torn down (SIGTERM, then SIGKILL) at the end, its logs kept."""
    error = request.config.stash.get(_BUILD_ERROR, None)
    if error:
        pytest.fail(f"cannot build the Kubernetes test binaries:\n{error}", pytrace=False)
    directory = tmp_path_factory.mktemp("k8s-testenv")
    log = directory / "start.log"
    started = time.monotonic()
    try:
        with log.open("w") as out:
            env = k8s_testenv.start(directory, scheduler=True, stages=STAGES, out=out, die_with_parent=True)
    except k8s_testenv.TestEnvError as failure:
        pytest.fail(f"the Kubernetes test environment did not start:\n{failure}", pytrace=False)
    startup = time.monotonic() - started
    request.config.stash[_ENV] = env
    http = httpx.Client(base_url=env.server, verify=env.tls(), timeout=30)
    try:
        yield Kube(env, http, startup)
    finally:
        http.close()
        k8s_testenv.stop(env, out=None)


@pytest.fixture(scope="session")
def kubectl(kube: Kube) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The pinned kubectl, the control plane's own release, as cluster-admin: ``kubectl("apply", "-f", path)``.

    Keywords: ``stdin`` (text for ``-f -``), ``check`` (default True: raise ``TestEnvError`` with kubectl's output
    when it exits non-zero), ``timeout``. Returns the finished process with its output as text.
    """
    return kube.env.kubectl


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace per test; deleted afterwards without waiting (the namespace controller finishes it)."""
    name = kube.unique("e2e")
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the tail of every component's log to a failed e2e test's report."""
    outcome = yield
    report = outcome.get_result()
    env = item.config.stash.get(_ENV, None)
    if report.failed and env is not None and item.get_closest_marker("e2e"):
        report.sections.append(("control plane logs (last 30 lines each)", env.log_tails(30)))
        logs = component_logs(item)
        if logs:
            report.sections.append(("Phalanx component logs", logs))
