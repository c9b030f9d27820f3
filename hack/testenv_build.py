"""The test environment's binaries: versions pinned by the wrapper modules under ``tools/``, Go, and the build.

The binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, kubectl of the same
Kubernetes release, and helm for the chart's tests) are built from published Go modules through the wrapper
modules and cached outside the repository, keyed by the control plane's versions (``cache_root``); ``build``
reuses binaries that are current (each reports its pinned version) and rebuilds only stale ones, under a lock so
two builds never race. ``pin`` regenerates the wrapper modules for new versions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from testenv_base import REPO, TOOLS, TestEnvError

#: The Kubernetes commands built from ``tools/k8s-bin``: the control plane's, and kubectl of the same release.
K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")

# --------------------------------------------------------------------------------------------------------------
# Versions: the wrapper modules' go.mod files are the single source of truth.
# --------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Versions:
    """The pinned versions of the control-plane components."""

    kubernetes: str  # e.g. v1.36.4
    etcd: str  # e.g. v3.6.10
    kwok: str  # e.g. v0.8.0
    # A client, not part of the control plane: left out of ``key``, so pinning another helm rebuilds helm alone
    # (``build`` checks its version). Empty in a test environment recorded before helm was pinned.
    helm: str = ""  # e.g. v4.3.1

    @property
    def key(self) -> str:
        """The cache directory name: every version that goes into the control plane's binaries."""
        return f"{self.kubernetes}-etcd{self.etcd.removeprefix('v')}-kwok{self.kwok.removeprefix('v')}"

    @property
    def staging(self) -> str:
        """The version of the staging modules (k8s.io/api, ...) that go with ``kubernetes``: v1.36.4 -> v0.36.4."""
        return "v0." + self.kubernetes.removeprefix("v1.")


@dataclasses.dataclass(frozen=True)
class Wrapper:
    """A wrapper module under ``tools/``: it requires one published module and builds commands from it."""

    directory: str
    module: str  # the module it requires
    commands: tuple[tuple[str, str], ...]  # (binary name, package path)

    @property
    def path(self) -> Path:
        """The wrapper module's directory."""
        return TOOLS / self.directory


WRAPPERS = {
    "etcd": Wrapper("etcd-bin", "go.etcd.io/etcd/server/v3", (("etcd", "go.etcd.io/etcd/server/v3"),)),
    "kwok": Wrapper("kwok-bin", "sigs.k8s.io/kwok", (("kwok", "sigs.k8s.io/kwok/cmd/kwok"),)),
    "kubernetes": Wrapper(
        "k8s-bin", "k8s.io/kubernetes", tuple((name, f"k8s.io/kubernetes/cmd/{name}") for name in K8S_COMMANDS)
    ),
    # Helm 4: its module path carries the major version, so a Helm 5 would be a new wrapper, not a new pin.
    "helm": Wrapper("helm-bin", "helm.sh/helm/v4", (("helm", "helm.sh/helm/v4/cmd/helm"),)),
}


def required_version(gomod: Path, module: str) -> str:
    """The version of ``module`` that ``gomod`` requires."""
    try:
        text = gomod.read_text()
    except FileNotFoundError:
        raise TestEnvError(f"{gomod} is missing: run `hack/k8s-testenv pin` to generate it") from None
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if not match:
        raise TestEnvError(f"{gomod} does not require {module}; regenerate it with `hack/k8s-testenv pin`")
    return match.group(1)


def pinned_versions() -> Versions:
    """The versions the committed wrapper modules pin."""
    found = {name: required_version(w.path / "go.mod", w.module) for name, w in WRAPPERS.items()}
    return Versions(**found)


def cache_root() -> Path:
    """``${PHALANX_CACHE:-~/.cache/phalanx}/k8s``: where built binaries live, outside the repository."""
    return Path(os.environ.get("PHALANX_CACHE") or "~/.cache/phalanx").expanduser() / "k8s"


def bin_dir(versions: Versions | None = None) -> Path:
    """The cached binaries for ``versions`` (the pinned ones by default)."""
    return cache_root() / (versions or pinned_versions()).key / "bin"


# --------------------------------------------------------------------------------------------------------------
# Go: finding it, and running it with the settings every build uses.
# --------------------------------------------------------------------------------------------------------------


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def go_binary() -> str:
    """The ``go`` command, or a clear error saying how to get one."""
    found = shutil.which(os.environ.get("GO", "go"))
    if not found:
        raise TestEnvError(
            "Go is not installed (no `go` on PATH). The Kubernetes e2e tests build kube-apiserver, "
            "kube-controller-manager, kube-scheduler, kubectl, etcd and kwok from Go modules and need Go >= 1.26: "
            "install it (https://go.dev/doc/install) and make sure `go version` works, or point $GO at the go binary."
        )
    return found


