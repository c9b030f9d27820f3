#!/usr/bin/env python3
"""The frameworks environment: PyTorch, JAX, XGBoost, TensorFlow, Open MPI with mpi4py, and Dask in one venv.

It serves the ``tests/frameworks`` tier (docs/frameworks.md).

It is built from ``hack/frameworks.lock`` (the exact closure, every package pinned) into
``${PHALANX_CACHE:-~/.cache/phalanx}/frameworks/<key>/``, outside the repository, exactly like the Kubernetes
binaries of hack/k8s_testenv.py. The key hashes the lock, the Python version and the machine, so an edited lock
or another interpreter builds a new environment and an unchanged one is reused. A build that fails leaves
nothing behind and exits non-zero with pip's own words; nothing is skipped silently.

    python hack/frameworks_env.py            # build (or reuse) and print the environment's directory
    python hack/frameworks_env.py --check    # exit 1 unless the environment is built for the current lock
    python hack/frameworks_env.py --relock   # resolve hack/frameworks.in again into hack/frameworks.lock
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import TextIO

HACK = Path(__file__).resolve().parent
REQUIREMENTS = HACK / "frameworks.in"
LOCK = HACK / "frameworks.lock"
COMPLETE = ".complete"
# What a built environment must be able to do before it is called built: each framework imports, and the MPI
# launcher answers.
IMPORTS = ("torch", "jax", "xgboost", "tensorflow", "mpi4py", "distributed")
LAUNCHERS = ("mpirun", "dask")


class FrameworksEnvError(RuntimeError):
    """The environment cannot be built or used; the message says why and what to do."""


def cache_root() -> Path:
    """``${PHALANX_CACHE:-~/.cache/phalanx}/frameworks``: where environments live, outside the repository."""
    return Path(os.environ.get("PHALANX_CACHE") or "~/.cache/phalanx").expanduser() / "frameworks"


def key(lock: Path = LOCK) -> str:
    """The environment's identity: the lock's content, the Python version and the machine."""
    digest = hashlib.sha256()
    digest.update(lock.read_bytes())
    digest.update(f"{sys.version_info.major}.{sys.version_info.minor}/{platform.machine()}".encode())
    return digest.hexdigest()[:16]


def env_dir(lock: Path = LOCK) -> Path:
    """Where the environment for ``lock`` is (or will be) built."""
    return cache_root() / key(lock)


def bin_dir(lock: Path = LOCK) -> Path:
    """The environment's ``bin``: its ``python``, ``mpirun``, ``torchrun``, ``dask``; put it first on PATH."""
    return env_dir(lock) / "bin"


def is_built(lock: Path = LOCK) -> bool:
    """True when the environment for ``lock`` finished building (an interrupted build never counts)."""
    return (env_dir(lock) / COMPLETE).is_file()


