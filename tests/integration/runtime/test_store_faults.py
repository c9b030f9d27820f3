"""Store faults with a real control plane: a state store locked by another process, and a full disk.

Neither may take the control plane down, lose or repeat work, or misreport how a replica ended: the control
plane waits and retries, the CLI says in one sentence what is wrong, and a replica that exited 0 is recorded
as exit code 0, never as 137 (killed) and never run a second time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from test_datasets_staging import _tmpfs_prefix

from conftest import Runtime, generic_job
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica, ReplicaPhase
from support.waiting import wait_until

FINISHED = {Phase.SUCCEEDED, Phase.FAILED}
# How long the store stays locked: far past the lease's 5 s time-to-live and the store's busy timeout.
LOCK_SECONDS = 30.0
# The CLI's documented exit code for "the state store is unavailable for now; try again".
STORE_UNAVAILABLE = 4


def starts(record: Path) -> dict[str, int]:
    """How many times each replica started, from the lines ``replica_program.py --record`` appends."""
    counts: dict[str, int] = {}
    for line in record.read_text().splitlines() if record.exists() else []:
        counts[line.split()[0]] = counts.get(line.split()[0], 0) + 1
    return counts


@contextlib.contextmanager
def exclusive_lock(database: Path, release: threading.Event) -> Iterator[threading.Event]:
    """Hold ``BEGIN EXCLUSIVE`` on ``database`` from another connection until ``release`` is set.

    Yields the event that is set once the lock is held; the lock is released on leaving the block at the latest.
    """
    held = threading.Event()
    failure: list[BaseException] = []

    def hold() -> None:
        try:
            conn = sqlite3.connect(str(database), timeout=30, isolation_level=None)
            try:
                conn.execute("BEGIN EXCLUSIVE")
                held.set()
                release.wait(120)
                conn.execute("ROLLBACK")
            finally:
                conn.close()
        except BaseException as err:  # reported by the test thread below
            failure.append(err)
            held.set()

    thread = threading.Thread(target=hold, name="store-locker", daemon=True)
    thread.start()
    held.wait(30)
    if failure:
        raise failure[0]
    try:
        yield held
    finally:
        release.set()
        thread.join(30)


def assert_one_sentence(result: subprocess.CompletedProcess[str], *phrases: str) -> None:
    """The CLI failed with the store's exit code and one ``error:`` sentence naming the fault, no traceback."""
    assert result.returncode == STORE_UNAVAILABLE, result
    stderr = result.stderr.strip()
    assert "Traceback" not in stderr, stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("error: the state store "), stderr
    for phrase in phrases:
        assert phrase in stderr, stderr


def test_a_store_locked_for_30s_is_survived_and_the_cli_says_so(runtime: Runtime, tmp_path: Path) -> None:
    record, gate = tmp_path / "starts.txt", tmp_path / "gate"
    plane = runtime.start_control_plane()
    runtime.submit(generic_job("locked", replicas=2, args=["--record", str(record), "--hold", str(gate)]))
    wait_until(lambda: sum(starts(record).values()) == 2, message="both replicas to start")
    later = runtime.write_job("later", generic_job("later", args=["--record", str(tmp_path / "later.txt")]))
    database = runtime.state_dir / "phalanx.db"
    release = threading.Event()
    with exclusive_lock(database, release):
        locked_at = time.monotonic()
        # The replicas finish while the store is locked: their ends must be recorded once it is free again.
        gate.touch()
        # Verbs that write the store themselves, and one that goes through the control plane's local API.
        assert_one_sentence(
            runtime.cli("submit", str(later)), str(database), "is locked by another process", "try again"
        )
        assert_one_sentence(runtime.cli("delete", "job", "locked"), "is locked by another process", "try again")
        assert_one_sentence(runtime.cli("run", "--detach", str(later)), "is locked by another process", "try again")
        # Reading needs no write lock: it keeps working.
        listed = runtime.cli("get", "jobs")
        assert listed.returncode == 0 and "locked" in listed.stdout, listed
        # The lock's length is what is tested here: hold it for LOCK_SECONDS, watching the control plane live.
        while (left := LOCK_SECONDS - (time.monotonic() - locked_at)) > 0:
            assert plane.process.poll() is None, f"the control plane exited while the store was locked:\n{plane.log()}"
            release.wait(min(left, 1.0))
        assert plane.process.poll() is None, plane.log()
    final = runtime.wait_phase("locked", FINISHED)
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert starts(record) == {"worker-0": 1, "worker-1": 1}
    # After the fault the control plane takes new work as before.
    assert runtime.cli("submit", str(later)).returncode == 0
    assert runtime.wait_phase("later", FINISHED).status.phase == Phase.SUCCEEDED
    assert plane.process.poll() is None
    # One warning for the whole episode, not one per retry.
    faults = [line for line in plane.log().splitlines() if "is locked by another process" in line]
    assert len(faults) == 1, plane.log()
    assert "Traceback" not in plane.log(), plane.log()


