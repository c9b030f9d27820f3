"""hack/gpu_check.py, the record behind docs/gpus.md: it says plainly when a machine has no GPU, and reads ranks.

The check itself needs NVIDIA GPUs and PyTorch (docs/gpus.md holds what it gave); here it runs for real against
the embedded control plane of this machine, which has no GPU NVML can see.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
from gpu_check import placed_gpus

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_a_machine_without_gpus_exits_2_with_one_sentence(tmp_path: Path) -> None:
    nvml = subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"], capture_output=True)
    if nvml.returncode == 0:
        pytest.skip("this machine has GPUs NVML can see: run hack/gpu_check.py itself (docs/gpus.md)")
    done = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gpu_check.py"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "no GPU: NVML found none on this machine (see `phalanx describe node`)"
    )
    assert "Traceback" not in done.stderr


def test_the_gpus_each_rank_was_given_are_read_from_the_admitted_line() -> None:
    line = (
        "   0.02s  Admitted     placed 3 replica(s) on vm: nccl-worker-1 CPUs 2 GPUs 3; "
        "nccl-master-0 CPUs 0 GPUs 0,1; nccl-worker-0 CPUs 1 GPUs 2"
    )
    assert placed_gpus(line) == [[0, 1], [2], [3]]


def test_the_check_wants_the_torch_the_frameworks_lock_pins() -> None:
    from gpu_check import pinned_torch

    pins = [line for line in (ROOT / "hack" / "frameworks.lock").read_text().splitlines() if line.startswith("torch==")]
    assert pins == [f"torch=={pinned_torch()}"]
