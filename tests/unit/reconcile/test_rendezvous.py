"""Rendezvous: the environment of every built-in JobType, a user-written JobType, and the MPI hostfile."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
import yaml

from phalanx.core.rendezvous import (
    Endpoint,
    RendezvousError,
    expand_references,
    render_hostfile,
    render_replica_env,
    replica_names,
)
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes, parse_jobtype
from phalanx.model.validation import validate_job

JOBTYPES = builtin_jobtypes()
OUT = "out/q"
HOSTFILE = "run/q/hostfile"


def make_job(
    kind: str,
    roles: Mapping[str, int],
    *,
    env: Mapping[str, str] | None = None,
    jobtypes: Mapping[str, JobType] = JOBTYPES,
) -> TrainingJob:
    return validate_job(
        {
            "metadata": {"name": "q", "namespace": "team-a", "uid": "u-1"},
            "spec": {
                "type": kind,
                "replicas": {
                    role: {"count": count, "template": {"command": ["run"], "env": dict(env or {})}}
                    for role, count in roles.items()
                },
            },
        },
        jobtypes,
    )


def dns(job: TrainingJob, jobtype: JobType) -> dict[str, Endpoint]:
    """Kubernetes-style addresses: one DNS name per replica, the JobType's port."""
    return {name: Endpoint(f"{name}.q.team-a", jobtype.spec.port) for _, _, name in replica_names(job, jobtype)}


def loopback(job: TrainingJob, jobtype: JobType) -> dict[str, Endpoint]:
    """Embedded-style addresses: 127.0.0.1, a distinct port per replica."""
    return {name: Endpoint("127.0.0.1", 40000 + n) for n, (_, _, name) in enumerate(replica_names(job, jobtype))}


def env_of(
    job: TrainingJob,
    role: str,
    index: int,
    *,
    addresses: Mapping[str, Endpoint] | None = None,
    node_of: Mapping[str, str] | None = None,
    jobtype: JobType | None = None,
) -> dict[str, str]:
    jobtype = jobtype or JOBTYPES[job.spec.type]
    names = [name for _, _, name in replica_names(job, jobtype)]
    return render_replica_env(
        job,
        jobtype,
        role,
        index,
        dns(job, jobtype) if addresses is None else addresses,
        node_of={name: "n0" for name in names} if node_of is None else node_of,
        output_dir=OUT,
        hostfile_path=HOSTFILE,
    )


# -- PyTorch ---------------------------------------------------------------------------------------------
PYTORCH = make_job("pytorch", {"master": 1, "worker": 2})
PYTORCH_NODES = {"q-master-0": "n0", "q-worker-0": "n0", "q-worker-1": "n1"}


