"""Starting the background control plane: a start that times out leaves nothing running, and two CLIs starting
at once share one control plane (found by the frameworks tier under load: `phalanx run` gave up after 20 s while
the control plane went on starting, and each retry added another)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from conftest import processes_mentioning
from phalanx.services.embedded.daemon import DaemonError, start_control_plane, stop_control_plane
from phalanx.services.embedded.layout import StateLayout
from support.waiting import wait_until


def control_planes(state: Path) -> list[int]:
    return processes_mentioning(f"phalanx.entrypoints.controlplane --state-dir {state}")


def test_a_start_that_times_out_stops_the_control_plane_it_started(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path / "state")
    with pytest.raises(DaemonError, match="did not start within") as failure:
        start_control_plane(layout, timeout=0.01)
    assert "so it was stopped" in str(failure.value)
    wait_until(lambda: control_planes(layout.root) == [], timeout=30, message="the timed-out control plane to end")


def test_two_starts_at_once_share_one_control_plane(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path / "state")
    results: list[tuple[str, bool]] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            leader, started = start_control_plane(layout)
            results.append((leader.holder, started))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=start) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        assert sorted(started for _, started in results) == [False, True], results
        assert len({holder for holder, _ in results}) == 1, results
        assert len(control_planes(layout.root)) == 1
    finally:
        stop_control_plane(layout)
        for pid in control_planes(layout.root):  # a second one, on the code before the fix
            os.kill(pid, signal.SIGKILL)


def test_a_control_plane_whose_lease_lapsed_is_still_stopped(tmp_path: Path) -> None:
    # A benchmark's control plane overran its 5 s lease in a long pass; `stop_control_plane` read no live leader,
    # stopped nothing, and the control plane ran on at full CPU after the benchmark deleted its state directory.
    from phalanx.adapters.store import SqliteStore
    from phalanx.services.embedded.daemon import current_leader

    layout = StateLayout(tmp_path / "state")
    leader, started = start_control_plane(layout)
    assert started and leader.pid is not None
    pid = leader.pid
    os.kill(pid, signal.SIGSTOP)  # frozen mid-pass: it cannot renew its lease
    try:
        store = SqliteStore(layout.database)
        try:
            wait_until(lambda: current_leader(store) is None, timeout=30, message="the lease to lapse", interval=0.2)
        finally:
            store.close()
        stopped: list[object] = []
        stopping = threading.Thread(target=lambda: stopped.append(stop_control_plane(layout)))
        stopping.start()
        wait_until(lambda: stopping.is_alive(), timeout=5, message="the stop to begin")
    finally:
        os.kill(pid, signal.SIGCONT)  # it takes the SIGTERM sent meanwhile
    stopping.join(60)
    left = control_planes(layout.root)
    for running in left:  # on the code before the fix it runs on: end it, then fail
        os.kill(running, signal.SIGKILL)
    assert stopped and stopped[0] is not None, "the control plane was taken for gone"
    assert left == []
