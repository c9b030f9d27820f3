"""The control plane as local processes: ``start`` on free loopback ports, ``stop`` exactly what it recorded, status.

``start`` runs etcd, kube-apiserver, kube-controller-manager, kwok (and optionally kube-scheduler) with a
throw-away PKI (``testenv_pki``), records each process in ``DIR/env.json`` with its start time (so a reused pid
is never taken for it), and waits for each to be healthy; ``TestEnv.kubectl`` runs the pinned kubectl against it.
``stop_component`` and ``start_component`` take one component down and bring it back as it was (a chaos test
restarting kube-apiserver while etcd keeps the cluster's state).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from testenv_base import DEFAULT_STAGES, TestEnvError
from testenv_build import Versions, bin_dir, binary_env, pinned_versions, require_binaries
from testenv_logs import logs_crd
from testenv_pki import make_pki, tls_context, write_kubeconfig

#: The annotation kwok selects the nodes it manages by (``--manage-nodes-with-annotation-selector``).
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"
#: The fake nodes' InternalIP: loopback, where kube-apiserver reaches kwok's kubelet-like server for Pod logs
#: (``testenv_logs``); the node stage writes kwok's port as the kubelet endpoint.
NODE_IP = "127.0.0.1"


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
            env=binary_env(),
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
        self,
        name: str,
        command: list[str],
        port: int,
        health: str,
        extra_env: dict[str, str] | None = None,
        *,
        replace: bool = False,
    ) -> Component:
        """Run one component; with ``replace`` it takes the place of the record of that name (a restart)."""
        log = self.env.directory / f"{name}.log"
        with log.open("ab" if replace else "wb") as handle:  # a restart keeps the log of the run before it
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
        index = next((i for i, c in enumerate(self.env.components) if c.name == name), None) if replace else None
        if index is None:
            self.env.components.append(component)
        else:
            # The same place in the list: ``stop`` ends components in reverse start order.
            self.env.components[index] = component
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


def _establish_crd(env: TestEnv, crd: dict[str, Any], timeout: float) -> None:
    """Create a CustomResourceDefinition (409 counts as done) and wait until the API server serves its kind."""
    code, body = env.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    if code not in (201, 409):
        raise TestEnvError(f"creating {crd['metadata']['name']} failed: HTTP {code}: {body}")
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, body = env.request("GET", path)
        conditions = (body.get("status") or {}).get("conditions") or [] if isinstance(body, dict) else []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        time.sleep(0.1)
    raise TestEnvError(f"{crd['metadata']['name']} not established after {timeout:.0f}s")


def _own_env(directory: Path, name: str) -> dict[str, str] | None:
    """What a component's environment needs besides ours: kwok works in DIR, so no ``~/.kwok/kwok.yaml`` is read."""
    return {"KWOK_WORKDIR": str(directory / "kwok")} if name == "kwok" else None


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
                # A fake node's Hostname address is its name, which nothing resolves: kwok is at its InternalIP.
                "--kubelet-preferred-address-types=InternalIP",
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
        # kwok watches Logs objects (--enable-crds) only once their kind is served: declare it before kwok starts.
        _establish_crd(env, logs_crd(), timeout)
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
                f"--node-port={kwok_port}",  # the node stage's NodePort: the kubelet endpoint the API server dials
                "--enable-crds=Logs",  # Pod logs from files named by Logs objects (testenv_logs)
            ],
            kwok_port,
            f"http://127.0.0.1:{kwok_port}/healthz",
            extra_env=_own_env(directory, "kwok"),
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
        took = _stop_one(component, grace, out)
        if took is not None:
            stopped.append(f"{component.name} ({took:.1f}s)")
    if out:
        print(f"stopped {', '.join(stopped) or 'nothing (no recorded process was running)'}", file=out)


def _stop_one(component: Component, grace: float, out: TextIO | None) -> float | None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; the seconds it took, or None if it was not running."""
    if not is_running(component):
        _reap(component.pid)
        return None
    started = time.monotonic()
    if grace > 0:
        _signal(component, signal.SIGTERM)
    while is_running(component) and time.monotonic() - started < grace:
        _reap(component.pid)
        if is_running(component):
            time.sleep(0.02)
    if is_running(component):
        if out and grace > 0:
            print(f"{component.name} (pid {component.pid}) ignored SIGTERM for {grace:.0f}s: SIGKILL", file=out)
        _signal(component, signal.SIGKILL)
        for _ in range(250):
            _reap(component.pid)
            if not is_running(component):
                break
            time.sleep(0.02)
    return time.monotonic() - started


def stop_component(env: TestEnv, name: str, *, grace: float = 15, out: TextIO | None = None) -> None:
    """Stop one component of a running control plane, the others left running; ``start_component`` brings it back.

    SIGTERM, then SIGKILL after ``grace`` seconds; ``grace=0`` sends SIGKILL at once (a crash). Its data stays
    (etcd's directory, the certificates), so the component started again serves the same cluster.
    """
    component = env.component(name)
    if component is None:
        raise TestEnvError(f"no component {name!r} in {env.directory}; it has {[c.name for c in env.components]}")
    _stop_one(component, grace, out)


def start_component(
    env: TestEnv, name: str, *, timeout: float = 180, die_with_parent: bool = False, out: TextIO | None = None
) -> Component:
    """Start a stopped component again with the command line it was recorded with, and wait until it is healthy.

    The same binary, flags, port, certificates and data as before (so clients reconnect to the same address and
    trust it as before); its log goes on in the same file, and ``env.json`` records the new process in the old
    one's place. ``die_with_parent`` as for ``start`` (the process is tied to the thread that calls this).
    """
    component = env.component(name)
    if component is None:
        raise TestEnvError(f"no component {name!r} in {env.directory}; it has {[c.name for c in env.components]}")
    if is_running(component):
        raise TestEnvError(f"{name} is still running (pid {component.pid}): stop it first")
    starter = _Starter(env, out or io.StringIO(), die_with_parent)
    own_env = _own_env(env.directory, name)
    started = starter.spawn(name, component.command, component.port, component.health, own_env, replace=True)
    starter.wait_healthy(started, _health_context(env, name), timeout)
    return started


def _health_context(env: TestEnv, name: str) -> ssl.SSLContext:
    """How to ask a component's health endpoint: kube-apiserver wants the admin's certificate, the rest the CA."""
    return env.tls() if name == "kube-apiserver" else ssl.create_default_context(cafile=str(env.directory / "ca.crt"))


def status(env: TestEnv) -> list[tuple[str, bool, str]]:
    """Per component: (name, healthy, detail)."""
    rows = []
    for component in env.components:
        if not is_running(component):
            rows.append((component.name, False, f"not running (pid {component.pid})"))
            continue
        healthy, detail = probe(component.health, _health_context(env, component.name))
        rows.append((component.name, healthy, f"pid {component.pid}, {component.health}: {detail[:80]}"))
    return rows
