"""`phalanx up` options that cannot take effect are said, not dropped: a GPU fault file beside a simulated
inventory, and options given to a control plane that already runs (found trying the CLI as a new user)."""

from __future__ import annotations

from conftest import REPO, Runtime

INVENTORY = REPO / "examples" / "inventories" / "two-nodes-4gpu.yaml"


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_gpu_fault_file_with_an_inventory_is_refused_naming_the_fix(runtime: Runtime) -> None:
    faults = runtime.work_dir / "faults"
    faults.write_text("0\n")
    refused = runtime.cli("up", "--inventory", str(INVENTORY), "--gpu-fault-file", str(faults))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = flat(refused.stderr)
    assert "--gpu-fault-file" in said and "healthy: false" in said and "Traceback" not in said, said
    assert "control plane: not running" in runtime.cli("status", check=True).stdout  # nothing was started


def test_options_a_running_control_plane_cannot_take_are_named_in_a_warning(runtime: Runtime) -> None:
    try:
        runtime.cli("up", "--inventory", str(INVENTORY), check=True)
        plain = runtime.cli("up", check=True)
        assert "already running" in plain.stdout and plain.stderr == ""

        again = runtime.cli("up", "--cache-size", "1Gi", "--gpu-fault-file", str(runtime.work_dir / "f"), check=True)
        assert "already running" in again.stdout
        said = flat(again.stderr)
        assert said.startswith("warning: --cache-size and --gpu-fault-file were not applied"), said
        assert "run `phalanx down`, then `phalanx up`" in said
    finally:
        runtime.cli("down")
