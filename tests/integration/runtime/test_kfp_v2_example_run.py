"""The kfp-v2-compiled example pipeline (examples/pipelines) runs as documented on the real embedded runtime.

A container component and two lightweight Python components (``python3 -m kfp.dsl.executor_main``, fed the
executor input the pipeline controller builds), a ParallelFor over three factors and a fan-in: the run succeeds
and each step's return value is read back from its executor output file.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO, Runtime
from phalanx.model.pipelines import PipelineRun
from support.waiting import wait_until


def kfp_on_path() -> bool:
    python3 = shutil.which("python3")
    return python3 is not None and subprocess.run([python3, "-c", "import kfp"], capture_output=True).returncode == 0


@pytest.mark.skipif(not kfp_on_path(), reason="the steps run `python3 -m kfp...`: python3 on PATH needs kfp")
def test_the_kfp_v2_example_runs_as_documented(runtime: Runtime) -> None:
    runtime.start_control_plane()
    examples = REPO / "examples" / "pipelines"
    runtime.cli("submit", "-f", str(examples / "kfp_v2_pipeline.yaml"), check=True)
    runtime.cli("submit", "-f", str(examples / "kfp_v2_run.yaml"), check=True)

    def finished() -> PipelineRun | None:
        with runtime.client() as client:
            found = client.ops.get_pipelinerun("default", "kfp-v2-demo-1")
        return found if found.status.phase in ("Succeeded", "Failed") else None

    run = wait_until(finished, timeout=120, message="the kfp v2 example run to finish")
    if run.status.phase != "Succeeded":
        pytest.fail(f"{run.status.message}\n{runtime.cli('describe', 'plr', 'kfp-v2-demo-1').stdout}")
    outputs = {(e.step, e.item): e.outputs for e in run.status.instances}
    # count 20: the numbers sum to 210, times each factor of the ParallelFor
    assert [outputs[("scaled-sum", i)]["Output"] for i in range(3)] == ["210", "420", "630"]
    assert outputs[("report", None)]["Output"] == "big"