@pytest.mark.parametrize(
    ("role", "index", "expected"),
    [
        pytest.param(
            "master",
            0,
            {"RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"},
            id="master",
        ),
        pytest.param(
            "worker",
            0,
            {"RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"},
            id="worker-0-shares-node-0",
        ),
        pytest.param(
            "worker",
            1,
            {"RANK": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1"},
            id="worker-1-alone-on-node-1",
        ),
    ],
)
def test_pytorch_master_and_two_workers(role: str, index: int, expected: dict[str, str]) -> None:
    env = env_of(PYTORCH, role, index, node_of=PYTORCH_NODES)
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "q-master-0.q.team-a"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == env["PHALANX_WORLD_SIZE"] == "3"
    # Each replica is one torchrun node, wherever it runs: torchrun's node rank is the replica's rank.
    assert (env["PET_NNODES"], env["PET_NODE_RANK"]) == ("3", env["RANK"])
    assert env["PHALANX_RANK"] == env["RANK"]
    assert {key: env[key] for key in expected} == expected


def test_pytorch_replicas_sharing_a_node_are_distinct_torchrun_nodes() -> None:
    """torchrun in each replica (``torchrun --nproc-per-node=1 train.py``) reads PET_NNODES and PET_NODE_RANK.
    Four replicas on one machine must be four torchrun nodes 0..3 of 4; were they counted by machine, all four
    would claim node 0 of 1 and each would host its own one-process world on the master's port."""
    job = make_job("pytorch", {"master": 1, "worker": 3})
    addresses = loopback(job, JOBTYPES["pytorch"])
    seen = {
        (role, index): env_of(job, role, index, addresses=addresses)
        for role, index in [("master", 0), ("worker", 0), ("worker", 1), ("worker", 2)]
    }
    assert {key: (env["PET_NODE_RANK"], env["PET_NNODES"]) for key, env in seen.items()} == {
        ("master", 0): ("0", "4"),
        ("worker", 0): ("1", "4"),
        ("worker", 1): ("2", "4"),
        ("worker", 2): ("3", "4"),
    }
    for env in seen.values():
        assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("127.0.0.1", "40000")


def test_pytorch_without_master_worker_0_is_rank_0() -> None:
    job = make_job("pytorch", {"worker": 3})
    env = env_of(job, "worker", 2)
    assert (env["MASTER_ADDR"], env["RANK"], env["WORLD_SIZE"]) == ("q-worker-0.q.team-a", "2", "3")


def test_pytorch_embedded_addresses_use_the_coordinator_port() -> None:
    addresses = loopback(PYTORCH, JOBTYPES["pytorch"])
    env = env_of(PYTORCH, "worker", 1, addresses=addresses)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", str(addresses["q-master-0"].port))


# -- TensorFlow ------------------------------------------------------------------------------------------
TENSORFLOW = make_job("tensorflow", {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1})
TF_CLUSTER = {
    "chief": ["q-chief-0.q.team-a:2222"],
    "worker": ["q-worker-0.q.team-a:2222", "q-worker-1.q.team-a:2222"],
    "ps": ["q-ps-0.q.team-a:2222"],
}


@pytest.mark.parametrize(
    ("role", "index", "rank"),
    [
        pytest.param("chief", 0, "0", id="chief"),
        pytest.param("worker", 1, "2", id="worker-1"),
        pytest.param("ps", 0, "3", id="ps"),
        pytest.param("evaluator", 0, "", id="evaluator-outside-the-cluster"),
    ],
)
def test_tensorflow_tf_config(role: str, index: int, rank: str) -> None:
    env = env_of(TENSORFLOW, role, index)
    assert " " not in env["TF_CONFIG"]  # compact
    config = json.loads(env["TF_CONFIG"])
    assert config == {"cluster": TF_CLUSTER, "task": {"type": role, "index": index}}
    assert env["PHALANX_RANK"] == rank
    assert env["PHALANX_WORLD_SIZE"] == "4"


def test_tensorflow_cluster_skips_absent_roles() -> None:
    job = make_job("tensorflow", {"worker": 2})
    config = json.loads(env_of(job, "worker", 0)["TF_CONFIG"])
    assert list(config["cluster"]) == ["worker"]


# -- MPI -------------------------------------------------------------------------------------------------
MPI = make_job("mpi", {"launcher": 1, "worker": 3})


def test_mpi_env_points_at_the_hostfile() -> None:
    launcher = env_of(MPI, "launcher", 0)
    assert launcher["OMPI_MCA_orte_default_hostfile"] == launcher["PHALANX_HOSTFILE"] == HOSTFILE
    assert launcher["PHALANX_RANK"] == ""  # only workers are ranked
    assert [env_of(MPI, "worker", i)["PHALANX_RANK"] for i in range(3)] == ["0", "1", "2"]


def test_mpi_env_names_the_hostfile_for_open_mpi_4_and_5() -> None:
    # Open MPI 4's mpirun (ORTE) reads OMPI_MCA_orte_*; Open MPI 5's (PRRTE) reads PRTE_MCA_prte_* and ignores
    # the ORTE names, so a plain `mpirun` found no hostfile and ran one rank per local core.
    launcher = env_of(MPI, "launcher", 0)
    for variable in ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile"):
        assert launcher[variable] == HOSTFILE, variable
    for variable in ("OMPI_MCA_orte_keep_fqdn_hostnames", "PRTE_MCA_prte_keep_fqdn_hostnames"):
        assert launcher[variable] == "true", variable


def test_mpi_hostfile_lists_workers_one_line_per_host() -> None:
    assert render_hostfile(MPI, JOBTYPES["mpi"], dns(MPI, JOBTYPES["mpi"])) == (
        "q-worker-0.q.team-a slots=1\nq-worker-1.q.team-a slots=1\nq-worker-2.q.team-a slots=1\n"
    )


def test_mpi_hostfile_merges_replicas_sharing_a_host() -> None:
    addresses = loopback(MPI, JOBTYPES["mpi"])
    assert render_hostfile(MPI, JOBTYPES["mpi"], addresses) == "127.0.0.1 slots=3\n"


def test_mpi_hostfile_slots_per_host() -> None:
    jobtype = JOBTYPES["mpi"].model_copy(update={"spec": JOBTYPES["mpi"].spec.model_copy(update={"slots_per_host": 4})})
    addresses = {**dns(MPI, jobtype), "q-worker-2": Endpoint("q-worker-0.q.team-a", 2222)}
    assert render_hostfile(MPI, jobtype, addresses) == "q-worker-0.q.team-a slots=8\nq-worker-1.q.team-a slots=4\n"


def test_hostfile_is_empty_without_hostfile_roles() -> None:
    assert render_hostfile(PYTORCH, JOBTYPES["pytorch"], dns(PYTORCH, JOBTYPES["pytorch"])) == ""


# -- JAX, XGBoost, generic --------------------------------------------------------------------------------
def test_jax() -> None:
    job = make_job("jax", {"worker": 4})
    env = env_of(job, "worker", 3)
    assert env["JAX_COORDINATOR_ADDRESS"] == env["COORDINATOR_ADDRESS"] == "q-worker-0.q.team-a:1234"
    assert (env["JAX_NUM_PROCESSES"], env["JAX_PROCESS_ID"]) == ("4", "3")
    assert (env["NUM_PROCESSES"], env["PROCESS_ID"]) == ("4", "3")


def test_jax_renders_what_its_cluster_detection_reads() -> None:
    """jax.distributed.initialize() with no arguments reads JAX_COORDINATOR_ADDRESS but takes the process
    count and id only from a detected cluster (jax 0.10: never from JAX_NUM_PROCESSES / JAX_PROCESS_ID); its
    Slurm detection needs exactly these five variables. Local id 0: each replica sees its own devices from 0."""
    job = make_job("jax", {"worker": 4})
    env = env_of(job, "worker", 3)
    assert {key: env[key] for key in env if key.startswith("SLURM_")} == {
        "SLURM_JOB_ID": "q",
        "SLURM_STEP_NODELIST": "q-worker-0.q.team-a",
        "SLURM_NTASKS": "4",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "0",
    }


@pytest.mark.parametrize(
    ("resources", "expected"),
    [({}, ""), ({"gpu": 1}, "0"), ({"gpu": 4}, "0,1,2,3"), ({"gpuMilli": 500}, "0")],
    ids=["no-gpu", "one-gpu", "four-gpus", "a-share-of-one"],
)
def test_jax_keeps_every_gpu_of_a_replica_visible(resources: dict[str, int], expected: str) -> None:
    """SLURM_LOCALID would restrict each process to its device 0; JAX_LOCAL_DEVICE_IDS, which JAX prefers,
    names every GPU the replica sees (numbered from 0), and is empty (ignored by JAX) without GPUs."""
    raw = make_job("jax", {"worker": 2}).to_dict()
    raw["spec"]["replicas"]["worker"]["template"]["resources"] = {"cpu": 1, **resources}
    job = validate_job(raw, JOBTYPES)
    assert env_of(job, "worker", 1)["JAX_LOCAL_DEVICE_IDS"] == expected


def test_xgboost() -> None:
    job = make_job("xgboost", {"master": 1, "worker": 2})
    env = env_of(job, "worker", 0)
    assert (env["DMLC_TRACKER_URI"], env["DMLC_TRACKER_PORT"]) == ("q-master-0.q.team-a", "9999")
    assert (env["DMLC_NUM_WORKER"], env["DMLC_TASK_ID"], env["RANK"]) == ("3", "1", "1")


def test_generic_with_a_custom_role_ranks_declared_roles_first() -> None:
    job = make_job("generic", {"trainer": 2, "worker": 1})
    jobtype = JOBTYPES["generic"]
    assert [name for _, _, name in replica_names(job, jobtype)] == [
        "q-worker-0",
        "q-trainer-0",
        "q-trainer-1",
    ]
    env = env_of(job, "trainer", 1)
    assert (env["COORDINATOR_HOST"], env["COORDINATOR_PORT"]) == ("q-worker-0.q.team-a", "29500")
    assert (env["PHALANX_RANK"], env["PHALANX_WORLD_SIZE"], env["PHALANX_ROLE"]) == ("2", "3", "trainer")


def test_generic_with_only_a_custom_role() -> None:
    job = make_job("generic", {"server": 2})
    assert env_of(job, "server", 1)["COORDINATOR_HOST"] == "q-server-0.q.team-a"


# -- a user-written JobType, no code change ---------------------------------------------------------------
RAY_YAML = """
apiVersion: phalanx.dev/v1alpha1
kind: JobType
metadata: {name: ray-lite}
spec:
  description: a head and workers that join it
  roles:
    head: {minCount: 1, maxCount: 1}
    worker: {minCount: 0, defaultCount: 2, env: {RAY_ROLE: "worker {{ index }} of {{ count(worker) }}"}}
  rankRoles: [head, worker]
  successRoles: [head]
  port: 6379
  env:
    RAY_ADDRESS: "{{ host(head, 0) }}:{{ port(head, 0) }}"
    RAY_WORKERS: "{{ hosts(worker) }}"
    ME: "{{ job_name }}/{{ namespace }}/{{ job_uid }}/{{ role }}/{{ index }}@{{ host }}:{{ port }}"
    RESULTS: "{{ output_dir }}"
    NODES: "{{ node_rank }}/{{ num_nodes }}"
    SHARED: "from-jobtype"
"""


def test_user_jobtype_renders_with_no_code_change() -> None:
    jobtype = parse_jobtype(yaml.safe_load(RAY_YAML))
    jobtypes = {**JOBTYPES, "ray-lite": jobtype}
    job = make_job("ray-lite", {"head": 1, "worker": 2}, jobtypes=jobtypes, env={"SHARED": "from-user"})
    addresses = loopback(job, jobtype)
    env = env_of(job, "worker", 1, addresses=addresses, jobtype=jobtype)
    assert env["RAY_ADDRESS"] == "127.0.0.1:40000"
    assert env["RAY_WORKERS"] == "127.0.0.1:40001,127.0.0.1:40002"
    assert env["ME"] == "q/team-a/u-1/worker/1@127.0.0.1:40002"
    assert env["RAY_ROLE"] == "worker 1 of 2"
    assert env["RESULTS"] == OUT
    assert env["NODES"] == "0/1"
    assert env["SHARED"] == "from-user"  # the user's env wins over the JobType's
    head = env_of(job, "head", 0, addresses=addresses, jobtype=jobtype)
    assert "RAY_ROLE" not in head  # role env only for its role


# -- the PHALANX_* layer ----------------------------------------------------------------------------------
def test_phalanx_variables_are_always_set() -> None:
    env = env_of(PYTORCH, "worker", 1)
    assert {key: value for key, value in env.items() if key.startswith("PHALANX_")} == {
        "PHALANX_JOB_NAME": "q",
        "PHALANX_NAMESPACE": "team-a",
        "PHALANX_JOB_UID": "u-1",
        "PHALANX_ROLE": "worker",
        "PHALANX_REPLICA_INDEX": "1",
        "PHALANX_RANK": "2",
        "PHALANX_WORLD_SIZE": "3",
        "PHALANX_OUTPUT_DIR": OUT,
    }


def test_user_env_cannot_override_reserved_names() -> None:
    job = make_job("pytorch", {"worker": 2}, env={"MASTER_PORT": "1"})
    template = job.spec.replicas["worker"].template
    sneaky = template.model_copy(update={"env": {**template.env, "PHALANX_RANK": "99"}})
    replicas = {"worker": job.spec.replicas["worker"].model_copy(update={"template": sneaky})}
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"replicas": replicas})})
    env = env_of(job, "worker", 1)
    assert env["PHALANX_RANK"] == "1"
    assert env["MASTER_PORT"] == "1"


