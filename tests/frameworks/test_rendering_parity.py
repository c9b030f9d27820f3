"""Kubernetes tells replicas what the embedded runtime told the working ones (issue 15, point 3), on real replicas.

``support.rendering_parity.assert_kubernetes_renders_the_same`` compares what a succeeded job's replicas got
from the embedded runtime (their launch files and hostfiles) with the Pods, hostfile ConfigMap and headless Service
the operator's renderer makes of the same job file. Each framework's test calls it after its job trained; this
one proves it on tests/support/rendering_parity_probe.yaml, a job of a JobType written for the purpose whose env
uses every template variable and function (addresses alone and in pairs, ``hosts``, ``TF_CONFIG``, the hostfile,
node-local numbering), run by ``phalanx run`` as a user runs it. Its program writes the environment it saw, so
the test also checks that the launch files the comparison reads are what the replicas really had.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from support.frameworks import FrameworksRuntime
from support.rendering_parity import COMMAND, assert_kubernetes_renders_the_same, embedded_facts

PROBE = Path(__file__).parents[1] / "support" / "rendering_parity_probe.yaml"


@pytest.mark.timeout(300)
def test_kubernetes_renders_what_the_embedded_runtime_gave_the_replicas(fw: FrameworksRuntime) -> None:
    shutil.copy(PROBE, fw.work_dir / "probe.yaml")
    documents = [doc for doc in yaml.safe_load_all(PROBE.read_text()) if doc]

    result = fw.cli("run", "probe.yaml", timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr

    view = assert_kubernetes_renders_the_same(fw, "probe", documents)
    assert sorted(view.replicas) == ["probe-launcher-0", "probe-worker-0", "probe-worker-1", "probe-worker-2"]
    worker_1 = view.replicas["probe-worker-1"]
    assert worker_1["COORDINATOR"] == "<probe-worker-0>.host:<probe-worker-0>.port"
    assert worker_1["WORKERS"] == "<probe-worker-0>,<probe-worker-1>,<probe-worker-2>"
    assert json.loads(worker_1["TF_CONFIG"]) == {
        "cluster": {"worker": ["<probe-worker-0>", "<probe-worker-1>", "<probe-worker-2>"]},
        "task": {"type": "worker", "index": 1},
    }
    assert worker_1["LOCAL"] == "<local_rank> of <local_world_size>, node <node_rank> of <num_nodes>"
    assert worker_1["WORKER_COUNT"] == "set by the job"
    assert view.replicas["probe-launcher-0"]["ROLE_ONLY"] == "<probe-worker-0>.host"
    assert view.hostfiles == [[("probe-worker-0", "2"), ("probe-worker-1", "2"), ("probe-worker-2", "2")]]

    assert worker_1[COMMAND].endswith("'$(COORDINATOR)' '--self=$(SELF)' '$$(SELF)' '$(NOT_SET)'")

    # The launch files the comparison read are what the programs saw, arguments expanded from their env.
    facts = embedded_facts(fw.state_dir, fw.job("probe"))
    for name, env in facts.envs.items():
        role, index = name.removeprefix("probe-").rsplit("-", 1)
        seen = json.loads((fw.outputs("probe") / f"env-{role}-{index}.json").read_text())
        rendered = [key for key in view.replicas[name] if key != COMMAND]
        assert {key: seen["env"].get(key) for key in rendered} == {key: env.get(key) for key in rendered}, name
        assert seen["argv"] == [env["COORDINATOR"], f"--self={env['SELF']}", "$(SELF)", "$(NOT_SET)"], name
