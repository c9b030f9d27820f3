"""Phalanx's Kubernetes test environment: a real control plane with simulated nodes, no Docker needed.

The binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, and kubectl of the same
Kubernetes release) are built from published Go modules through the wrapper modules under ``tools/`` and cached
outside the repository, keyed by their versions. ``start`` runs them as local processes on free loopback ports
with a throw-away PKI, ``stop`` ends exactly the processes it recorded; ``TestEnv.kubectl`` runs the pinned
kubectl against a started control plane. ``hack/k8s-testenv`` is the command-line face of this module; pytest
fixtures import it.

Standard library only: this runs before any Python dependency is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"
DEFAULT_STAGES = REPO / "tests" / "e2e" / "stages"

#: The annotation kwok selects the nodes it manages by (``--manage-nodes-with-annotation-selector``).
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_TOPOLOGY_ANNOTATION = "phalanx.dev/gpu-topology"

SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"
NODE_IP = "10.240.0.1"

#: The Kubernetes commands built from ``tools/k8s-bin``: the control plane's, and kubectl of the same release.
K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class TestEnvError(RuntimeError):
    """Something the user can act on: the message says what went wrong and what to do."""

    __test__ = False  # not a pytest test class despite the name


# --------------------------------------------------------------------------------------------------------------
# Versions: the wrapper modules' go.mod files are the single source of truth.
# --------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Versions:
    """The pinned versions of the control-plane components."""

    kubernetes: str  # e.g. v1.36.4
    etcd: str  # e.g. v3.6.10
    kwok: str  # e.g. v0.8.0

    @property
    def key(self) -> str:
        """The cache directory name: every version that goes into the binaries."""
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
    return Versions(kubernetes=found["kubernetes"], etcd=found["etcd"], kwok=found["kwok"])


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


def pin(versions: Versions, out: TextIO = sys.stdout) -> None:
    """Regenerate ``tools/{k8s,etcd,kwok}-bin/go.mod`` and ``go.sum`` for ``versions`` (needs the module proxy)."""
    go_binary()
    for name, wrapper in WRAPPERS.items():
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


#: How each binary reports its version, when not ``--version``: kubectl has no such flag.
VERSION_ARGS = {"kubectl": ("version", "--client")}


def _binary_env() -> dict[str, str]:
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
            env=_binary_env(),
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


def require_binaries(versions: Versions | None = None) -> Path:
    """The cached binary directory, or a clear error if ``build`` has not run."""
    versions = versions or pinned_versions()
    target = bin_dir(versions)
    missing = [
        binary for wrapper in WRAPPERS.values() for binary, _ in wrapper.commands if not (target / binary).is_file()
    ]
    if missing:
        raise TestEnvError(f"{', '.join(missing)} not built in {target}: run `hack/k8s-testenv build` first")
    return target


# --------------------------------------------------------------------------------------------------------------
# start / stop / status: the control plane as local processes.
# --------------------------------------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (held open together, so no two are the same)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _openssl(command: str, *extra: str, cwd: Path) -> None:
    """Run ``openssl COMMAND EXTRA...`` (COMMAND is split on spaces; EXTRA arguments are passed as they are)."""
    openssl = shutil.which("openssl")
    if not openssl:
        raise TestEnvError("openssl is not installed: the test environment makes its certificates with it")
    args = [*command.split(), *extra]
    result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TestEnvError(f"`openssl {' '.join(args)}` failed: {result.stderr.strip()}")


def make_pki(directory: Path, days: int = 7) -> None:
    """A throw-away CA, a localhost serving certificate, an admin client certificate and a service-account key."""
    directory.mkdir(parents=True, exist_ok=True)
    valid = ("-days", str(days))

    def sign(name: str, subject: str, extensions: str) -> None:
        _openssl(f"req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr", "-subj", subject, cwd=directory)
        (directory / f"{name}.ext").write_text(extensions)
        x509 = f"x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial -extfile {name}.ext -out {name}.crt"
        _openssl(x509, *valid, cwd=directory)

    ca = "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt"
    _openssl(ca, "-subj", "/CN=phalanx-testenv-ca", *valid, cwd=directory)
    usage = "keyUsage=digitalSignature,keyEncipherment\n"
    sign("serving", "/CN=localhost", f"subjectAltName=DNS:localhost,IP:127.0.0.1\n{usage}extendedKeyUsage=serverAuth\n")
    # CN is the user name, O the group: system:masters is bound to cluster-admin.
    sign("admin", "/O=system:masters/CN=phalanx-admin", f"{usage}extendedKeyUsage=clientAuth\n")
    _openssl("genrsa -out sa.key 2048", cwd=directory)
    for path in directory.glob("*.key"):
        path.chmod(0o600)


def write_kubeconfig(path: Path, server: str, directory: Path) -> None:
    """A kubeconfig with one cluster, user and context; certificate paths are absolute (JSON is valid YAML)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "phalanx-testenv",
                "cluster": {"server": server, "certificate-authority": str(directory / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": "phalanx-admin",
                "user": {
                    "client-certificate": str(directory / "admin.crt"),
                    "client-key": str(directory / "admin.key"),
                },
            }
        ],
        "contexts": [{"name": "phalanx-testenv", "context": {"cluster": "phalanx-testenv", "user": "phalanx-admin"}}],
        "current-context": "phalanx-testenv",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")


