"""The control plane sleeps until something happens: a replica's exit, a write, the local API's bell.

Nothing here waits for a polling interval to pass: the control plane under test polls only every hour, so a
job that finishes within the test's deadline proves that what woke it was pushed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Runtime, generic_job, wait_until
from phalanx.model.jobs import Phase
from phalanx.model.nodes import Node
from phalanx.services.embedded.controlplane import Bell, ControlPlane, ControlPlaneConfig
from phalanx.services.embedded.daemon import current_leader

pytestmark = pytest.mark.integration
HOUR = 3600.0


def pidfds_work() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    made = ControlPlane(ControlPlaneConfig(state_dir=tmp_path / "state"))
    try:
        yield made
    finally:
        made.store.close()


@pytest.fixture
def bell() -> Iterator[Bell]:
    made = Bell()
    try:
        yield made
    finally:
        made.close()


@pytest.mark.skipif(not pidfds_work(), reason="needs pidfds (Linux 5.3)")
def test_replica_exits_wake_a_control_plane_that_never_polls(runtime: Runtime, tmp_path: Path) -> None:
    plane = ControlPlane(
        ControlPlaneConfig(
            state_dir=runtime.state_dir,
            lease_ttl_seconds=3 * HOUR,
            poll_seconds=HOUR,
            idle_seconds=HOUR,
            grace_seconds=3,
        )
    )
    stop = threading.Event()
    thread = threading.Thread(target=plane.run, args=(stop,), name="control-plane", daemon=True)
    thread.start()
    try:
        with runtime.client() as client:
            wait_until(
                lambda: current_leader(client.store) is not None and client.store.list(Node),
                message="the in-process control plane to lead",
            )
        hold = tmp_path / "hold"
        runtime.submit(generic_job("pushed", replicas=2, args=["--hold", str(hold)]))
        runtime.wait_phase("pushed", {Phase.RUNNING}, timeout=30)

        hold.write_text("go")

        final = runtime.wait_phase("pushed", {Phase.SUCCEEDED, Phase.FAILED}, timeout=30)
        assert final.status.phase == Phase.SUCCEEDED, final.status.message
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


def test_the_sleep_ends_at_once_when_the_store_moved_on(plane: ControlPlane, bell: Bell) -> None:
    seq = plane.store.latest_seq()
    plane.register_nodes()  # a write after seq

    assert plane._wait(threading.Event(), seq, HOUR, bell, []) == set()


def test_a_readable_exit_descriptor_ends_the_sleep_and_is_returned(plane: ControlPlane, bell: Bell) -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"x")  # stands in for a pidfd whose process exited

        ready = plane._wait(threading.Event(), plane.store.latest_seq(), HOUR, bell, [read_end])

        assert ready == {read_end}
    finally:
        os.close(read_end)
        os.close(write_end)


def test_the_bell_ends_the_sleep(plane: ControlPlane, bell: Bell) -> None:
    returned = threading.Event()

    def ring_until_heard() -> None:
        # A ring before the sleep starts is forgotten by design (it was for writes already seen): keep ringing.
        while not returned.wait(0.01):
            bell.ring()

    ringer = threading.Thread(target=ring_until_heard)
    ringer.start()
    try:
        assert plane._wait(threading.Event(), plane.store.latest_seq(), HOUR, bell, []) == {bell.fd}
    finally:
        returned.set()
        ringer.join()


def test_a_stop_request_or_no_time_left_ends_the_sleep(plane: ControlPlane, bell: Bell) -> None:
    stopped = threading.Event()
    stopped.set()
    seq = plane.store.latest_seq()

    assert plane._wait(stopped, seq, HOUR, bell, []) == set()
    assert plane._wait(threading.Event(), seq, 0.0, bell, []) == set()


def test_ringing_a_full_bell_does_not_block(bell: Bell) -> None:
    for _ in range(100_000):  # far beyond a pipe's buffer
        bell.ring()
    bell.silence()


def test_a_closed_bell_ignores_rings() -> None:
    bell = Bell()
    bell.close()

    bell.ring()  # an API request finishing after the loop ended: no error, no write