# -- node-local numbering and errors ------------------------------------------------------------------------
def test_unplaced_replicas_are_left_out_of_node_counts() -> None:
    job = make_job("pytorch", {"worker": 4})
    env = env_of(job, "worker", 1, node_of={"q-worker-0": "n0", "q-worker-1": "n0"})
    assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"]) == ("1", "2", "0")
    assert env["WORLD_SIZE"] == "4"  # the world is the spec's, placed or not


def test_missing_address_is_a_clear_error() -> None:
    with pytest.raises(RendezvousError, match="q-worker-0"):
        env_of(PYTORCH, "worker", 0, addresses={})


def test_a_job_running_fewer_replicas_than_its_spec_gets_a_consistent_world() -> None:
    # Admitted with minAvailable: the master and one of the two workers run.
    running = {name: ep for name, ep in dns(PYTORCH, JOBTYPES["pytorch"]).items() if name != "q-worker-1"}
    master = env_of(PYTORCH, "master", 0, addresses=running)
    worker = env_of(PYTORCH, "worker", 0, addresses=running)
    assert (master["WORLD_SIZE"], master["RANK"]) == ("2", "0")
    assert (worker["WORLD_SIZE"], worker["RANK"]) == ("2", "1")
    assert worker["MASTER_ADDR"] == running["q-master-0"].host