def tls_context(directory: Path, *, client_cert: bool = True) -> ssl.SSLContext:
    """Trust the test CA and, by default, present the admin client certificate."""
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    if client_cert:
        context.load_cert_chain(str(directory / "admin.crt"), str(directory / "admin.key"))
    return context


@dataclasses.dataclass
class Component:
    """One running process of the control plane."""

    name: str
    pid: int
    port: int
    health: str  # URL that answers 200 when the component is up
    command: list[str]
    log: str
    started_at: float  # the process's start time in clock ticks since boot, to tell a reused pid apart


@dataclasses.dataclass
class TestEnv:
    """A started control plane, as recorded in ``DIR/env.json``."""

    __test__ = False

    directory: Path
    versions: Versions
    server: str = ""
    components: list[Component] = dataclasses.field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        """``DIR/admin.kubeconfig``: cluster-admin through the client certificate."""
        return self.directory / "admin.kubeconfig"

    @property
    def env_file(self) -> Path:
        """``DIR/env.json``: what ``stop`` and ``status`` read."""
        return self.directory / "env.json"

    @property
    def kubectl_path(self) -> Path:
        """The pinned kubectl in the binary cache: the control plane's own release, so no version skew."""
        return bin_dir(self.versions) / "kubectl"

    def kubectl_command(self, *args: str) -> list[str]:
        """``kubectl ARGS`` against this control plane as the admin, with its discovery cache in ``DIR``."""
        return [
            str(self.kubectl_path),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.directory / 'kubectl-cache'}",  # not ~/.kube/cache: nothing outside DIR
            *args,
        ]

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this control plane (``~/.kube/config`` and ``kuberc`` are not read).

        Args:
            *args: kubectl's arguments, e.g. ``"apply", "-n", "ns", "-f", "job.yaml"``.
            stdin: text for kubectl's standard input (``-f -``).
            check: raise ``TestEnvError`` with kubectl's output if it exits non-zero.
            timeout: seconds before kubectl is killed.

        Returns:
            The finished process, its output captured as text.

        """
        result = subprocess.run(
            self.kubectl_command(*args),
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_binary_env(),
            check=False,
        )
        if check and result.returncode != 0:
            raise TestEnvError(
                f"`kubectl {' '.join(args)}` failed with exit code {result.returncode}:\n"
                f"{(result.stdout + result.stderr).strip()}"
            )
        return result

    def component(self, name: str) -> Component | None:
        """The recorded component called ``name``, if it was started."""
        return next((c for c in self.components if c.name == name), None)

    def save(self) -> None:
        """Write ``env.json`` atomically."""
        data = {
            "directory": str(self.directory),
            "versions": dataclasses.asdict(self.versions),
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "components": [dataclasses.asdict(c) for c in self.components],
        }
        partial = self.env_file.with_suffix(".json.partial")
        partial.write_text(json.dumps(data, indent=2) + "\n")
        partial.replace(self.env_file)

    @classmethod
    def load(cls, directory: Path) -> TestEnv:
        """Read the environment recorded in ``directory``."""
        path = directory / "env.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise TestEnvError(f"{path} not found: no test environment was started in {directory}") from None
        return cls(
            directory=Path(data["directory"]),
            versions=Versions(**data["versions"]),
            server=data["server"],
            components=[Component(**c) for c in data["components"]],
        )

    def tls(self) -> ssl.SSLContext:
        """A TLS context that trusts the test CA and authenticates as the admin."""
        return tls_context(self.directory)

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", timeout: float = 30
    ) -> tuple[int, Any]:
        """A minimal Kubernetes API call as the admin: (status, decoded JSON body or text)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, context=self.tls(), timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of every component's log, for failure reports."""
        parts = []
        for component in self.components:
            parts.append(f"----- {component.name} ({component.log}), last {lines} lines -----")
            parts.append(tail(Path(component.log), lines))
        return "\n".join(parts)


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 200 * lines))
            text = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _process_start_ticks(pid: int) -> float:
    """Field 22 of /proc/PID/stat (start time since boot), or -1 if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    fields = stat.rsplit(")", 1)[1].split()
    return float(fields[19]) if fields[0] != "Z" else -1


def is_running(component: Component) -> bool:
    """Whether the recorded process still runs (same pid and same start time: not a reused pid)."""
    return _process_start_ticks(component.pid) == component.started_at


def probe(url: str, context: ssl.SSLContext | None, timeout: float = 5) -> tuple[bool, str]:
    """GET ``url``: (answered 200, body or error)."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as response:
            return response.status == 200, response.read().decode(errors="replace").strip()
    except urllib.error.HTTPError as error:
        return False, f"HTTP {error.code}: {error.read().decode(errors='replace').strip()[:300]}"
    except (OSError, ValueError) as error:
        return False, str(error)