def go_env() -> dict[str, str]:
    """The environment of every ``go`` command here: no toolchain download, static binaries, no workspace."""
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", CGO_ENABLED="0", GOWORK="off", GOFLAGS="-mod=readonly -buildvcs=false")
    return env


def run_go(args: Sequence[str], cwd: Path, *, capture: bool = True, env: dict[str, str] | None = None) -> str:
    """Run ``go ARGS`` in ``cwd``; return stdout, raise with go's message on failure."""
    result = subprocess.run(
        [go_binary(), *args],
        cwd=cwd,
        env=env or go_env(),
        text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        check=False,
    )
    if result.returncode != 0:
        detail = (result.stderr or "").strip()
        raise TestEnvError(f"`go {' '.join(args)}` failed in {cwd} (exit {result.returncode})\n{detail}")
    return result.stdout or ""


def check_go_version(minimum: str) -> str:
    """Fail clearly if the local Go is older than the ``go`` line ``minimum`` (we never download toolchains)."""
    version = run_go(["env", "GOVERSION"], REPO).strip()
    if _version_tuple(version) < _version_tuple(minimum):
        raise TestEnvError(
            f"{version} is too old: the wrapper modules need Go >= {minimum} (GOTOOLCHAIN=local, so Go will not "
            "download a newer toolchain). Install a newer Go."
        )
    return version


def _gomod_go_line(text: str) -> str:
    match = re.search(r"^go\s+(\S+)", text, re.MULTILINE)
    return match.group(1) if match else "1.26.0"


# --------------------------------------------------------------------------------------------------------------
# pin: (re)generate the wrapper modules for a set of versions.
# --------------------------------------------------------------------------------------------------------------


def upstream_gomod(module: str, version: str) -> str:
    """The go.mod of ``module@version`` exactly as the module proxy serves it."""
    info = json.loads(run_go(["mod", "download", "-json", f"{module}@{version}"], REPO, env=_pin_env()))
    if info.get("Error"):
        raise TestEnvError(f"cannot download {module}@{version}: {info['Error']}")
    return Path(info["GoMod"]).read_text()


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """The modules k8s.io/kubernetes maps onto its ``./staging`` tree: each needs a replace to its published twin."""
    found = re.findall(r"^\s*(k8s\.io/[A-Za-z0-9._/-]+)\s+=>\s+\./staging/", kubernetes_gomod, re.MULTILINE)
    return sorted(set(found))


def _pin_env() -> dict[str, str]:
    env = go_env()
    env["GOFLAGS"] = "-mod=mod -buildvcs=false"  # pinning is the one step allowed to change go.mod/go.sum
    return env


def render_wrapper(wrapper: Wrapper, version: str, upstream: str, replaces: Sequence[tuple[str, str]] = ()) -> str:
    """The go.mod text of a wrapper module, before ``go mod tidy`` adds the indirect requirements.

    ``replaces`` are (module, version) pairs: each module is replaced by the published module of that version.
    """
    lines = [
        "// Generated by `hack/k8s-testenv pin`: do not edit by hand; regenerate to change versions.",
        f"// Builds {', '.join(name for name, _ in wrapper.commands)} from the published {wrapper.module} module.",
        "// Never imported: the module path is deliberately not resolvable.",
        f"module phalanx.invalid/tools/{wrapper.directory}",
        "",
        f"go {_gomod_go_line(upstream)}",
        "",
    ]
    # Only the main module's godebug lines take effect, so carry upstream's over (k8s: `godebug default=go1.26`).
    godebug = re.findall(r"^godebug\s+.+$", upstream, re.MULTILINE)
    if godebug:
        lines += [*godebug, ""]
    lines += ["tool (", *(f"\t{package}" for _, package in wrapper.commands), ")", ""]
    lines += [f"require {wrapper.module} {version}", ""]
    if replaces:
        lines += ["replace (", *(f"\t{module} => {module} {ver}" for module, ver in replaces), ")", ""]
    return "\n".join(lines)


