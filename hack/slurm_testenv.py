"""A one-machine Slurm for side-by-side runs: munged, slurmctld and slurmd on loopback, state in one directory.

Debian's ``slurm-wlm`` and ``munge`` (installed with apt when missing, as root, like ``hack/install-browser``)
run with a minimal configuration written into ``DIR``: one node (this machine: its host name, all its CPUs, most
of its memory), one partition, the backfill scheduler, core-level allocation, no accounting. Its own munge key
and socket, free ports, logs and spool in ``DIR``: nothing outside it is read or written, so it runs beside a
system Slurm. Clients find it through ``SLURM_CONF=DIR/slurm.conf`` (``env``).

    hack/slurm-testenv start --dir DIR     start (an existing cluster there is stopped first)
    hack/slurm-testenv stop --dir DIR      stop what ``start`` recorded
    hack/slurm-testenv env --dir DIR       print the export that points srun, sbatch and squeue at it

Used by ``benchmarks/vs_slurm.py``. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ["slurm-wlm", "munge"]
DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmError(Exception):
    """Slurm cannot be installed or started; the message says why and what to do."""


@dataclass(frozen=True)
class Slurm:
    """A started cluster: its directory and the environment its clients need."""

    directory: Path

    @property
    def conf(self) -> Path:
        """The configuration file ``SLURM_CONF`` names."""
        return self.directory / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The process environment with ``SLURM_CONF`` pointing at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}


def ensure_installed() -> None:
    """apt-get install slurm-wlm and munge when a daemon is missing (as root; otherwise say what to run)."""
    if all(shutil.which(name) for name in (*DAEMONS, "srun", "sbatch", "squeue", "mungekey")):
        return
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    if os.geteuid() != 0:
        raise SlurmError(f"Slurm is not installed; as root run: apt-get update && {' '.join(command)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(command, check=True, env=env)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 1024


def _config(directory: Path, host: str) -> str:
    cpus = os.cpu_count() or 1
    memory = max(512, int(_memory_mb() * 0.8))
    munge = directory / "munge"
    return "\n".join(
        [
            "ClusterName=phalanxbench",
            f"SlurmctldHost={host}(127.0.0.1)",
            "SlurmUser=root",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={munge / 'munge.socket'}",
            "CredType=cred/munge",
            f"StateSaveLocation={directory / 'state'}",
            f"SlurmdSpoolDir={directory / 'spool'}",
            f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
            f"SlurmdPidFile={directory / 'slurmd.pid'}",
            f"SlurmctldLogFile={directory / 'slurmctld.log'}",
            f"SlurmdLogFile={directory / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN",
            "PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def start(directory: Path, *, timeout: float = 60.0) -> Slurm:
    """Write the configuration into ``directory`` and start munged, slurmctld and slurmd; wait until a job runs.

    Raises:
        SlurmError: not installed and not installable, not root, or a daemon did not come up (its log is named).
    """
    if os.geteuid() != 0:
        raise SlurmError("slurmd runs jobs as their users and must run as root; run this as root")
    ensure_installed()
    stop(directory)
    munge = directory / "munge"
    for folder in (directory / "state", directory / "spool", munge):
        folder.mkdir(parents=True, exist_ok=True)
    munge.chmod(0o700)
    host = socket.gethostname()
    slurm = Slurm(directory)
    slurm.conf.write_text(_config(directory, host))
    subprocess.run(["mungekey", "--create", "--force", "--keyfile", str(munge / "munge.key")], check=True)
    subprocess.run(
        [
            "munged",
            "--force",
            f"--socket={munge / 'munge.socket'}",
            f"--key-file={munge / 'munge.key'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ],
        check=True,
    )
    for daemon in ("slurmctld", "slurmd"):
        done = subprocess.run([daemon, "-f", str(slurm.conf)], capture_output=True, text=True, env=slurm.env)
        if done.returncode != 0:
            raise SlurmError(f"{daemon} did not start ({done.stderr.strip()}); see {directory / (daemon + '.log')}")
    deadline = time.monotonic() + timeout
    while True:
        probe = subprocess.run(["srun", "--quiet", "true"], capture_output=True, text=True, env=slurm.env, timeout=30)
        if probe.returncode == 0:
            return slurm
        if time.monotonic() > deadline:
            raise SlurmError(f"no job ran within {timeout:.0f} s ({probe.stderr.strip()}); see {directory}/*.log")
        time.sleep(0.5)


def stop(directory: Path) -> None:
    """Stop the daemons whose pid files are in ``directory`` (SIGTERM, then SIGKILL after 10 s)."""
    pids = []
    for pid_file in (directory / "slurmd.pid", directory / "slurmctld.pid", directory / "munge" / "munged.pid"):
        try:
            pids.append(int(pid_file.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    for pid in pids:
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    """The command line; 1 with the reason on stderr when Slurm cannot be started."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "stop", "env"):
        commands.add_parser(name).add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    try:
        if args.command == "start":
            start(directory)
            print(f"Slurm up; export SLURM_CONF={directory / 'slurm.conf'}")
        elif args.command == "stop":
            stop(directory)
        else:
            print(f"export SLURM_CONF={directory / 'slurm.conf'}")
    except SlurmError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
