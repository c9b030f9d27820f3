"""Phalanx's Kubernetes test environment: a real control plane with simulated nodes, no Docker needed.

The binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, kubectl of the same
Kubernetes release, and helm) are built from published Go modules through the wrapper modules under ``tools/``
and cached outside the repository, keyed by their versions. ``start`` runs them as local processes on free
loopback ports with a throw-away PKI, ``stop`` ends exactly the processes it recorded; ``TestEnv.kubectl`` runs
the pinned kubectl against a started control plane. ``hack/k8s-testenv`` is the command-line face of this module; pytest
fixtures import it.

Standard library only: this runs before any Python dependency is installed.

The parts are modules beside it (``hack/testenv_*.py``, standard library only too): ``testenv_build`` (versions,
Go, building and caching the binaries), ``testenv_pki`` (certificates and kubeconfig), ``testenv_processes``
(start, stop, status of the control plane's processes) and ``testenv_nodes`` (fake GPU nodes). This module
re-exports what they offer, so ``import k8s_testenv`` is the one name fixtures and benchmarks use.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from testenv_base import (
    DEFAULT_STAGES,
    REPO,
    TOOLS,
    TestEnvError,
)
from testenv_build import (
    CONTROL_PLANE,
    K8S_COMMANDS,
    VERSION_ARGS,
    WRAPPERS,
    BuildStep,
    Versions,
    Wrapper,
    bin_dir,
    binary_env,
    binary_is_current,
    binary_version,
    build,
    cache_root,
    check_go_version,
    expected_version_text,
    go_binary,
    go_env,
    helm_ldflags,
    helm_path,
    kubernetes_ldflags,
    module_release_time,
    pin,
    pinned_versions,
    render_wrapper,
    require_binaries,
    required_version,
    run_go,
    staging_modules,
    stale_binaries,
    upstream_gomod,
)
from testenv_logs import cri_line, logs_crd, set_pod_logs, write_log
from testenv_nodes import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    GPU_TOPOLOGY_ANNOTATION,
    create_fake_gpu_nodes,
    fake_gpu_node,
    gpu_topology,
)
from testenv_pki import (
    make_pki,
    tls_context,
    write_kubeconfig,
)
from testenv_processes import (
    FAKE_NODE_ANNOTATION,
    NODE_IP,
    POD_CIDR,
    SERVICE_CIDR,
    Component,
    TestEnv,
    free_ports,
    is_running,
    parse_flag_map,
    probe,
    stage_files,
    start,
    start_component,
    status,
    stop,
    stop_component,
    tail,
)

__all__ = [
    "CONTROL_PLANE",
    "DEFAULT_STAGES",
    "FAKE_NODE_ANNOTATION",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "GPU_TOPOLOGY_ANNOTATION",
    "K8S_COMMANDS",
    "NODE_IP",
    "POD_CIDR",
    "REPO",
    "SERVICE_CIDR",
    "TOOLS",
    "VERSION_ARGS",
    "WRAPPERS",
    "BuildStep",
    "Component",
    "TestEnv",
    "TestEnvError",
    "Versions",
    "Wrapper",
    "bin_dir",
    "binary_env",
    "binary_is_current",
    "binary_version",
    "build",
    "cache_root",
    "check_go_version",
    "create_fake_gpu_nodes",
    "cri_line",
    "expected_version_text",
    "fake_gpu_node",
    "free_ports",
    "go_binary",
    "go_env",
    "gpu_topology",
    "helm_ldflags",
    "helm_path",
    "is_running",
    "kubernetes_ldflags",
    "logs_crd",
    "main",
    "make_pki",
    "module_release_time",
    "parse_flag_map",
    "pin",
    "pinned_versions",
    "probe",
    "render_wrapper",
    "require_binaries",
    "required_version",
    "run_go",
    "set_pod_logs",
    "shell_exports",
    "stage_files",
    "staging_modules",
    "stale_binaries",
    "start",
    "start_component",
    "status",
    "stop",
    "stop_component",
    "tail",
    "tls_context",
    "upstream_gomod",
    "write_kubeconfig",
    "write_log",
]

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
    start_cmd.add_argument(
        "--dir", type=Path, required=True, help="where the control plane keeps its state, logs and kubeconfig"
    )
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
    nodes_cmd = commands.add_parser(
        "add-nodes",
        help="create fake GPU nodes in the control plane in DIR",
        description="Create kwok nodes that advertise nvidia.com/gpu (128 CPUs, 2 TiB, 110 pods each) in the "
        "control plane in DIR, and print their names.",
    )
    nodes_cmd.add_argument("--dir", type=Path, required=True, help="the directory given to `start`")
    nodes_cmd.add_argument("--count", type=int, default=2, help="how many nodes (default: %(default)s)")
    nodes_cmd.add_argument(
        "--prefix", default="gpu-node-", help="node names are PREFIX0, PREFIX1, ... (default: %(default)s)"
    )
    nodes_cmd.add_argument("--gpus", type=int, default=8, help="GPUs each node advertises (default: %(default)s)")
    nodes_cmd.add_argument(
        "--product",
        default="NVIDIA-H100-80GB-HBM3",
        help="the nvidia.com/gpu.product label, as NVIDIA's GPU feature discovery writes it (default: %(default)s)",
    )
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
    pin_cmd = commands.add_parser(
        "pin",
        help="regenerate tools/*/go.mod and go.sum for new versions",
        description="Regenerate the wrapper modules of the versions given (all of them at their pins if none is).",
    )
    pin_cmd.add_argument("--kubernetes", help="e.g. v1.36.4 (default: the pinned one)")
    pin_cmd.add_argument("--etcd", help="e.g. v3.6.10")
    pin_cmd.add_argument("--kwok", help="e.g. v0.8.0")
    pin_cmd.add_argument("--helm", help="a Helm 4 release, e.g. v4.3.1")
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
            return subprocess.run(env.kubectl_command(*kubectl_args), env=binary_env(), check=False).returncode
        elif args.command == "versions":
            versions = pinned_versions()
            print(json.dumps({**dataclasses.asdict(versions), "bin": str(bin_dir(versions))}, indent=2))
        elif args.command == "pin":
            given = {name: getattr(args, name) for name in WRAPPERS if getattr(args, name)}
            # Only the wrappers not given must already exist, so a new wrapper is pinned by naming its version.
            current = {
                name: required_version(wrapper.path / "go.mod", wrapper.module)
                for name, wrapper in WRAPPERS.items()
                if name not in given
            }
            pin(Versions(**current, **given), only=tuple(given))
    except TestEnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
