"""Where a job's outputs may be stored on the embedded runtime (``outputs.storeTo``), with a real control plane.

Allowed: any folder outside the state directory, absolute or relative to where the job was submitted; symbolic
links among the outputs are copied as links, never followed. Refused at the door, naming the field, with nothing
created: a storeTo in the state directory (the store, the tokens, other jobs' files), however it gets there (a
``..`` path, a symbolic link), except its artifacts folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

from conftest import Runtime, generic_job
from phalanx.model.jobs import Phase, TrainingJob

FINISHED = {Phase.SUCCEEDED, Phase.FAILED}

WRITE = (
    "import os, pathlib; out = pathlib.Path(os.environ['PHALANX_OUTPUT_DIR']); out.mkdir(parents=True, exist_ok=True); "
    "(out / 'model.bin').write_bytes(b'weights'); os.symlink({target!r}, out / 'link')"
)


def storing_job(name: str, store_to: str, link_target: str = "/nonexistent") -> dict[str, Any]:
    job = generic_job(name)
    job["spec"]["replicas"]["worker"]["template"]["command"] = [sys.executable, "-c", WRITE.format(target=link_target)]
    job["spec"]["outputs"] = {"storeTo": store_to}
    return job


def test_outputs_go_where_store_to_says_and_links_are_copied_as_links(runtime: Runtime, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not the job's to publish")
    runtime.start_control_plane()
    path = runtime.work_dir / "keeper.yaml"
    path.write_text(yaml.safe_dump(storing_job("keeper", "kept/model", link_target=str(secret))))
    runtime.cli("submit", "-f", str(path), check=True)  # from the work directory, where relative paths start
    job = runtime.wait_phase("keeper", FINISHED)
    assert job.status.phase == Phase.SUCCEEDED, job.status.message
    # Relative to where it was submitted (the runtime's work directory).
    stored = runtime.work_dir / "kept" / "model"
    assert (stored / "model.bin").read_bytes() == b"weights"
    assert (stored / "link").is_symlink() and os.readlink(stored / "link") == str(secret)


def test_a_store_to_in_the_state_directory_is_refused_at_the_door(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    disguised = tmp_path / "innocent"
    disguised.symlink_to(runtime.state_dir)
    relative = os.path.relpath(runtime.state_dir / "runs", runtime.work_dir)
    for name, store_to in (
        ("onto-the-store", str(runtime.state_dir)),
        ("into-runs", relative),
        ("through-a-link", str(disguised / "tokens")),
    ):
        path = runtime.work_dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(storing_job(name, store_to)))
        refused = runtime.cli("submit", "-f", str(path))
        assert refused.returncode != 0, refused.stdout
        said = " ".join(refused.stderr.split())
        assert "spec.outputs.storeTo:" in said and f"is in the state directory {runtime.state_dir}" in said, said
        assert "store the outputs outside it, or leave storeTo out" in said, said
    with runtime.client() as client:
        assert client.store.list(TrainingJob) == []  # nothing was created
    # Its artifacts folder is where outputs go by default: naming it is allowed.
    allowed = storing_job("to-artifacts", str(runtime.state_dir / "artifacts" / "mine"))
    runtime.submit(allowed)
    assert runtime.wait_phase("to-artifacts", FINISHED).status.phase == Phase.SUCCEEDED
    assert (runtime.state_dir / "artifacts" / "mine" / "model.bin").read_bytes() == b"weights"
