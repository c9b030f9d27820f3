"""A control plane whose state directory is removed under it stops, and stops the replicas it ran.

Found by a new user's trial: after ``rm -rf`` of the state directory the control plane went on leading a store
no one could reach, with its replicas running unseen, while the next CLI verb made a fresh directory at the same
path. Here a real control plane runs a job whose replica holds; the directory is removed; the control plane must
exit 1 saying why, and the replica's process must be gone.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from conftest import Runtime, generic_job, wait_until
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica
from phalanx.services.embedded.leadership import process_start_ticks


def test_removing_the_state_directory_stops_the_control_plane_and_its_replicas(runtime: Runtime) -> None:
    plane = runtime.start_control_plane()
    hold = runtime.work_dir / "never"
    runtime.submit(generic_job("holder", args=["--hold", str(hold)]))
    runtime.wait_phase("holder", {Phase.RUNNING})
    with runtime.client() as client:
        [replica] = client.store.list(Replica)
    shim, started = replica.status.pid, replica.status.process_start_ticks
    assert shim is not None and started is not None and process_start_ticks(shim) == started
    with open(plane.log_path, "rb") as log:  # kept open: the file goes with the directory
        # A live shim may write a file into its run directory while rmtree walks it ("Directory not empty"),
        # as `rm -rf` would say too; like a user, remove again until the directory is gone.
        wait_until(lambda: _removed(runtime.state_dir), 30, "the state directory to be removed")
        code = plane.process.wait(timeout=60)
        said = log.read().decode(errors="replace")
    assert code == 1, said[-3000:]
    assert f"the state directory {runtime.state_dir} was removed" in said, said[-3000:]
    # The replica's shim may see its directory go and end first (the store then counts 0 replicas left to
    # stop); either way the control plane must say how many it stopped and the process must be gone.
    assert re.search(r"stopping this control plane and the [01] replica\(s\) it ran", said), said[-3000:]
    wait_until(lambda: process_start_ticks(shim) != started, 30, "the replica's process to stop")


def _removed(path: Path) -> bool:
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()
