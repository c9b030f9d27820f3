"""Job types end to end: the rendezvous environment each framework expects, who decides success, and service
roles stopped at the end — with real processes reading what they were given."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import yaml

from conftest import Runtime, processes_mentioning, program_role, read_envs, typed_job, wait_until
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.replicas import Replica
from phalanx.model.resources import parse_memory


def endpoint(job: TrainingJob, replica: str) -> tuple[str, int]:
    host, _, port = job.status.endpoints[f"{job.metadata.name}-{replica}"].rpartition(":")
    return host, int(port)


def replicas_left(runtime: Runtime, job: str) -> list[Replica]:
    with runtime.client() as client:
        return [r for r in client.store.list(Replica) if r.spec.job_name == job]


def test_tensorflow_gets_tf_config_and_the_chief_decides_while_the_ps_is_stopped(
    runtime: Runtime, tmp_path: Path
) -> None:
    envs, record, never = tmp_path / "env", tmp_path / "starts.txt", tmp_path / "never-created"
    serving = ["--env-dir", str(envs), "--record", str(record), "--hold", str(never)]
    runtime.start_control_plane()
    runtime.submit(
        typed_job(
            "tf",
            "tensorflow",
            {
                # The chief finishes once all four replicas run; workers and the ps would hold forever.
                "chief": program_role(
                    args=["--env-dir", str(envs), "--record", str(record), "--await-lines", str(record), "4"]
                ),
                "worker": program_role(2, args=serving),
                "ps": program_role(1, args=serving),
            },
        )
    )
    final = runtime.wait_phase("tf", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    # Succeeded means every replica has stopped: the ps and the workers that never finished included.
    assert processes_mentioning(str(never)) == []
    assert final.status.replica_statuses["chief"].succeeded == 1
    storing = [c for c in final.status.conditions if c.type == "Storing"]
    assert storing and "chief" in storing[0].message, final.status.conditions

    replicas = {"chief-0": ("chief", 0), "worker-0": ("worker", 0), "worker-1": ("worker", 1), "ps-0": ("ps", 0)}
    seen = read_envs(envs)
    assert set(seen) == set(replicas)
    configs = {name: json.loads(env["TF_CONFIG"]) for name, env in seen.items()}
    cluster = configs["chief-0"]["cluster"]
    assert set(cluster) == {"chief", "worker", "ps"}
    for role, count in (("chief", 1), ("worker", 2), ("ps", 1)):
        assert cluster[role] == [
            f"{host}:{port}" for host, port in (endpoint(final, f"{role}-{i}") for i in range(count))
        ]
    addresses = [address for members in cluster.values() for address in members]
    assert len(set(addresses)) == 4, f"replicas share an address: {cluster}"
    for name, (role, index) in replicas.items():
        assert configs[name]["cluster"] == cluster, f"{name} sees another cluster"
        assert configs[name]["task"] == {"type": role, "index": index}

    logs = runtime.cli("logs", "tf", "--replica", "ps-0", check=True).stdout
    assert "ps-0 started" in logs and "ps-0 done" not in logs  # stopped by Phalanx, not finished by itself
    wait_until(lambda: replicas_left(runtime, "tf") == [], message="the tf replicas to be removed")


def test_mpi_launcher_reads_a_hostfile_of_the_workers_and_its_exit_ends_the_job(
    runtime: Runtime, tmp_path: Path
) -> None:
    envs, record, never = tmp_path / "env", tmp_path / "starts.txt", tmp_path / "never-created"
    hostfile = tmp_path / "hostfile-seen-by-launcher"
    runtime.start_control_plane()
    launcher_args = ["--env-dir", str(envs), "--hostfile-out", str(hostfile), "--expect-slots", "2"]
    launcher_args += ["--record", str(record), "--await-lines", str(record), "3"]
    runtime.submit(
        typed_job(
            "mpi",
            "mpi",
            {
                "launcher": program_role(args=launcher_args),
                "worker": program_role(2, args=["--env-dir", str(envs), "--record", str(record), "--hold", str(never)]),
            },
        )
    )
    final = runtime.wait_phase("mpi", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert processes_mentioning(str(never)) == []  # the workers were stopped when the launcher succeeded
    assert sorted(line.split()[0] for line in record.read_text().splitlines()) == ["launcher-0", "worker-0", "worker-1"]

    listed: dict[str, int] = {}
    for line in hostfile.read_text().splitlines():
        host, slots = line.split()
        assert slots.startswith("slots="), line
        listed[host] = int(slots.removeprefix("slots="))
    expected = Counter(endpoint(final, f"worker-{i}")[0] for i in range(2))
    assert listed == dict(expected)  # every worker host, one slot per worker; the launcher is not listed

    seen = read_envs(envs)
    launcher = seen["launcher-0"]
    assert launcher["OMPI_MCA_orte_default_hostfile"] == launcher["PHALANX_HOSTFILE"]
    assert Path(launcher["OMPI_MCA_orte_default_hostfile"]).name == "hostfile"
    assert launcher["PRTE_MCA_prte_default_hostfile"] == launcher["PHALANX_HOSTFILE"]  # Open MPI 5 reads this one
    assert launcher["PHALANX_RANK"] == ""  # only workers are ranked
    assert sorted(seen[f"worker-{i}"]["PHALANX_RANK"] for i in range(2)) == ["0", "1"]
    assert {env["PHALANX_WORLD_SIZE"] for env in seen.values()} == {"2"}


USER_JOBTYPE = """\
apiVersion: phalanx.dev/v1alpha1
kind: JobType
metadata:
  name: param-pool