def test_tf_config_lists_only_running_replicas_and_indexes_by_position() -> None:
    job = make_job("tensorflow", {"chief": 1, "worker": 3, "ps": 1})
    running = {name: ep for name, ep in dns(job, JOBTYPES["tensorflow"]).items() if name != "q-worker-1"}
    config = json.loads(env_of(job, "worker", 2, addresses=running)["TF_CONFIG"])
    assert len(config["cluster"]["worker"]) == 2
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["cluster"]["worker"][1] == str(running["q-worker-2"])


def test_own_node_unknown_is_a_clear_error() -> None:
    with pytest.raises(RendezvousError, match="no node known for replica 'q-worker-0'"):
        env_of(PYTORCH, "worker", 0, node_of={})


@pytest.mark.parametrize(("role", "index"), [("worker", 2), ("chief", 0)], ids=["index-past-count", "absent-role"])
def test_unknown_replica_is_an_error(role: str, index: int) -> None:
    with pytest.raises(RendezvousError, match="has no replica"):
        env_of(PYTORCH, role, index)


def test_replica_names_in_rank_order() -> None:
    job = make_job("tensorflow", {"evaluator": 1, "ps": 1, "worker": 2, "chief": 1})
    assert replica_names(job, JOBTYPES["tensorflow"]) == [
        ("chief", 0, "q-chief-0"),
        ("worker", 0, "q-worker-0"),
        ("worker", 1, "q-worker-1"),
        ("ps", 0, "q-ps-0"),
        ("evaluator", 0, "q-evaluator-0"),
    ]
    assert [name for _, _, name in replica_names(job)][:2] == ["q-evaluator-0", "q-ps-0"]  # the job's order


@pytest.mark.parametrize(
    ("value", "expanded"),
    [
        ("--port=$(PORT)", "--port=29500"),
        ("$(HOST):$(PORT)", "10.0.0.7:29500"),
        ("$(EMPTY)x", "x"),
        ("$$(PORT)", "$(PORT)"),  # escaped
        ("$$$(PORT)", "$29500"),
        ("$$", "$"),
        ("$(MISSING)", "$(MISSING)"),  # undefined: kept
        ("$()", "$()"),
        ("$(PORT", "$(PORT"),  # unterminated: kept
        ("$(PORT $(HOST)", "$(PORT $(HOST)"),  # the name runs to the first ): "PORT $(HOST" is undefined
        ("5$ $5 $", "5$ $5 $"),
        ("$($(PORT))", "$($(PORT))"),  # not nested: the name is "$(PORT"
        ("no references", "no references"),
        ("", ""),
    ],
)
def test_command_references_expand_with_the_kubelets_rules(value: str, expanded: str) -> None:
    env = {"PORT": "29500", "HOST": "10.0.0.7", "EMPTY": ""}
    assert expand_references(value, env) == expanded