def pin(versions: Versions, out: TextIO = sys.stdout, only: Sequence[str] = ()) -> None:
    """Regenerate ``tools/*-bin/go.mod`` and ``go.sum`` for ``versions`` (needs the module proxy).

    ``only`` names the wrappers to regenerate (keys of ``WRAPPERS``); by default every one.
    """
    go_binary()
    for name, wrapper in WRAPPERS.items():
        if only and name not in only:
            continue
        version = getattr(versions, name)
        upstream = upstream_gomod(wrapper.module, version)
        replaces: list[tuple[str, str]] = []
        if name == "kubernetes":
            # k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them to ./staging, which a
            # dependency's replace cannot do: point each at the published module of the matching version.
            modules = staging_modules(upstream)
            if not modules:
                raise TestEnvError(f"no ./staging replaces found in k8s.io/kubernetes@{version}'s go.mod")
            replaces = [(m, versions.staging) for m in modules]
            print(f"k8s.io/kubernetes {version}: {len(modules)} staging modules -> {versions.staging}", file=out)
        wrapper.path.mkdir(parents=True, exist_ok=True)
        (wrapper.path / "go.mod").write_text(render_wrapper(wrapper, version, upstream, replaces))
        (wrapper.path / "go.sum").unlink(missing_ok=True)
        started = time.monotonic()
        print(f"go mod tidy in tools/{wrapper.directory} ...", file=out, flush=True)
        run_go(["mod", "tidy"], wrapper.path, env=_pin_env())
        print(f"  done in {time.monotonic() - started:.1f}s", file=out, flush=True)


# --------------------------------------------------------------------------------------------------------------
# build: build (or reuse) the cached binaries.
# --------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class BuildStep:
    """What one build step cost: wall time, CPU time and peak resident memory of the go command and its children."""

    name: str
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    reused: bool = False

    def describe(self) -> str:
        """One line for progress output."""
        if self.reused:
            return f"{self.name}: cached"
        return f"{self.name}: {self.wall_s:.1f}s wall, {self.cpu_s:.1f}s CPU, peak RSS {self.peak_rss_mib:.0f} MiB"


#: How each binary reports its version, when not ``--version``: kubectl and helm have no such flag.
VERSION_ARGS = {"kubectl": ("version", "--client"), "helm": ("version", "--short")}


def binary_env() -> dict[str, str]:
    """The environment for running our binaries: kubectl ignores the user's ``~/.kube/kuberc`` preferences."""
    return {**os.environ, "KUBERC": "off"}


def expected_version_text(binary: str, versions: Versions) -> str:
    """A string ``BINARY --version`` (``kubectl version --client``) must print for it to be the pinned one."""
    if binary == "etcd":
        return f"etcd Version: {versions.etcd.removeprefix('v')}\n"
    if binary == "kwok":
        return f"kwok version {versions.kwok} "
    if binary == "kubectl":
        return f"Client Version: {versions.kubernetes}\n"
    if binary == "helm":
        return f"{versions.helm}\n"
    return f"Kubernetes {versions.kubernetes}\n"