def alive(shim_pid_file: Path) -> bool:
    """Whether the shim named by a ``shim.pid`` file still runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{shim_pid_file.read_text().split()[0]}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def fill(directory: Path) -> Path:
    """Fill the file system holding ``directory`` to the last byte; returns the file that holds the space."""
    filler = directory / "filler"
    chunk = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as handle:
        for size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    handle.write(chunk[:size])
            except OSError:
                continue
    return filler


@dataclass
class Namespaced:
    """The CLI and Python run inside a control plane's user and mount namespaces, where its tmpfs is.

    Files there are reached from outside through ``/proc/<pid>/root``, but SQLite resolves that link to ``/``
    (it follows symbolic links itself), so whatever opens the store must run inside.
    """

    runtime: Runtime
    pid: int

    @property
    def root(self) -> Path:
        """The state directory as this process reaches it."""
        return Path(f"/proc/{self.pid}/root") / self.runtime.state_dir.relative_to("/")

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        enter = ["nsenter", "-t", str(self.pid), "-U", "-m", "--preserve-credentials"]
        env = {**os.environ, "PHALANX_HOME": str(self.runtime.state_dir), "COLUMNS": "200"}
        return subprocess.run(
            [*enter, sys.executable, *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.runtime.work_dir,
            timeout=60,
        )

    def python(self, code: str) -> str:
        result = self.run("-c", code)
        assert result.returncode == 0, result
        return result.stdout

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "phalanx.entrypoints.cli", *args)

    def job(self, name: str) -> dict[str, Any]:
        result = self.cli("get", "job", name, "-o", "json")
        assert result.returncode == 0, result
        document = json.loads(result.stdout)
        return dict(document[0] if isinstance(document, list) else document)


def test_replicas_ending_on_a_full_disk_are_recorded_once_with_their_real_code(
    runtime: Runtime, tmp_path: Path
) -> None:
    record, gate = tmp_path / "starts.txt", tmp_path / "gate"
    disk = tmp_path / "disk"
    disk.mkdir()
    runtime.state_dir = disk / "state"
    plane = runtime.start_control_plane(wait_leader=False, prefix=_tmpfs_prefix(disk, "16m"))
    inside = Namespaced(runtime, plane.process.pid)
    wait_until(lambda: (inside.root / "api.sock").exists(), message=f"the control plane to lead:\n{plane.log()}")
    job = generic_job(
        "full",
        replicas=2,
        # Nothing printed after the gate opens: writing the log on a full disk would fail the program itself.
        args=["--record", str(record), "--hold", str(gate), "--quiet-exit"],
        run_policy={"restartPolicy": "OnFailure", "backoffLimit": 3, "backoffSeconds": 0.1},
    )
    submitted = inside.cli("submit", str(runtime.write_job("full", job)))
    assert submitted.returncode == 0, submitted
    wait_until(lambda: sum(starts(record).values()) == 2, timeout=60, message=f"both replicas to start:\n{plane.log()}")
    # Empty the store's write-ahead log, so that the control plane's next writes must grow a file.
    database = runtime.state_dir / "phalanx.db"
    inside.python(f"import sqlite3; sqlite3.connect({str(database)!r}).execute('PRAGMA wal_checkpoint(TRUNCATE)')")
    filler = fill(inside.root)
    gate.touch()
    # Both replicas exit 0 on the full disk; their shims must end with the code recorded, not vanish without it.
    run_dirs = inside.root / "runs"
    wait_until(
        lambda: len(shims := list(run_dirs.rglob("shim.pid"))) == 2 and not [p for p in shims if alive(p)],
        timeout=60,
        message=f"both shims to exit:\n{plane.log()}",
    )
    wait_until(
        lambda: "disk is full" in plane.log(), timeout=60, message=f"the control plane to see it:\n{plane.log()}"
    )
    assert plane.process.poll() is None, f"the control plane exited on the full disk:\n{plane.log()}"
    assert not list(run_dirs.rglob("exit_code.tmp.*")), "a half-written exit code was left behind"
    filler.unlink()
    final = wait_until(
        lambda: (found := inside.job("full"))["status"].get("phase") in ("Succeeded", "Failed") and found,
        timeout=60,
        message=f"the job to finish:\n{plane.log()}",
    )
    assert final["status"]["phase"] == "Succeeded", final["status"]
    assert final["status"].get("restarts", 0) == 0, final["status"]
    assert starts(record) == {"worker-0": 1, "worker-1": 1}
    described = inside.cli("describe", "job", "full")
    # No replica killed (137) in what describe shows; a bare substring once matched a timestamp's digits.
    assert described.returncode == 0 and not re.search(r"(?<![\d.])137(?!\d)", described.stdout), described.stdout
    assert plane.process.poll() is None
    # The store's episode, said once. (The job history opens on a thread of its own: when its opening meets the full
    # disk too, it says so once, on its own logger, and stays off; a gate saw that race.)
    faults = [line for line in plane.log().splitlines() if "disk is full" in line and "store_faults" in line]
    assert len(faults) == 1, plane.log()


# -- launching on a full disk --------------------------------------------------------------------------------


def full_tmpfs_prefix(mount_point: Path, size: str) -> list[str]:
    """Like ``_tmpfs_prefix``, with the tmpfs filled to the last byte before the control plane starts."""
    prefix = _tmpfs_prefix(mount_point, size)
    assert prefix[-2] == "-c" and 'exec "$0"' in prefix[-1], prefix  # [unshare, -rm, sh, -c, script]
    filling = f"{{ cat /dev/zero > {mount_point}/filler; true; }} 2>/dev/null && exec"
    return [*prefix[:-1], prefix[-1].replace("exec", filling, 1)]


def replicas_of(runtime: Runtime, job: str) -> list[Replica]:
    with runtime.client() as client:
        return [r for r in client.store.list(Replica) if r.spec.job_name == job]


def waiting_to_start(runtime: Runtime, job: str, count: int, phrase: str) -> list[Replica]:
    """Wait until the job's ``count`` replicas are all Pending, each saying why it has not started."""
    return list(
        wait_until(
            lambda: (
                len(found := replicas_of(runtime, job)) == count
                and all(r.status.phase == ReplicaPhase.PENDING and phrase in r.status.message for r in found)
                and found
            ),
            timeout=60,
            message=f"the replicas of {job} to wait, saying why:\n{runtime.planes[-1].log()}",
        )
    )


