"""hack/slurm_testenv.py's configuration: one node of this machine, loopback, everything inside its directory.

The daemons themselves run in benchmarks/vs_slurm.py (as root, with Debian's slurm-wlm); here only what the
configuration says, so that a run never reads or writes outside its directory nor meets a system Slurm.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

import slurm_testenv


def test_the_configuration_keeps_everything_in_its_directory_on_loopback(tmp_path: Path) -> None:
    text = slurm_testenv._config(tmp_path, "bench-host")
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith(("NodeName", "Partition"))
    )
    paths = [value for key, value in settings.items() if key.endswith(("Location", "Dir", "File")) or key == "AuthInfo"]
    assert len(paths) == 7
    assert all(str(tmp_path) in value for value in paths), paths
    assert settings["SlurmctldHost"] == "bench-host(127.0.0.1)"
    assert settings["AccountingStorageType"] == "accounting_storage/none"
    assert int(settings["SlurmctldPort"]) != int(settings["SlurmdPort"])
    [node] = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert node.startswith(f"NodeName=bench-host NodeAddr=127.0.0.1 CPUs={os.cpu_count()} ")
