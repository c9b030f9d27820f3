"""Rendering parity (issue 15, point 3): each backend's record of a job, and the comparison of the two.

Issue 15 asks that the Pods' environment, hostfile ConfigMap and headless Service on Kubernetes match what the
embedded runtime gave the replicas that really trained, generated from the same JobType. This module reads each
backend's record of a job (``JobFacts``); ``support.parity_view`` turns a record into the view both must agree
on. ``assert_kubernetes_renders_the_same`` is what a framework's test calls once its job succeeded.

The embedded record is what the working replicas received: the launch file (``launch.json``, the command line
and the command's whole environment, written by ``adapters.executor.local`` before the replica starts) and the
hostfile of each replica's run directory under the state directory (``services.embedded.layout``), which
outlive a succeeded job until the job is deleted; the address book is the job's ``status.endpoints``. The
Kubernetes record is read from Pod, ConfigMap and Service objects: rendered by ``adapters.kubernetes.rendering``
(the code the operator runs), or read back from an API server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.adapters.executor.local import LAUNCH_FILE
from phalanx.adapters.kubernetes.rendering import (
    HOSTFILE_KEY,
    HOSTFILE_VOLUME,
    LABEL_JOB,
    OUTPUTS_VOLUME,
    PORT_NAME,
    needs_service,
    render_headless_service,
    render_hostfile_configmap,
    render_pods,
)
from phalanx.core.rendezvous import Endpoint, replica_names
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes, parse_jobtype
from phalanx.model.validation import validate_job, with_namespace
from phalanx.services.embedded.controller import HOSTFILE
from phalanx.services.embedded.layout import StateLayout
from support.parity_view import (
    COMMAND,
    IDENTITY_VARIABLES,
    JobFacts,
    ParityView,
    assert_same_views,
    parity_view,
)

if TYPE_CHECKING:
    from support.frameworks import FrameworksRuntime

__all__ = [
    "COMMAND",
    "IDENTITY_VARIABLES",
    "JobFacts",
    "ParityView",
    "assert_kubernetes_renders_the_same",
    "assert_same_views",
    "embedded_facts",
    "job_from_documents",
    "kubernetes_facts",
    "parity_view",
    "rendered_facts",
]

#: The image of rendered Pods whose job names none (the examples run on the embedded runtime, which needs none).
PLACEHOLDER_IMAGE = "phalanx.invalid/frameworks:1"


# ----------------------------------------------------------------------------------------------- the records


def embedded_facts(state_dir: Path, job: Mapping[str, Any]) -> JobFacts:
    """The embedded runtime's record of a job, from its state directory: what each replica's latest launch got.

    Args:
        state_dir: the control plane's state directory (``PHALANX_HOME``).
        job: the job as ``phalanx get job NAME -o json`` prints it (its uid and ``status.endpoints``).

    Raises:
        AssertionError: a replica of the address book has no launch file.

    """
    layout = StateLayout(state_dir)
    meta, spec = job["metadata"], job["spec"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    addresses = {
        replica: Endpoint(host, int(port))
        for replica, address in job["status"]["endpoints"].items()
        for host, _, port in [address.rpartition(":")]
    }
    output_dir = str(layout.job_outputs(namespace, name, uid, spec.get("outputs", {}).get("path", "outputs")))
    replicas_dir = layout.job_dir(namespace, name, uid) / "replicas"
    envs, nodes, hostfile_paths, hostfiles, commands = {}, {}, {}, {}, {}
    for replica in addresses:
        run_dir = _latest_run_dir(replicas_dir, replica)
        launch = json.loads((run_dir / LAUNCH_FILE).read_text())
        env: dict[str, str] = launch["env"]
        envs[replica] = env
        commands[replica] = launch["command"]
        nodes[replica] = _embedded_node(layout, env.get("PHALANX_SAMPLE_CACHE_DIR", ""))
        hostfile_paths[replica] = str(run_dir / HOSTFILE)
        if (run_dir / HOSTFILE).exists():
            hostfiles[replica] = (run_dir / HOSTFILE).read_text()
    return JobFacts(
        backend="embedded",
        namespace=namespace,
        uid=uid,
        addresses=addresses,
        nodes=nodes,
        envs=envs,
        hostfile_paths=hostfile_paths,
        output_dirs=dict.fromkeys(addresses, output_dir),
        hostfiles=hostfiles,
        commands=commands,
        commands_expanded=True,
    )


def _latest_run_dir(replicas_dir: Path, replica: str) -> Path:
    pattern = re.compile(re.escape(replica) + r"-a(\d+)")
    launched = {
        int(match.group(1)): path
        for path in (replicas_dir.iterdir() if replicas_dir.is_dir() else ())
        if (match := pattern.fullmatch(path.name)) and (path / LAUNCH_FILE).exists()
    }
    if not launched:
        raise AssertionError(f"replica {replica} has no launch file under {replicas_dir}")
    return launched[max(launched)]


def _embedded_node(layout: StateLayout, sample_cache_dir: str) -> str:
    # The controller gives each replica the sample cache of the node it was placed on (layout.sample_cache_dir):
    # the one place in a replica's environment that names its node.
    node = Path(sample_cache_dir).name
    if not sample_cache_dir or Path(sample_cache_dir) != layout.sample_cache_dir(node):
        raise AssertionError(f"no node in PHALANX_SAMPLE_CACHE_DIR={sample_cache_dir!r}")
    return node


def kubernetes_facts(
    pods: Iterable[Mapping[str, Any]],
    configmap: Mapping[str, Any] | None,
    service: Mapping[str, Any] | None,
) -> JobFacts:
    """The Kubernetes record of a job, from its Pods, hostfile ConfigMap and headless Service (rendered or stored).

    A Pod's address is its stable DNS name, ``<hostname>.<subdomain>.<namespace>.svc`` (a Pod without a
    subdomain, the job's only replica, is reached by its hostname), on its container's ``rendezvous`` port. Its
    node is itself: the renderer numbers node-local values as if each Pod had a node of its own (see
    ``adapters.kubernetes.rendering``), whatever node the Pod is bound to later.

    Raises:
        AssertionError: the Service does not serve the Pods' DNS names (not headless, a selector that misses a
            Pod, a port that is not theirs, not-ready addresses unpublished), or a Pod's subdomain is not it.

    """
    pods = list(pods)
    assert pods, "no Pods"
    namespace = pods[0]["metadata"]["namespace"]
    uid = pods[0]["metadata"]["ownerReferences"][0]["uid"]
    addresses, envs, hostfile_paths, output_dirs, hostfiles, commands = {}, {}, {}, {}, {}, {}
    problems = []
    for pod in pods:
        name = pod["metadata"]["name"]
        [container] = pod["spec"]["containers"]
        [port] = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == PORT_NAME]
        subdomain = pod["spec"].get("subdomain")
        host = f"{pod['spec']['hostname']}.{subdomain}.{namespace}.svc" if subdomain else name
        addresses[name] = Endpoint(host, port)
        envs[name] = {item["name"]: item.get("value", "") for item in container.get("env", [])}
        commands[name] = [*container.get("command", []), *container.get("args", [])]
        mounts = {mount["name"]: mount["mountPath"] for mount in container.get("volumeMounts", [])}
        volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes", [])}
        output_dirs[name] = mounts.get(OUTPUTS_VOLUME, "")
        if HOSTFILE_VOLUME in mounts:
            hostfile_paths[name] = f"{mounts[HOSTFILE_VOLUME]}/{HOSTFILE_KEY}"
            mounted = volumes[HOSTFILE_VOLUME].get("configMap", {}).get("name")
            if configmap is None or mounted != configmap["metadata"]["name"]:
                problems.append(f"{name} mounts the hostfile of ConfigMap {mounted!r}, which is not the job's")
            else:
                hostfiles[name] = configmap["data"][HOSTFILE_KEY]
        if subdomain:
            problems += _service_problems(service, pod, port)
    assert not problems, "\n".join(problems)
    return JobFacts(
        backend="kubernetes",
        namespace=namespace,
        uid=uid,
        addresses=addresses,
        nodes={name: name for name in addresses},
        envs=envs,
        hostfile_paths=hostfile_paths,
        output_dirs=output_dirs,
        hostfiles=hostfiles,
        commands=commands,
    )


def _service_problems(service: Mapping[str, Any] | None, pod: Mapping[str, Any], port: int) -> list[str]:
    name = pod["metadata"]["name"]
    if service is None:
        return [f"{name} has subdomain {pod['spec']['subdomain']!r} but the job has no Service"]
    spec = service["spec"]
    problems = []
    if service["metadata"]["name"] != pod["spec"]["subdomain"]:
        problems.append(f"{name}: subdomain {pod['spec']['subdomain']!r} is not the Service")
    if spec.get("clusterIP") != "None":
        problems.append(f"the Service is not headless (clusterIP {spec.get('clusterIP')!r})")
    if not spec.get("publishNotReadyAddresses"):
        problems.append("the Service does not publish not-ready addresses: replicas could not find each other")
    labels = pod["metadata"].get("labels", {})
    selector = spec.get("selector") or {}
    if not selector or any(labels.get(key) != value for key, value in selector.items()):
        problems.append(f"the Service's selector {selector} does not select {name} (labels {labels})")
    if selector.get(LABEL_JOB) != service["metadata"]["name"]:
        problems.append(f"the Service's selector {selector} is not the job's")
    if port not in {p.get("targetPort") for p in spec.get("ports", [])}:
        problems.append(f"the Service has no port {port} for {name}: {spec.get('ports')}")
    return problems


# ------------------------------------------------------------------------------------------- the entry points


def job_from_documents(
    documents: Sequence[Mapping[str, Any]],
    name: str,
    *,
    namespace: str,
    uid: str,
    jobtypes: Mapping[str, JobType] | None = None,
) -> tuple[TrainingJob, JobType]:
    """The TrainingJob ``name`` of a job file, validated and defaulted, in ``namespace`` with ``uid`` (as a backend
    stored it); and its JobType: one of ``jobtypes`` (those a backend stored), else one the documents carry,
    else a built-in one."""
    known = dict(builtin_jobtypes())
    for document in documents:
        if document.get("kind") == "JobType":
            jobtype = parse_jobtype(dict(document))
            known[jobtype.metadata.name] = jobtype
    known.update(jobtypes or {})
    jobtypes = known
    [raw] = [d for d in documents if d.get("kind") == "TrainingJob" and d["metadata"]["name"] == name]
    job = validate_job(with_namespace(raw, namespace), jobtypes)
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": uid})})
    return job, jobtypes[job.spec.type]


def rendered_facts(job: TrainingJob, jobtype: JobType) -> JobFacts:
    """Kubernetes' record of ``job`` as the operator's renderer makes it, before any API server sees it."""
    service = render_headless_service(job, jobtype) if needs_service(job) else None
    pods = render_pods(job, jobtype, attempt=0, image=PLACEHOLDER_IMAGE)
    return kubernetes_facts(pods, render_hostfile_configmap(job, jobtype), service)


def assert_kubernetes_renders_the_same(
    fw: FrameworksRuntime, job_name: str, documents: Sequence[Mapping[str, Any]]
) -> ParityView:
    """Assert that Kubernetes would tell the replicas of a succeeded job what the embedded runtime told them.

    The embedded side is what the job's working replicas got (their launch files and hostfiles in ``fw``'s state
    directory); the Kubernetes side is what the operator's renderer makes of the same job documents
    (``support.frameworks.load_example``) and the JobType the embedded runtime used (read back from it, so a
    user-defined JobType submitted from another file is the one rendered): Pods, hostfile ConfigMap and
    headless Service. Call it at the end of a test whose job succeeded, before the job is deleted. Returns the
    common view (for further checks).
    """
    stored = fw.job(job_name)
    embedded = embedded_facts(fw.state_dir, stored)
    # The JobType the embedded runtime rendered with, as it stored it (a user-defined one may be in another file).
    shown = fw.cli("get", "jobtype", stored["spec"]["type"], "-o", "json", timeout=60)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    used = parse_jobtype(json.loads(shown.stdout))
    job, jobtype = job_from_documents(
        documents,
        job_name,
        namespace=stored["metadata"]["namespace"],
        uid=stored["metadata"]["uid"],
        jobtypes={used.metadata.name: used},
    )
    assert set(embedded.envs) == {name for _, _, name in replica_names(job, jobtype)}, (
        f"the embedded runtime ran {sorted(embedded.envs)}; the job names {replica_names(job, jobtype)}"
    )
    return assert_same_views(job, jobtype, embedded, rendered_facts(job, jobtype))