def binary_version(path: Path, binary: str | None = None) -> str:
    """What ``PATH --version`` prints, or '' if it does not run.

    ``binary`` (by default the file's name) picks the arguments: ``kubectl`` gets ``version --client``.
    """
    args = VERSION_ARGS.get(binary or path.name, ("--version",))
    try:
        result = subprocess.run(
            [str(path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
            env=binary_env(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout + result.stderr


def binary_is_current(path: Path, binary: str, versions: Versions) -> bool:
    """Whether ``path`` exists and reports the pinned version."""
    return path.is_file() and expected_version_text(binary, versions) in binary_version(path, binary) + "\n"


def kubernetes_ldflags(versions: Versions, build_date: str) -> str:
    """Stamp the version the way upstream's hack/lib/version.sh does, so ``--version`` and skew checks are right."""
    major, minor = versions.kubernetes.removeprefix("v").split(".")[:2]
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for variable, value in (
            ("gitVersion", versions.kubernetes),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", build_date),
        ):
            flags.append(f"-X={package}.{variable}={value}")
    return " ".join(flags)


def helm_ldflags(wrapper: Wrapper, version: str) -> str:
    """Stamp the release the way helm's Makefile does: its source says only ``v4.3``, the tag says ``v4.3.1``."""
    return f"-s -w -X={wrapper.module}/internal/version.version={version}"


def module_release_time(wrapper: Wrapper) -> str:
    """The release time of the wrapped module: a reproducible build date (unlike the wall clock)."""
    try:
        info = json.loads(run_go(["list", "-m", "-json", wrapper.module], wrapper.path))
        stamp = str(info.get("Time") or "")
    except (TestEnvError, ValueError):
        stamp = ""
    return stamp.replace(".000", "") if stamp else "1970-01-01T00:00:00Z"


def _timed(command: Sequence[str], cwd: Path, env: dict[str, str], name: str, log: TextIO) -> BuildStep:
    """Run ``command`` and measure it with wait4, which reports the peak RSS of the process tree it reaped."""
    started = time.monotonic()
    try:
        sink: int | TextIO = log.fileno()  # go's progress straight to the terminal
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        sink = subprocess.PIPE
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    if process.stdout is not None:
        for line in process.stdout:
            log.write(line)
        process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if process.returncode != 0:
        raise TestEnvError(f"{name}: `{' '.join(command)}` failed with exit code {process.returncode} (see above)")
    # ru_maxrss is in KiB on Linux.
    return BuildStep(name, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise builds into one cache directory (two pytest sessions may start at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stale_binaries(versions: Versions | None = None) -> list[str]:
    """The binaries that are missing from the cache or do not report the pinned version."""
    versions = versions or pinned_versions()
    target = bin_dir(versions)
    return [
        binary
        for wrapper in WRAPPERS.values()
        for binary, _ in wrapper.commands
        if not binary_is_current(target / binary, binary, versions)
    ]


def build(*, force: bool = False, out: TextIO = sys.stdout, versions: Versions | None = None) -> list[BuildStep]:
    """Build the pinned binaries into the cache, reusing every one that already reports the right version."""
    versions = versions or pinned_versions()
    target = bin_dir(versions)
    with _locked(target.parent / ".build.lock"):
        wanted = [
            (name, wrapper, binary, package)
            for name, wrapper in WRAPPERS.items()
            for binary, package in wrapper.commands
        ]
        missing = [item for item in wanted if force or not binary_is_current(target / item[2], item[2], versions)]
        if not missing:
            print(f"binaries up to date in {target}", file=out, flush=True)
            return [BuildStep(binary, 0, 0, 0, reused=True) for _, _, binary, _ in wanted]
        needed = max((_gomod_go_line((w.path / "go.mod").read_text()) for w in WRAPPERS.values()), key=_version_tuple)
        go_version = check_go_version(needed)
        print(f"building {', '.join(item[2] for item in missing)} with {go_version} into {target}", file=out)
        target.mkdir(parents=True, exist_ok=True)
        env = go_env()
        steps: list[BuildStep] = []
        downloaded: set[str] = set()
        for name, wrapper, binary, package in wanted:
            if (name, wrapper, binary, package) not in missing:
                steps.append(BuildStep(binary, 0, 0, 0, reused=True))
                continue
            if wrapper.directory not in downloaded:
                print(f"[{wrapper.directory}] downloading modules ...", file=out, flush=True)
                step = _timed([go_binary(), "mod", "download"], wrapper.path, env, f"download {wrapper.directory}", out)
                print(f"  {step.describe()}", file=out, flush=True)
                steps.append(step)
                downloaded.add(wrapper.directory)
            ldflags = "-s -w"
            if name == "kubernetes":
                ldflags = kubernetes_ldflags(versions, module_release_time(wrapper))
            elif name == "helm":
                ldflags = helm_ldflags(wrapper, versions.helm)
            partial = target / f".{binary}.partial-{os.getpid()}"
            command = [go_binary(), "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(partial), package]
            print(f"[{wrapper.directory}] building {binary} ({package}) ...", file=out, flush=True)
            try:
                step = _timed(command, wrapper.path, env, binary, out)
                if not binary_is_current(partial, binary, versions):
                    printed = binary_version(partial, binary).strip()
                    raise TestEnvError(
                        f"{binary} was built but `{binary} {' '.join(VERSION_ARGS.get(binary, ('--version',)))}` "
                        f"does not print {expected_version_text(binary, versions).strip()!r}: {printed!r}"
                    )
                partial.replace(target / binary)
            finally:
                partial.unlink(missing_ok=True)
            print(f"  {step.describe()}", file=out, flush=True)
            steps.append(step)
        (target.parent / "versions.json").write_text(json.dumps(dataclasses.asdict(versions), indent=2) + "\n")
        return steps


#: The wrappers whose binaries a control plane needs to start (helm is a client the chart's tests drive).
CONTROL_PLANE = ("etcd", "kwok", "kubernetes")


def require_binaries(versions: Versions | None = None, wrappers: Sequence[str] = CONTROL_PLANE) -> Path:
    """The cached binary directory, or a clear error if ``build`` has not built ``wrappers``' binaries."""
    versions = versions or pinned_versions()
    target = bin_dir(versions)
    missing = [binary for name in wrappers for binary, _ in WRAPPERS[name].commands if not (target / binary).is_file()]
    if missing:
        raise TestEnvError(f"{', '.join(missing)} not built in {target}: run `hack/k8s-testenv build` first")
    return target


def helm_path(versions: Versions | None = None) -> Path:
    """The pinned helm in the cache, or a clear error if ``build`` has not built it."""
    return require_binaries(versions, ("helm",)) / "helm"