def _parent_death_signal() -> Callable[[], None]:
    """A pre-exec hook asking Linux to SIGKILL the child when the thread that started it dies (PR_SET_PDEATHSIG).

    SIGKILL, not SIGTERM: every component gets it at once, and kube-apiserver hangs in its graceful shutdown
    once etcd is gone. The state is throw-away.
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the hook runs between fork and exec
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)

    return hook


class _Starter:
    """Starts the components one after the other, recording each in env.json as soon as it runs."""

    def __init__(self, env: TestEnv, out: TextIO, die_with_parent: bool) -> None:
        self.env = env
        self.out = out
        self.t0 = time.monotonic()
        self.preexec = _parent_death_signal() if die_with_parent else None

    def say(self, message: str) -> None:
        print(f"{time.monotonic() - self.t0:6.1f}s  {message}", file=self.out, flush=True)

    def spawn(
        self, name: str, command: list[str], port: int, health: str, extra_env: dict[str, str] | None = None
    ) -> Component:
        log = self.env.directory / f"{name}.log"
        with log.open("wb") as handle:
            process = subprocess.Popen(
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.env.directory,
                env={**os.environ, **(extra_env or {})},
                start_new_session=True,  # its own process group: signals to our group do not reach it
                preexec_fn=self.preexec,
            )
        _CHILDREN[process.pid] = process  # kept, so it is reaped (no zombie) and never garbage-collected running
        component = Component(name, process.pid, port, health, command, str(log), _process_start_ticks(process.pid))
        self.env.components.append(component)
        self.env.save()
        return component

    def wait_healthy(self, component: Component, context: ssl.SSLContext | None, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if not is_running(component):
                raise TestEnvError(
                    f"{component.name} exited during start-up; its log ends with:\n{tail(Path(component.log))}"
                )
            healthy, last = probe(component.health, context, timeout=5)
            if healthy:
                self.say(f"{component.name} ready (pid {component.pid}, port {component.port})")
                return
            time.sleep(0.2)
        raise TestEnvError(
            f"{component.name} not healthy after {timeout:.0f}s ({component.health}: {last}); "
            f"its log ends with:\n{tail(Path(component.log))}"
        )


def _flag_map(values: Mapping[str, bool] | Mapping[str, str] | None) -> str:
    """``{"A": True, "b/v1": "true"}`` as a Kubernetes map flag value: ``A=true,b/v1=true`` (sorted)."""
    parts = []
    for key, value in sorted((values or {}).items()):
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        parts.append(f"{key}={text}")
    return ",".join(parts)


def parse_flag_map(text: str) -> dict[str, str]:
    """``A=true,B=false`` into ``{"A": "true", "B": "false"}`` (for the command line's map options)."""
    result = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TestEnvError(f"expected KEY=VALUE in {text!r}, got {item!r}")
        result[key] = value
    return result


def stage_files(stages: Path) -> list[Path]:
    """The kwok Stage files: one file, or every *.yaml in a directory."""
    files = sorted(stages.glob("*.yaml")) if stages.is_dir() else [stages]
    if not files or not all(f.is_file() for f in files):
        raise TestEnvError(f"no kwok stage files at {stages}: kwok >= v0.8.0 has no default stages")
    return files


def start(
    directory: Path,
    *,
    scheduler: bool = False,
    stages: Path = DEFAULT_STAGES,
    timeout: float = 180,
    out: TextIO = sys.stdout,
    versions: Versions | None = None,
    die_with_parent: bool = False,
    feature_gates: Mapping[str, bool] | None = None,
    runtime_config: Mapping[str, str] | None = None,
    apiserver_args: Sequence[str] = (),
    scheduler_args: Sequence[str] = (),
) -> TestEnv:
    """Start etcd, kube-apiserver, kube-controller-manager and kwok (and kube-scheduler) with state in ``directory``.

    With ``die_with_parent`` the components are killed if this process dies without calling ``stop`` (a test run
    killed mid-way); without it (the command line) they outlive the process that started them.

    ``feature_gates`` (e.g. ``{"GenericWorkload": True, "GangScheduling": True}``) go to every Kubernetes
    component (``--feature-gates``: kube-apiserver, kube-controller-manager, kube-scheduler); ``runtime_config``
    (e.g. ``{"scheduling.k8s.io/v1alpha2": "true"}``) to kube-apiserver (``--runtime-config``), to serve alpha API
    versions. ``apiserver_args`` and ``scheduler_args`` are appended to those components' command lines as given
    (e.g. ``--max-requests-inflight=0``, ``--kube-api-qps=1000``).

    Returns once every component answers its health check. On failure everything already started is stopped
    and the error carries the failing component's log tail. Starting again in the same directory (once stopped)
    begins with an empty cluster.
    """
    versions = versions or pinned_versions()
    binaries = require_binaries(versions)
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "env.json").exists():
        previous = TestEnv.load(directory)
        if any(is_running(c) for c in previous.components):
            raise TestEnvError(f"a test environment is already running in {directory}: stop it first")
    # A fresh cluster every time: the state of a previous run in this directory is thrown away.
    for stale in ("etcd", "kwok"):
        shutil.rmtree(directory / stale, ignore_errors=True)
    gates = [f"--feature-gates={_flag_map(feature_gates)}"] if feature_gates else []
    env = TestEnv(directory=directory, versions=versions)
    starter = _Starter(env, out, die_with_parent)
    files = stage_files(stages)
    try:
        make_pki(directory)
        starter.say("certificates written")
        etcd_port, peer_port, api_port, kcm_port, kwok_port, scheduler_port = free_ports(6)
        env.server = f"https://127.0.0.1:{api_port}"
        tls = env.tls()
        local_tls = ssl.create_default_context(cafile=str(directory / "ca.crt"))

        etcd = starter.spawn(
            "etcd",
            [
                str(binaries / "etcd"),
                "--name=node0",
                f"--data-dir={directory / 'etcd'}",
                "--unsafe-no-fsync",  # test data: speed over durability
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=node0=http://127.0.0.1:{peer_port}",
                "--log-level=warn",
            ],
            etcd_port,
            f"http://127.0.0.1:{etcd_port}/health",
        )
        starter.wait_healthy(etcd, None, timeout)

        apiserver = starter.spawn(
            "kube-apiserver",
            [
                str(binaries / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",  # without it, a machine with no default route fails to start
                f"--secure-port={api_port}",
                f"--cert-dir={directory}",
                f"--tls-cert-file={directory / 'serving.crt'}",
                f"--tls-private-key-file={directory / 'serving.key'}",
                f"--client-ca-file={directory / 'ca.crt'}",
                f"--service-account-issuer={env.server}",
                f"--service-account-key-file={directory / 'sa.key'}",
                f"--service-account-signing-key-file={directory / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                "--disable-admission-plugins=ServiceAccount",  # pods need no default ServiceAccount to exist first
                "--allow-privileged=true",
                "--profiling=false",
                *gates,
                *([f"--runtime-config={_flag_map(runtime_config)}"] if runtime_config else []),
                *apiserver_args,
            ],
            api_port,
            f"{env.server}/readyz",
        )
        starter.wait_healthy(apiserver, tls, timeout)
        write_kubeconfig(env.kubeconfig, env.server, directory)

        serving = [
            f"--tls-cert-file={directory / 'serving.crt'}",
            f"--tls-private-key-file={directory / 'serving.key'}",
        ]
        kcm = starter.spawn(
            "kube-controller-manager",
            [
                str(binaries / "kube-controller-manager"),
                f"--kubeconfig={env.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                *serving,
                f"--root-ca-file={directory / 'ca.crt'}",
                f"--service-account-private-key-file={directory / 'sa.key'}",
                "--profiling=false",
                *gates,
            ],
            kcm_port,
            f"https://127.0.0.1:{kcm_port}/healthz",
        )
        kwok = starter.spawn(
            "kwok",
            [
                str(binaries / "kwok"),
                f"--kubeconfig={env.kubeconfig}",
                *(f"--config={f.resolve()}" for f in files),
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector={}={}".format(*FAKE_NODE_ANNOTATION),
                f"--cidr={POD_CIDR}",
                f"--node-ip={NODE_IP}",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{kwok_port}",
            ],
            kwok_port,
            f"http://127.0.0.1:{kwok_port}/healthz",
            extra_env={"KWOK_WORKDIR": str(directory / "kwok")},  # ignore any ~/.kwok/kwok.yaml
        )
        started = [kcm, kwok]
        if scheduler:
            started.append(
                starter.spawn(
                    "kube-scheduler",
                    [
                        str(binaries / "kube-scheduler"),
                        f"--kubeconfig={env.kubeconfig}",
                        "--leader-elect=false",
                        "--bind-address=127.0.0.1",
                        f"--secure-port={scheduler_port}",
                        *serving,
                        "--profiling=false",
                        *gates,
                        *scheduler_args,
                    ],
                    scheduler_port,
                    f"https://127.0.0.1:{scheduler_port}/healthz",
                )
            )
        for component in started:
            starter.wait_healthy(component, local_tls, timeout)
        starter.say(f"control plane ready; kubeconfig {env.kubeconfig}")
        return env
    except BaseException:
        stop(env, out=out)
        raise


def _signal(component: Component, sig: signal.Signals) -> None:
    if is_running(component):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.pid, sig)  # the component leads its own group (start_new_session)


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _reap(pid: int) -> None:
    """Collect the exit status if the process is a child of this Python process (else init reaps it)."""
    process = _CHILDREN.get(pid)
    if process is not None and process.poll() is not None:
        del _CHILDREN[pid]


