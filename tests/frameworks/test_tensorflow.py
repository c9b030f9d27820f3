"""TensorFlow under the tensorflow JobType: MultiWorkerMirroredStrategy over two workers, and the
parameter-server layout (ParameterServerStrategy with a chief, workers and a parameter server).

Both run the examples in examples/frameworks/tensorflow as a user would (``phalanx run``). The programs check
their own collectives and exit non-zero when wrong; these tests check again from the files they wrote: the
all-reduce sum and the weight digests of every worker, the steps the parameter server counted. In the
parameter-server layout the workers and the parameter server serve until stopped, so the test also checks
that Phalanx stopped them once the chief had succeeded. Both end by checking that Kubernetes would render
the same environment, command lines and Service for these replicas (support.rendering_parity).
"""

from __future__ import annotations

import pytest

from support.frameworks import FrameworksRuntime, load_example, program_pids
from support.rendering_parity import assert_kubernetes_renders_the_same


@pytest.mark.timeout(600)
def test_multi_worker_mirrored_strategy_trains_two_workers_to_identical_weights(fw: FrameworksRuntime) -> None:
    run = fw.run_example("tensorflow", "job.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "job tf-mirrored Succeeded" in run.stdout

    results = fw.results("tf-mirrored")
    assert sorted(results) == ["result-worker-0", "result-worker-1"]
    for name, result in results.items():
        assert result["workers"] == 2, name
        assert result["task_sum"] == result["expected_task_sum"] == 3.0, name  # 1 + 2, all-reduced
        assert result["weights_identical"] is True, name
        assert result["loss_last"] < result["loss_first"] / 10, name
    assert {r["task"] for r in results.values()} == {0, 1}
    # Each worker trained on its own shard; only the strategy's all-reduce makes the weights agree.
    assert results["result-worker-0"]["digest"] == results["result-worker-1"]["digest"]
    assert results["result-worker-0"]["weights"] == results["result-worker-1"]["weights"]
    # Kubernetes would tell each replica what these working replicas were told (TF_CONFIG, command line, Service).
    assert_kubernetes_renders_the_same(fw, "tf-mirrored", load_example("tensorflow", "job.yaml"))


@pytest.mark.timeout(600)
def test_parameter_server_strategy_trains_and_phalanx_stops_the_servers(fw: FrameworksRuntime) -> None:
    run = fw.run_example("tensorflow", "ps.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "job tf-ps Succeeded" in run.stdout

    result = fw.results("tf-ps")["result-chief-0"]
    assert (result["workers"], result["ps"]) == (2, 1)
    assert result["variable_devices"] == ["/job:ps/replica:0/task:0/device:CPU:0"]
    assert result["steps_run"] == result["steps_scheduled"] == 40
    assert result["error"] < 0.01  # the largest distance of a weight from the one that generated the data

    job = fw.job("tf-ps")
    assert job["status"]["phase"] == "Succeeded"
    assert job["status"]["replicaStatuses"]["chief"]["succeeded"] == 1
    # The workers and the parameter server never exit by themselves (server.join()): Phalanx stopped them.
    for role, count in (("worker", 2), ("ps", 1)):
        for index in range(count):
            assert program_pids(fw.state_dir, "tf-ps", role, index) == [], f"{role}-{index} still runs"
    assert_kubernetes_renders_the_same(fw, "tf-ps", load_example("tensorflow", "ps.yaml"))