EXECUTOR_ON_A_FULL_DISK = """
import os, select, sys
from pathlib import Path
from phalanx.adapters.executor import LaunchDeferredError, LaunchSpec, LocalExecutor
from test_store_faults import fill

disk = Path(sys.argv[1])
executor = LocalExecutor(disk / "runs", cgroups="off")
filler = fill(disk)
spec = LaunchSpec(
    name="r", command=[sys.executable, "-c", "print('ran')"], env={}, working_dir=disk, run_dir=Path("r"),
    files={"hostfile": "localhost slots=1\\n"},
)
try:
    executor.launch(spec)
    print("launched on a full disk")
except LaunchDeferredError as err:
    print(f"deferred: {err}")
print("run dir:", sorted(p.name for p in (disk / "runs" / "r").iterdir()))
filler.unlink()
handle = executor.launch(spec)
select.select([executor.exit_fd(handle)], [], [], 30)
print("exit code:", executor.poll(handle).exit_code, handle.log_path.read_text().strip())
"""


def test_the_executor_defers_a_launch_on_a_full_disk_and_makes_it_once_space_is_freed(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    result = subprocess.run(
        [*_tmpfs_prefix(disk, "1m"), sys.executable, "-c", EXECUTOR_ON_A_FULL_DISK, str(disk)],
        capture_output=True,
        text=True,
        timeout=60,
        # This directory first: its conftest is the one test_store_faults imports, whatever pytest put on sys.path.
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])},
    )
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    # Not LaunchError (recorded as "could not start", 127): the disk is at fault, and nothing was started.
    assert lines[0] == f"deferred: cannot start r for now: the disk holding {disk / 'runs'} is full", result.stdout
    assert lines[1] == "run dir: []", result.stdout
    assert lines[2] == "exit code: 0 ran", result.stdout


