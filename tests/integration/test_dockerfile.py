"""The Dockerfile's steps, run for real without a container engine (none runs in CI).

The test reads the Dockerfile and replays what its stages do: the build stage's COPY instructions into a fresh
build context and its pip steps in a clean virtual environment (the base image's Python), then the runtime
stage's pip steps in another clean one, with the wheels the build stage made. The installed commands must then
work: the CLI and the three components answer ``--help``, the kubernetes extra is importable, and the CLI prints
the committed install. pip's cache is reused (``--no-cache-dir`` is dropped), so a warm run takes seconds of pip.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import venv
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPONENTS = ("phalanx", "phalanx-operator", "phalanx-scheduler", "phalanx-node-agent")


@dataclass
class Stage:
    """One ``FROM`` of the Dockerfile and the instructions under it, as (keyword, arguments)."""

    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arguments for key, arguments in self.instructions if key == keyword]


def stages(text: str) -> list[Stage]:
    """The Dockerfile's stages: continuation lines joined, comments and the parser directive skipped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    found: list[Stage] = []
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, arguments = line.strip().partition(" ")
        keyword, arguments = keyword.upper(), " ".join(arguments.split())
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?: AS (\S+))?", arguments, re.IGNORECASE)
            assert match, f"cannot read FROM {arguments!r}"
            found.append(Stage(match.group(1), match.group(2)))
        elif found:
            found[-1].instructions.append((keyword, arguments))
    return found


def pip_steps(stage: Stage) -> list[list[str]]:
    """The stage's RUN steps that run pip, as argument lists, without build-time flags (mounts)."""
    steps = []
    for command in stage.all("RUN"):
        words = [word for word in shlex.split(command) if not word.startswith("--mount=")]
        if words[:3] == ["python", "-m", "pip"]:
            steps.append(words)
    return steps


def clean_venv(directory: Path) -> Path:
    """A virtual environment with nothing but pip, like the slim base image; returns its bin directory."""
    venv.EnvBuilder(with_pip=True, clear=True).create(directory)
    return directory / "bin"


def run(words: list[str], bin_dir: Path, cwd: Path, replace: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one step as the Dockerfile would, with the container's paths mapped to ``replace``'s."""
    words = [replace.get(word, word) for word in words if word != "--no-cache-dir"]  # reuse pip's cache here
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(bin_dir / words[0]), *words[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_dockerfile_has_a_build_stage_and_a_slim_non_root_runtime() -> None:
    build, runtime = stages(DOCKERFILE.read_text())
    assert build.name == "build" and runtime.name is None
    assert runtime.image.endswith("-slim") and build.image == runtime.image
    assert runtime.all("USER") == ["65532:65532"], "the runtime runs as the uid the manifests name (runAsUser)"
    [install] = pip_steps(runtime)
    assert "--no-index" in install and "phalanx[kubernetes,sweeps,postgres,history,server]" in install
    assert runtime.all("COPY") == [], "the runtime stage takes nothing but the installed wheels (a bind mount)"


def test_the_build_context_keeps_what_the_build_stage_copies() -> None:
    # .dockerignore leaves everything out ("*") and lets back in what the COPY instructions name.
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    assert patterns[0] == "*"
    kept = {pattern.removeprefix("!").rstrip("/") for pattern in patterns if pattern.startswith("!")}
    build, _ = stages(DOCKERFILE.read_text())
    copied = {source.rstrip("/") for copy in build.all("COPY") for source in copy.split()[:-1]}
    assert copied == kept, "every file the build stage copies, and nothing more, is in the build context"


def test_the_dockerfiles_steps_build_a_wheel_that_installs_every_component(tmp_path: Path) -> None:
    build, runtime = stages(DOCKERFILE.read_text())
    # The build stage: a context holding only what its COPY instructions copy, under its WORKDIR.
    [workdir] = build.all("WORKDIR")
    context = tmp_path / "context"
    context.mkdir()
    for copy in build.all("COPY"):
        *sources, destination = copy.split()
        target = context / destination.removeprefix("./")
        for source in sources:
            origin = ROOT / source.rstrip("/")
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)
    wheels = tmp_path / "wheels"
    replace = {"/wheels": str(wheels)}
    build_bin = clean_venv(tmp_path / "build-python")
    [wheel_step] = pip_steps(build)
    done = run(wheel_step, build_bin, context, replace)
    assert done.returncode == 0, f"{workdir}: {' '.join(wheel_step)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    assert any(path.name.startswith("phalanx-") for path in wheels.glob("*.whl")), sorted(wheels.iterdir())

    # The runtime stage: a fresh Python that installs from the wheels alone (--no-index).
    runtime_bin = clean_venv(tmp_path / "runtime-python")
    elsewhere = tmp_path / "elsewhere"  # not the source tree: nothing may come from it
    elsewhere.mkdir()
    for step in pip_steps(runtime):
        done = run(step, runtime_bin, elsewhere, replace)
        assert done.returncode == 0, f"{' '.join(step)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"

    for command in COMPONENTS:
        done = run([command, "--help"], runtime_bin, elsewhere, {})
        assert done.returncode == 0, f"{command} --help: {done.stderr[-2000:]}"
        assert "usage" in done.stdout.lower(), done.stdout
    # the kubernetes extra, the sweeps and postgres extras of the operator's sweep controller, the history extra
    # of its job history, and the server extra of phalanx server on the cluster
    imports = (
        "import cryptography, lightkube, orjson, optuna, cmaes, psycopg, sqlalchemy, alembic, fastapi, uvicorn;"
        " import phalanx; print(phalanx.__file__)"
    )
    where = run(["python", "-c", imports], runtime_bin, elsewhere, {})
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(tmp_path / "runtime-python")), "installed from the wheel, not the tree"
    printed = run(["phalanx", "install", "--print"], runtime_bin, elsewhere, {})
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == (ROOT / "deploy" / "install.yaml").read_text(), "the image prints the committed install"