spec:
  description: A trainer that talks to a pool of parameter servers. The trainer decides; servers serve.
  roles:
    trainer: {minCount: 1, maxCount: 1, defaultCount: 1}
    server:
      minCount: 1
      defaultCount: 2
      resources: {cpu: 100m, memory: 32Mi}
      env:
        SERVER_ADDRESS: "{{ host }}:{{ port }}"
  rankRoles: [trainer, server]
  successRoles: [trainer]
  serviceRoles: [server]
  port: 7070
  env:
    POOL_RANK: "{{ rank }}"
    POOL_SIZE: "{{ world_size }}"
    POOL_SERVERS: "{{ hosts(server) }}"
    POOL_SERVER_COUNT: "{{ count(server) }}"
    POOL_TRAINER: "{{ host(trainer, 0) }}:{{ port(trainer, 0) }}"
    POOL_ME: "{{ role }}/{{ index }}"
"""


def test_a_jobtype_defined_in_yaml_runs_a_job_in_the_same_file(runtime: Runtime, tmp_path: Path) -> None:
    envs, record, never = tmp_path / "env", tmp_path / "starts.txt", tmp_path / "never-created"
    job = typed_job(
        "pool",
        "param-pool",
        {
            "trainer": program_role(
                args=["--env-dir", str(envs), "--record", str(record), "--await-lines", str(record), "3"]
            ),
            # No resources: they come from the JobType's server role (100m, 32Mi), not from the 1-CPU "small"
            # size, or two servers would take both exclusive cores of a 2-CPU machine and nothing would fit.
            "server": program_role(
                2, args=["--env-dir", str(envs), "--record", str(record), "--hold", str(never)], cpu=None, memory=None
            ),
        },
    )
    path = runtime.work_dir / "pool.yaml"
    path.write_text(USER_JOBTYPE + "---\n" + yaml.safe_dump(job, sort_keys=False))
    runtime.start_control_plane()
    result = runtime.cli("submit", str(path), check=True)
    assert "jobtype/param-pool created" in result.stdout
    assert "trainingjob/pool created" in result.stdout

    final = runtime.wait_phase("pool", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert processes_mentioning(str(never)) == []  # the service role was stopped once the trainer succeeded
    server = final.spec.replicas["server"].template.resources
    assert (server.cpu, server.memory) == (100, parse_memory("32Mi"))

    seen = read_envs(envs)
    assert set(seen) == {"trainer-0", "server-0", "server-1"}
    servers = ",".join(f"{h}:{p}" for h, p in (endpoint(final, f"server-{i}") for i in range(2)))
    trainer = "{}:{}".format(*endpoint(final, "trainer-0"))
    for name, rank in (("trainer-0", "0"), ("server-0", "1"), ("server-1", "2")):
        env = seen[name]
        assert env["POOL_RANK"] == rank, name
        assert env["POOL_SIZE"] == "3"
        assert env["POOL_SERVERS"] == servers
        assert env["POOL_SERVER_COUNT"] == "2"
        assert env["POOL_TRAINER"] == trainer
        assert env["POOL_ME"] == name.replace("-", "/")
    for i in range(2):
        assert seen[f"server-{i}"]["SERVER_ADDRESS"] == "{}:{}".format(*endpoint(final, f"server-{i}"))
    assert "SERVER_ADDRESS" not in seen["trainer-0"]  # a role's env is only that role's

    listed = runtime.cli("get", "jobtypes", check=True).stdout
    assert any(line.split()[:2] == ["param-pool", "trainer,"] for line in listed.splitlines()), listed


def test_pytorch_master_and_workers_get_torchrun_variables(runtime: Runtime, tmp_path: Path) -> None:
    envs, record = tmp_path / "env", tmp_path / "starts.txt"
    # Every replica waits until all three run, so the environment is the one of one live gang.
    args = ["--env-dir", str(envs), "--record", str(record), "--await-lines", str(record), "3"]
    runtime.start_control_plane()
    runtime.submit(
        typed_job("ddp", "pytorch", {"master": program_role(args=args), "worker": program_role(2, args=args)})
    )
    final = runtime.wait_phase("ddp", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message

    seen = read_envs(envs)
    assert set(seen) == {"master-0", "worker-0", "worker-1"}
    master_host, master_port = endpoint(final, "master-0")
    for env in seen.values():
        assert env["MASTER_ADDR"] == master_host
        assert env["MASTER_PORT"] == str(master_port)
        assert env["WORLD_SIZE"] == "3"
        assert env["LOCAL_WORLD_SIZE"] == "3"  # one node: every replica is local
        assert env["GROUP_RANK"] == "0"
        # torchrun's view: every replica is a node of its own, numbered by rank, even all on one machine.
        assert (env["PET_NNODES"], env["PET_NODE_RANK"]) == ("3", env["RANK"])
        assert env["RANK"] == env["PHALANX_RANK"]
        assert env["LOCAL_RANK"] == env["RANK"]
    assert seen["master-0"]["RANK"] == "0"
    ranks = sorted(int(env["RANK"]) for env in seen.values())
    assert ranks == [0, 1, 2], f"ranks are not distinct: {ranks}"
    assert {seen["worker-0"]["RANK"], seen["worker-1"]["RANK"]} == {"1", "2"}
