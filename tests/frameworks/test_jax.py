"""JAX under Phalanx: three processes started through the jax JobType find each other with
``jax.distributed.initialize()`` and no arguments, sum across processes with ``psum`` and train a linear model
data-parallel (examples/frameworks/jax)."""

from __future__ import annotations

import pytest

from support.frameworks import FrameworksRuntime, load_example
from support.rendering_parity import assert_kubernetes_renders_the_same


@pytest.mark.timeout(300)
def test_jax_processes_initialise_from_the_jobtype_env_and_psum_across_processes(fw: FrameworksRuntime) -> None:
    (job,) = load_example("jax")
    workers = job["spec"]["replicas"]["worker"]["count"]
    assert workers >= 2

    run = fw.run_example("jax")

    assert run.returncode == 0, run.stdout + run.stderr
    assert fw.job("jax-psum")["status"]["phase"] == "Succeeded"
    results = fw.results("jax-psum")
    assert sorted(results) == [f"result-{i}" for i in range(workers)]
    digests = set()
    for name, result in results.items():
        assert name == f"result-{result['process_id']}"
        assert result["process_count"] == result["global_devices"] == workers
        assert result["psum"] == workers * (workers + 1) / 2
        digests.add(result["weights_sha256"])
    # Every process holds the same trained weights, and training moved them towards the true (1, 2, 3, 4).
    assert len(digests) == 1
    weights = results["result-0"]["weights"]
    assert all(0.0 < w < 5.0 for w in weights) and weights == sorted(weights)
    # Kubernetes would tell each replica what these working replicas were told (env, command line, Service).
    assert_kubernetes_renders_the_same(fw, "jax-psum", load_example("jax"))
