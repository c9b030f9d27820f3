"""The parity view (tests/support/parity_view.py) on records built in memory: equal where the backends
agree, and a failure naming the replica and the variable where they do not.

The embedded record is made as the embedded controller makes it (``core.rendezvous`` with loopback addresses,
one port per replica, and the scheduler's nodes); the Kubernetes record is the operator's renderer's. The
frameworks tier (tests/frameworks/test_rendering_parity.py) compares real replicas; this file shows that the
comparison can fail, and how, without running any.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from phalanx.adapters.kubernetes.rendering import (
    render_headless_service,
    render_hostfile_configmap,
    render_pods,
)
from phalanx.core.rendezvous import (
    Endpoint,
    expand_references,
    render_hostfile,
    render_replica_env,
    replica_names,
)
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from support.rendering_parity import (
    COMMAND,
    JobFacts,
    assert_same_views,
    job_from_documents,
    kubernetes_facts,
    rendered_facts,
)

MPI_JOB = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "ring"},
    "spec": {
        "type": "mpi",
        "replicas": {
            "launcher": {"template": {"command": ["mpirun", "python", "ring.py"]}},
            "worker": {"count": 3, "template": {"command": ["sleep", "infinity"]}},
        },
    },
}
PYTORCH_JOB = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "ddp"},
    "spec": {
        "type": "pytorch",
        "replicas": {
            "master": {"template": {"command": ["python", "train.py"]}},
            "worker": {"count": 3, "template": {"command": ["python", "train.py"], "args": ["--rank=$(RANK)"]}},
        },
    },
}
TF_JOB = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "tf"},
    "spec": {
        "type": "tensorflow",
        "replicas": {
            "chief": {"template": {"command": ["python", "train.py"]}},
            "worker": {"count": 2, "template": {"command": ["python", "train.py"]}},
            "ps": {"template": {"command": ["python", "train.py"]}},
        },
    },
}


def load(document: Mapping[str, Any]) -> tuple[TrainingJob, JobType]:
    raw = copy.deepcopy(dict(document))
    return job_from_documents([raw], raw["metadata"]["name"], namespace="team-a", uid="0000-uid")


def embedded(job: TrainingJob, jobtype: JobType, nodes: Mapping[str, str] | None = None) -> JobFacts:
    """The embedded runtime's record: loopback addresses, a port per replica, every replica on ``vm`` unless
    ``nodes`` says otherwise (as the controller renders: core.rendezvous with the scheduler's placements)."""
    names = [name for _, _, name in replica_names(job, jobtype)]
    addresses = {name: Endpoint("127.0.0.1", 40000 + i) for i, name in enumerate(names)}
    node_of = {name: (nodes or {}).get(name, "vm") for name in names}
    run = {name: f"/state/runs/default/{job.metadata.name}/0000/replicas/{name}-a0" for name in names}
    envs = {
        name: render_replica_env(
            job,
            jobtype,
            role,
            index,
            addresses,
            node_of=node_of,
            output_dir="/state/outputs",
            hostfile_path=f"{run[name]}/hostfile",
        )
        for role, index, name in replica_names(job, jobtype)
    }
    hostfile = render_hostfile(job, jobtype, addresses) if jobtype.spec.hostfile_roles else None
    templates = {name: job.spec.replicas[role].template for role, _, name in replica_names(job, jobtype)}
    commands = {
        name: [expand_references(part, envs[name]) for part in [*template.command, *template.args]]
        for name, template in templates.items()
    }
    return JobFacts(
        backend="embedded",
        namespace="default",
        uid="1111-uid",
        addresses=addresses,
        nodes=node_of,
        envs=envs,
        hostfile_paths={name: f"{run[name]}/hostfile" for name in names},
        output_dirs=dict.fromkeys(names, "/state/outputs"),
        hostfiles=dict.fromkeys(names, hostfile) if hostfile is not None else {},
        commands=commands,
        commands_expanded=True,
    )


@pytest.mark.parametrize("document", [MPI_JOB, PYTORCH_JOB, TF_JOB], ids=["mpi", "pytorch", "tensorflow"])
def test_the_embedded_runtime_and_the_renderer_give_the_same_view(document: dict[str, Any]) -> None:
    job, jobtype = load(document)
    view = assert_same_views(job, jobtype, embedded(job, jobtype), rendered_facts(job, jobtype))
    assert len(view.replicas) == len(replica_names(job, jobtype))


def test_addresses_read_back_as_replica_names_and_the_merged_hostfile_as_slots_per_worker() -> None:
    job, jobtype = load(TF_JOB)
    view = assert_same_views(job, jobtype, embedded(job, jobtype), rendered_facts(job, jobtype))
    assert view.replicas["tf-worker-1"]["TF_CONFIG"] == (
        '{"cluster":{"chief":["<tf-chief-0>"],"worker":["<tf-worker-0>","<tf-worker-1>"],"ps":["<tf-ps-0>"]},'
        '"task":{"type":"worker","index":1}}'
    )
    job, jobtype = load(MPI_JOB)
    facts = embedded(job, jobtype)
    assert set(facts.hostfiles.values()) == {"127.0.0.1 slots=3\n"}  # one line for the three workers
    view = assert_same_views(job, jobtype, facts, rendered_facts(job, jobtype))
    assert view.hostfiles == [[("ring-worker-0", "1"), ("ring-worker-1", "1"), ("ring-worker-2", "1")]]


def test_node_local_values_are_checked_against_each_backends_own_layout() -> None:
    job, jobtype = load(PYTORCH_JOB)
    # Two nodes on the embedded side: LOCAL_RANK 0 1 0 1, GROUP_RANK 0 0 1 1; Kubernetes: one node per Pod.
    nodes = {"ddp-master-0": "a", "ddp-worker-0": "a", "ddp-worker-1": "b", "ddp-worker-2": "b"}
    facts = embedded(job, jobtype, nodes)
    assert [facts.envs[n]["LOCAL_RANK"] for n in nodes] == ["0", "1", "0", "1"]
    assert [facts.envs[n]["GROUP_RANK"] for n in nodes] == ["0", "0", "1", "1"]
    view = assert_same_views(job, jobtype, facts, rendered_facts(job, jobtype))
    assert view.replicas["ddp-worker-1"]["LOCAL_RANK"] == "<local_rank>"
    assert view.replicas["ddp-worker-1"]["MASTER_ADDR"] == "<ddp-master-0>.host"

    lying = dataclasses.replace(facts, nodes=dict.fromkeys(nodes, "a"))  # says one node; values say two
    with pytest.raises(AssertionError, match=r"ddp-worker-1: LOCAL_RANK: \{\{ local_rank \}\} is '0', expected '2'"):
        assert_same_views(job, jobtype, lying, rendered_facts(job, jobtype))


def _pods(job: TrainingJob, jobtype: JobType) -> list[dict[str, Any]]:
    return render_pods(job, jobtype, attempt=0, image="example.org/x:1")


def _set_env(pod: dict[str, Any], name: str, value: str) -> None:
    for item in pod["spec"]["containers"][0]["env"]:
        if item["name"] == name:
            item["value"] = value


def _kube(job: TrainingJob, jobtype: JobType, change: Callable[[list[dict[str, Any]]], None]) -> JobFacts:
    pods = _pods(job, jobtype)
    change(pods)
    return kubernetes_facts(pods, render_hostfile_configmap(job, jobtype), render_headless_service(job, jobtype))


def test_the_command_line_is_the_templates_once_checked_expanded_from_the_env() -> None:
    job, jobtype = load(PYTORCH_JOB)
    facts = embedded(job, jobtype)
    assert facts.commands["ddp-worker-1"] == ["python", "train.py", "--rank=2"]
    view = assert_same_views(job, jobtype, facts, rendered_facts(job, jobtype))
    assert view.replicas["ddp-worker-1"][COMMAND] == "python train.py '--rank=$(RANK)'"

    ran_other = dataclasses.replace(facts, commands={**facts.commands, "ddp-worker-1": ["python", "train.py"]})
    with pytest.raises(AssertionError, match=r"embedded: ddp-worker-1: runs \['python', 'train.py'\]"):
        assert_same_views(job, jobtype, ran_other, rendered_facts(job, jobtype))

    def args_dropped(pods: list[dict[str, Any]]) -> None:
        pods[2]["spec"]["containers"][0].pop("args")

    with pytest.raises(AssertionError, match=r"kubernetes: ddp-worker-1: runs \['python', 'train.py'\]"):
        assert_same_views(job, jobtype, facts, _kube(job, jobtype, args_dropped))


def test_a_replica_told_the_wrong_master_fails_naming_it() -> None:
    job, jobtype = load(PYTORCH_JOB)
    wrong = _kube(job, jobtype, lambda pods: _set_env(pods[2], "MASTER_ADDR", "ddp-worker-0.ddp.team-a.svc"))
    with pytest.raises(AssertionError, match=r"kubernetes: ddp-worker-1: MASTER_ADDR: .* expected 'ddp-master-0"):
        assert_same_views(job, jobtype, embedded(job, jobtype), wrong)


def test_other_ranks_on_one_side_are_a_difference() -> None:
    job, jobtype = load(PYTORCH_JOB)

    def swap(pods: list[dict[str, Any]]) -> None:
        # Consistent within Kubernetes (one node per Pod: the node rank is the rank), different from embedded.
        for pod, rank in ((pods[1], "2"), (pods[2], "1")):
            for name in ("RANK", "PHALANX_RANK", "GROUP_RANK", "PET_NODE_RANK"):
                _set_env(pod, name, rank)

    with pytest.raises(AssertionError, match=r"ddp-worker-0 PHALANX_RANK: embedded '1', kubernetes '2'"):
        assert_same_views(job, jobtype, embedded(job, jobtype), _kube(job, jobtype, swap))


def test_a_hostfile_that_leaves_out_a_worker_is_a_difference() -> None:
    job, jobtype = load(MPI_JOB)
    configmap = render_hostfile_configmap(job, jobtype)
    assert configmap is not None
    configmap["data"]["hostfile"] = "".join(configmap["data"]["hostfile"].splitlines(keepends=True)[:2])
    short = kubernetes_facts(_pods(job, jobtype), configmap, render_headless_service(job, jobtype))
    with pytest.raises(AssertionError, match=r"hostfile: embedded .*ring-worker-2.*, kubernetes"):
        assert_same_views(job, jobtype, embedded(job, jobtype), short)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda spec: spec.update(clusterIP="10.0.0.7"), "not headless"),
        (lambda spec: spec.update(publishNotReadyAddresses=False), "does not publish not-ready addresses"),
        (lambda spec: spec.update(selector={"phalanx.dev/job": "other"}), "does not select ddp-master-0"),
        (lambda spec: spec["ports"][0].update(targetPort=1), "has no port 29500"),
    ],
    ids=["cluster-ip", "not-ready-hidden", "selector", "port"],
)
def test_a_service_that_does_not_serve_the_pods_names_fails(
    change: Callable[[dict[str, Any]], None], message: str
) -> None:
    job, jobtype = load(PYTORCH_JOB)
    service = render_headless_service(job, jobtype)
    change(service["spec"])
    with pytest.raises(AssertionError, match=message):
        kubernetes_facts(_pods(job, jobtype), None, service)