def test_a_job_submitted_on_a_full_disk_waits_and_runs_once_space_is_freed(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    runs = runtime.state_dir / "runs"
    runs.mkdir(parents=True)
    # The disk of the run directories is full before the control plane starts: it cannot even install the shim.
    plane = runtime.start_control_plane(prefix=full_tmpfs_prefix(runs, "1m"))
    inside = Path(f"/proc/{plane.process.pid}/root") / runs.relative_to("/")
    runtime.submit(generic_job("full-start", replicas=2, args=["--record", str(record)]))
    waiting_to_start(runtime, "full-start", 2, "is full")
    with runtime.client() as client:
        job = wait_until(
            lambda: (found := client.get("full-start")).status.reason == "NotStarted" and found,
            message="the job to say why its replicas wait",
        )
    assert job.status.phase not in (Phase.RUNNING, *FINISHED), job.status
    assert "2 replica(s) not started yet: the disk holding" in job.status.message, job.status
    assert "is full" in job.status.message, job.status
    assert plane.process.poll() is None, f"the control plane exited on the full disk:\n{plane.log()}"
    assert not record.exists(), "a replica ran although it could not be launched"
    (inside / "filler").unlink()
    final = runtime.wait_phase("full-start", FINISHED)
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert final.status.restarts == 0, final.status
    assert starts(record) == {"worker-0": 1, "worker-1": 1}
    log = plane.log()
    assert plane.process.poll() is None, log
    assert "Traceback" not in log and "could not start" not in log, log
    # One warning for the whole episode, however many launches and retries it took.
    faults = [line for line in log.splitlines() if "is full" in line]
    assert len(faults) == 1, log


def test_a_replica_whose_supervisor_cannot_record_itself_is_not_started_and_runs_later(
    runtime: Runtime, tmp_path: Path
) -> None:
    record = tmp_path / "starts.txt"
    runs = runtime.state_dir / "runs"
    runs.mkdir(parents=True)
    plane = runtime.start_control_plane(prefix=_tmpfs_prefix(runs, "1m"))
    inside = Path(f"/proc/{plane.process.pid}/root") / runs.relative_to("/")
    wait_until(lambda: (inside / "shim.py").exists(), message=f"the executor to install its shim:\n{plane.log()}")
    # Leave exactly the pages the launch file takes, so the shim cannot write shim.pid, its first step. The launch
    # file holds the inherited environment and paths, so its size depends on the machine (one page or two): a
    # first run of the same job, with paths of the same lengths, measures it.
    warmup = tmp_path / "warmup.txt"  # as long a name as starts.txt: the launch file keeps its size
    runtime.submit(generic_job("no-pix", args=["--record", str(warmup)]))  # as long a name as no-pid
    assert runtime.wait_phase("no-pix", FINISHED).status.phase == Phase.SUCCEEDED
    launch_size = max(path.stat().st_size for path in inside.rglob("launch.json"))
    reserve = inside / "reserve"
    reserve.write_bytes(b"r" * (-(-launch_size // 4096) * 4096))
    filler = fill(inside)
    reserve.unlink()
    # restartPolicy Never: a replica misread as ended (unknown status, 137) would fail the job.
    runtime.submit(generic_job("no-pid", args=["--record", str(record)]))
    wait_until(
        lambda: "not started" in plane.log(), timeout=60, message=f"the failed start to be noticed:\n{plane.log()}"
    )
    # Launched again after the backoff, it now cannot even write its launch file: Pending still, saying so.
    (replica,) = waiting_to_start(runtime, "no-pid", 1, "is full")
    assert replica.status.exit_code is None and replica.status.pid is None, replica.status
    with runtime.client() as client:
        job = wait_until(
            lambda: (found := client.get("no-pid")).status.reason == "NotStarted" and found,
            message="the job to say why its replica waits",
        )
    assert job.status.phase not in FINISHED and job.status.restarts == 0, job.status
    assert not record.exists()
    filler.unlink()
    final = runtime.wait_phase("no-pid", FINISHED)
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert starts(record) == {"worker-0": 1}
    log = plane.log()
    assert "unknown" not in log and "137" not in log and "Traceback" not in log, log
    assert len([line for line in log.splitlines() if "not started" in line]) == 1, log
    assert plane.process.poll() is None


# -- losing the lease ----------------------------------------------------------------------------------------

# How long the other control plane's lease lasts from the moment it is taken (the store's TTL is 5 s).
STOLEN_SECONDS = 6.0


def take_lease(database: Path, holder: str, seconds: float) -> None:
    """Write the control-plane lease to ``holder`` (another host, for ``seconds``) as another process would."""
    now = int(time.time() * 1_000_000)
    with contextlib.closing(sqlite3.connect(str(database), timeout=30)) as conn, conn:
        conn.execute(
            "UPDATE leases SET holder = ?, acquired_at = ?, renewed_at = ?, ttl_seconds = ?, holder_info = ? "
            "WHERE name = 'controlplane'",
            (holder, now, now, seconds, json.dumps({"host": "elsewhere", "pid": 1})),
        )


def lease_holder(database: Path) -> str | None:
    with contextlib.closing(sqlite3.connect(str(database), timeout=30)) as conn:
        row = conn.execute("SELECT holder FROM leases WHERE name = 'controlplane'").fetchone()
    return None if row is None else str(row[0])


def test_a_control_plane_that_loses_its_lease_steps_down_and_takes_over_again(runtime: Runtime, tmp_path: Path) -> None:
    record, gate = tmp_path / "starts.txt", tmp_path / "gate"
    plane = runtime.start_control_plane()
    database = runtime.state_dir / "phalanx.db"
    runtime.submit(generic_job("held", args=["--record", str(record), "--hold", str(gate)]))
    runtime.wait_phase("held", {Phase.RUNNING})
    wait_until(lambda: starts(record) == {"worker-0": 1}, message="the replica to start")
    ours = lease_holder(database)
    take_lease(database, "intruder", STOLEN_SECONDS)
    wait_until(lambda: "stepping down" in plane.log(), message=f"the control plane to step down:\n{plane.log()}")
    assert plane.process.poll() is None, f"the control plane exited on losing its lease:\n{plane.log()}"
    # The replica ends while nobody leads; a job arrives. Neither may be acted on until the lease is ours again.
    gate.touch()
    runtime.submit(generic_job("during", args=["--record", str(tmp_path / "during.txt")]))
    with runtime.client() as client:
        while lease_holder(database) == "intruder":
            assert client.get("during").status.phase == Phase.PENDING, "a job was acted on without the lease"
            assert client.get("held").status.phase == Phase.RUNNING, "a replica was recorded without the lease"
            assert plane.process.poll() is None, plane.log()
            time.sleep(0.05)  # observing a period, not waiting for an event
    wait_until(lambda: lease_holder(database) == ours, message=f"the control plane to take over:\n{plane.log()}")
    assert runtime.wait_phase("held", FINISHED).status.phase == Phase.SUCCEEDED
    assert runtime.wait_phase("during", FINISHED).status.phase == Phase.SUCCEEDED
    # The replica that ended meanwhile was recorded, not run again.
    assert starts(record) == {"worker-0": 1}
    assert starts(tmp_path / "during.txt") == {"worker-0": 1}
    log = plane.log()
    assert plane.process.poll() is None, log
    assert "standing by" in log.split("stepping down", 1)[1], log
    assert "Traceback" not in log, log