def build(out: TextIO = sys.stderr, lock: Path = LOCK) -> Path:
    """Build the environment unless it is built already; return its directory.

    pip's output is shown only when it fails: a cold build would print thousands of lines.

    Raises:
        FrameworksEnvError: no lock, pip failed (registry unreachable, no wheel for this Python), or a
            framework does not import once installed.

    """
    if not lock.is_file():
        raise FrameworksEnvError(f"{lock.name} is missing: run `python hack/frameworks_env.py --relock`")
    target = env_dir(lock)
    if is_built(lock):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Several pytest workers may ask at once: one builds, the others wait for it and reuse its result.
    with open(target.parent / f"{target.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if is_built(lock):
            return target
        _build_into(target, lock, out)
    _prune(keep=target)
    return target


def _build_into(target: Path, lock: Path, out: TextIO) -> None:
    # Built in place (a venv's scripts and Open MPI's launcher name their own absolute paths), and called built
    # only once every framework imports: the marker is written last, so an interrupted build is started over.
    started = time.monotonic()
    shutil.rmtree(target, ignore_errors=True)
    print(f"[frameworks] building {target} from {lock.name} (cached afterwards)", file=out, flush=True)
    try:
        _run([sys.executable, "-m", "venv", str(target)], what="python -m venv")
        _run(
            [
                str(target / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--only-binary=:all:",
                "--no-compile",  # compiled afterwards on every core (_compile)
                # The environment is the cache: pip's own copy of the wheels would double the disk used (~4 GB).
                "--no-cache-dir",
                "--progress-bar",
                "off",
                "-r",
                str(lock),
            ],
            what="pip install -r hack/frameworks.lock",
        )
        _compile(target)
        check(target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    (target / COMPLETE).write_text(
        json.dumps({"lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest(), "python": sys.version})
    )
    print(f"[frameworks] built in {time.monotonic() - started:.0f} s", file=out, flush=True)


def _compile(directory: Path) -> None:
    """Write every module's bytecode now, on all cores.

    Without it each replica compiles torch or TensorFlow on its first import (about 8 s of CPU per process), and
    an environment that sets PYTHONDONTWRITEBYTECODE would pay that at every start. Files that do not compile
    (templates, Python 2 leftovers inside packages) are left as they are.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    python = str(directory / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run([python, "-m", "compileall", "-q", "-q", "-j", "0", site], env=env, capture_output=True, check=False)


def check(directory: Path) -> None:
    """Raise FrameworksEnvError unless every framework imports and every launcher runs in ``directory``."""
    python = directory / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", f"import {', '.join(IMPORTS)}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if probe.returncode != 0:
        raise FrameworksEnvError(f"the frameworks do not import in {directory}:\n{probe.stderr[-4000:]}")
    for launcher in LAUNCHERS:
        if not (directory / "bin" / launcher).is_file():
            raise FrameworksEnvError(f"{launcher} is not in {directory / 'bin'}: the lock lacks its package")


def phalanx_dependencies() -> list[str]:
    """Phalanx's own runtime dependencies (pyproject.toml).

    The control plane runs from this environment too, as it does for a user who installed Phalanx beside their
    framework.
    """
    project = tomllib.loads((HACK.parent / "pyproject.toml").read_text())["project"]
    return [str(requirement) for requirement in project["dependencies"]]


def relock(out: TextIO = sys.stderr) -> None:
    """Resolve ``hack/frameworks.in`` and Phalanx's dependencies into ``hack/frameworks.lock``, fully pinned."""
    with tempfile.TemporaryDirectory(prefix="frameworks-relock-") as scratch:
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_text(REQUIREMENTS.read_text() + "\n".join(phalanx_dependencies()) + "\n")
        _run([sys.executable, "-m", "venv", f"{scratch}/venv"], what="python -m venv")
        report = Path(scratch) / "report.json"
        _run(
            [
                f"{scratch}/venv/bin/python",
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--quiet",
                "--ignore-installed",
                "--only-binary=:all:",
                "--report",
                str(report),
                "-r",
                str(requirements),
            ],
            what="pip install --dry-run -r hack/frameworks.in",
        )
        installs = json.loads(report.read_text())["install"]
    pins = sorted(
        f"{entry['metadata']['name'].lower().replace('_', '-')}=={entry['metadata']['version']}" for entry in installs
    )
    header = (
        "# Generated by `python hack/frameworks_env.py --relock` from hack/frameworks.in and pyproject.toml's\n"
        "# dependencies: every package of the frameworks environment, pinned (Python "
        f"{sys.version_info.major}.{sys.version_info.minor}, {platform.machine()}). Do not edit by hand.\n"
    )
    LOCK.write_text(header + "\n".join(pins) + "\n")
    print(f"[frameworks] {LOCK.name}: {len(pins)} packages", file=out, flush=True)


def _run(command: list[str], *, what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:]
        raise FrameworksEnvError(
            f"{what} failed (exit {result.returncode}); the frameworks tier needs the package registry to build "
            f"its environment once (see docs/frameworks.md):\n{tail}"
        )


def _prune(keep: Path) -> None:
    """Remove environments built for other locks: each is several gigabytes."""
    for sibling in keep.parent.iterdir():
        if sibling != keep and sibling.is_dir() and (sibling / COMPLETE).is_file():
            shutil.rmtree(sibling, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Build, check or relock, as the module's docstring says; 1 with the reason on stderr when it cannot."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 unless the environment is built")
    parser.add_argument("--relock", action="store_true", help="resolve hack/frameworks.in into hack/frameworks.lock")
    args = parser.parse_args(argv)
    try:
        if args.relock:
            relock()
            return 0
        if args.check:
            if not is_built():
                print(f"not built: {env_dir()}", file=sys.stderr)
                return 1
            print(env_dir())
            return 0
        print(build())  # the cold build takes a few minutes: pip downloads about 4 GB (torch pulls CUDA)
        return 0
    except FrameworksEnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