def stop(env: TestEnv, *, grace: float = 15, out: TextIO | None = sys.stdout) -> None:
    """Stop the recorded processes in reverse start order: SIGTERM, then SIGKILL if one is still up after ``grace``.

    One at a time, so that kube-apiserver shuts down while etcd still answers (with etcd gone it hangs), and the
    API clients (kwok, the controller manager, the scheduler) go before the API server.
    """
    stopped = []
    for component in reversed(env.components):
        if not is_running(component):
            _reap(component.pid)
            continue
        started = time.monotonic()
        _signal(component, signal.SIGTERM)
        while is_running(component) and time.monotonic() - started < grace:
            _reap(component.pid)
            if is_running(component):
                time.sleep(0.02)
        if is_running(component):
            if out:
                print(f"{component.name} (pid {component.pid}) ignored SIGTERM for {grace:.0f}s: SIGKILL", file=out)
            _signal(component, signal.SIGKILL)
            for _ in range(250):
                _reap(component.pid)
                if not is_running(component):
                    break
                time.sleep(0.02)
        stopped.append(f"{component.name} ({time.monotonic() - started:.1f}s)")
    if out:
        print(f"stopped {', '.join(stopped) or 'nothing (no recorded process was running)'}", file=out)


def status(env: TestEnv) -> list[tuple[str, bool, str]]:
    """Per component: (name, healthy, detail)."""
    local_tls = ssl.create_default_context(cafile=str(env.directory / "ca.crt"))
    rows = []
    for component in env.components:
        if not is_running(component):
            rows.append((component.name, False, f"not running (pid {component.pid})"))
            continue
        context = env.tls() if component.name == "kube-apiserver" else local_tls
        healthy, detail = probe(component.health, context)
        rows.append((component.name, healthy, f"pid {component.pid}, {component.health}: {detail[:80]}"))
    return rows


# --------------------------------------------------------------------------------------------------------------
# Fake GPU nodes.
# --------------------------------------------------------------------------------------------------------------


def gpu_topology(gpus: int, numa_nodes: int = 2, nvlink: str = "NV18") -> dict[str, Any]:
    """A DGX-like topology: GPUs split evenly over NUMA nodes, every GPU pair linked by NVLink (``nvlink``)."""
    per_numa = max(1, gpus // max(1, numa_nodes))
    return {
        "numaNodes": [
            {"id": n, "gpus": [g for g in range(gpus) if min(g // per_numa, numa_nodes - 1) == n]}
            for n in range(numa_nodes)
        ],
        "nvlink": {"type": nvlink, "pairs": [[a, b] for a in range(gpus) for b in range(a + 1, gpus)]},
    }


def fake_gpu_node(
    name: str,
    *,
    gpus: int = 8,
    product: str = "NVIDIA-H100-80GB-HBM3",
    cpu: str = "128",
    memory: str = "2Ti",
    pods: str = "110",
    numa_nodes: int = 2,
    topology: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node manifest kwok will manage: its status (capacity, allocatable) is kept as given on create."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                FAKE_NODE_ANNOTATION[0]: FAKE_NODE_ANNOTATION[1],
                GPU_TOPOLOGY_ANNOTATION: json.dumps(topology or gpu_topology(gpus, numa_nodes), separators=(",", ":")),
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                GPU_PRODUCT_LABEL: product,
                "nvidia.com/gpu.count": str(gpus),
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def create_fake_gpu_nodes(env: TestEnv, names: Sequence[str], **options: Any) -> list[dict[str, Any]]:
    """Create fake GPU nodes through the API (status included: a create keeps it)."""
    created = []
    for name in names:
        code, body = env.request("POST", "/api/v1/nodes", fake_gpu_node(name, **options))
        if code != 201:
            raise TestEnvError(f"creating node {name} failed: HTTP {code}: {body}")
        created.append(body)
    return created


# --------------------------------------------------------------------------------------------------------------
# Command line (hack/k8s-testenv).
# --------------------------------------------------------------------------------------------------------------


def shell_exports(env: TestEnv) -> str:
    """Shell lines that point ``kubectl`` at ``env``: its kubeconfig, and the pinned kubectl first on ``PATH``."""
    return "\n".join(
        [
            f"# kubectl {env.versions.kubernetes} and the control plane in {env.directory}",
            f"export KUBECONFIG={shlex.quote(str(env.kubeconfig))}",
            f'export PATH={shlex.quote(str(env.kubectl_path.parent))}:"$PATH"',
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hack/k8s-testenv``."""
    parser = argparse.ArgumentParser(
        prog="hack/k8s-testenv",
        description="Build and run a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, "
        "kwok, optionally kube-scheduler) for Phalanx's e2e tests, and the same release's kubectl to drive it.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build the pinned binaries into the cache, or reuse them")
    build_cmd.add_argument("--force", action="store_true", help="rebuild even if the cached binaries are current")
    start_cmd = commands.add_parser("start", help="start a control plane with its state and logs in DIR")
    start_cmd.add_argument("--dir", type=Path, required=True)
    start_cmd.add_argument("--scheduler", action="store_true", help="also run the stock kube-scheduler")
    start_cmd.add_argument("--stages", type=Path, default=DEFAULT_STAGES, help="kwok Stage YAML file or directory")
    start_cmd.add_argument("--timeout", type=float, default=180, help="seconds each component may take to be ready")
    start_cmd.add_argument("--build", action="store_true", help="build (or reuse) the binaries first")
    start_cmd.add_argument(
        "--feature-gates",
        default="",
        help="Kubernetes feature gates for every component, e.g. GenericWorkload=true,GangScheduling=true",
    )
    start_cmd.add_argument(
        "--runtime-config", default="", help="API versions kube-apiserver serves, e.g. scheduling.k8s.io/v1alpha2=true"
    )
    for name, text in (("stop", "stop the control plane recorded in DIR"), ("status", "report its components")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--dir", type=Path, required=True)
    nodes_cmd = commands.add_parser("add-nodes", help="create fake GPU nodes in the control plane in DIR")
    nodes_cmd.add_argument("--dir", type=Path, required=True)
    nodes_cmd.add_argument("--count", type=int, default=2)
    nodes_cmd.add_argument("--prefix", default="gpu-node-")
    nodes_cmd.add_argument("--gpus", type=int, default=8)
    nodes_cmd.add_argument("--product", default="NVIDIA-H100-80GB-HBM3")
    env_cmd = commands.add_parser(
        "env",
        help='print shell exports for the control plane in DIR: eval "$(hack/k8s-testenv env --dir DIR)"',
        description="Print KUBECONFIG for the control plane in DIR and a PATH with the pinned kubectl first.",
    )
    env_cmd.add_argument("--dir", type=Path, required=True)
    kubectl_cmd = commands.add_parser(
        "kubectl",
        help="run the pinned kubectl against the control plane in DIR: kubectl --dir DIR -- get pods -A",
        description="Run the pinned kubectl as cluster-admin against the control plane in DIR; its exit code is ours.",
    )
    kubectl_cmd.add_argument("--dir", type=Path, required=True)
    kubectl_cmd.add_argument("args", nargs=argparse.REMAINDER, help="kubectl's arguments, after `--`")
    commands.add_parser("versions", help="print the pinned versions and the cache directory")
    pin_cmd = commands.add_parser("pin", help="regenerate tools/*/go.mod and go.sum for new versions")
    pin_cmd.add_argument("--kubernetes", help="e.g. v1.36.4 (default: the pinned one)")
    pin_cmd.add_argument("--etcd", help="e.g. v3.6.10")
    pin_cmd.add_argument("--kwok", help="e.g. v0.8.0")
    args = parser.parse_args(argv)

    try:
        if args.command == "build":
            started = time.monotonic()
            steps = build(force=args.force)
            print(f"build finished in {time.monotonic() - started:.1f}s; binaries in {bin_dir()}")
            for step in steps:
                print(f"  {step.describe()}")
        elif args.command == "start":
            if args.build:
                build()
            gates = {key: value.lower() == "true" for key, value in parse_flag_map(args.feature_gates).items()}
            env = start(
                args.dir,
                scheduler=args.scheduler,
                stages=args.stages,
                timeout=args.timeout,
                feature_gates=gates,
                runtime_config=parse_flag_map(args.runtime_config),
            )
            print(env.kubeconfig)
        elif args.command == "stop":
            stop(TestEnv.load(args.dir.resolve()))
        elif args.command == "status":
            env = TestEnv.load(args.dir.resolve())
            rows = status(env)
            print(f"server {env.server}  kubeconfig {env.kubeconfig}  versions {env.versions.key}")
            for name, healthy, detail in rows:
                print(f"  {name:<24} {'ok' if healthy else 'DOWN':<5} {detail}")
            return 0 if rows and all(healthy for _, healthy, _ in rows) else 1
        elif args.command == "add-nodes":
            env = TestEnv.load(args.dir.resolve())
            names = [f"{args.prefix}{i}" for i in range(args.count)]
            create_fake_gpu_nodes(env, names, gpus=args.gpus, product=args.product)
            print("\n".join(names))
        elif args.command == "env":
            print(shell_exports(TestEnv.load(args.dir.resolve())))
        elif args.command == "kubectl":
            env = TestEnv.load(args.dir.resolve())
            kubectl_args = args.args[1:] if args.args[:1] == ["--"] else args.args
            return subprocess.run(env.kubectl_command(*kubectl_args), env=_binary_env(), check=False).returncode
        elif args.command == "versions":
            versions = pinned_versions()
            print(json.dumps({**dataclasses.asdict(versions), "bin": str(bin_dir(versions))}, indent=2))
        elif args.command == "pin":
            current = pinned_versions()
            pin(
                Versions(
                    kubernetes=args.kubernetes or current.kubernetes,
                    etcd=args.etcd or current.etcd,
                    kwok=args.kwok or current.kwok,
                )
            )
    except TestEnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
