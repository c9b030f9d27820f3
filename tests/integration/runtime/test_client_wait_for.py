"""``Client.wait_for``: any kind with a phase, woken by another process's write to the store; a clear timeout."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from phalanx.entrypoints.client import Client, WaitTimeoutError
from phalanx.model.sweeps import Sweep, SweepPhase, parse_sweep

SWEEP: dict[str, Any] = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "Sweep",
    "metadata": {"name": "s"},
    "spec": {
        "parameters": [{"name": "lr", "type": "double", "min": 0.1, "max": 1.0}],
        "algorithm": {"name": "random"},
        "objective": {"metric": "loss", "direction": "minimize"},
        "maxTrials": 1,
        "trial": {"spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["x"]}}}}},
    },
}
# Another process ends the sweep, as the control plane would (while the client waits, or just before it does).
FINISHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from phalanx.adapters.store import SqliteStore
    from phalanx.model.sweeps import Sweep
    store = SqliteStore(Path(sys.argv[1]))
    sweep = store.get(Sweep, "default", "s")
    store.update_status(sweep.model_copy(update={"status": sweep.status.model_copy(update={"phase": "Succeeded"})}))
    """
)


def test_wait_for_returns_the_object_once_another_process_wrote_the_phase(tmp_path: Path) -> None:
    with Client(state_dir=tmp_path) as client:
        client.store.create(parse_sweep(copy.deepcopy(SWEEP)))
        finisher = subprocess.Popen([sys.executable, "-c", FINISHER, str(client.layout.database)])
        try:
            found = client.wait_for(Sweep, "s", {SweepPhase.SUCCEEDED, SweepPhase.FAILED}, timeout=60)
        finally:
            finisher.wait(timeout=60)
        assert isinstance(found, Sweep) and found.status.phase == SweepPhase.SUCCEEDED
        assert client.wait_for(Sweep, "s", {"Succeeded"}, timeout=0).status.phase == "Succeeded"  # there already


def test_wait_for_times_out_naming_the_object_and_its_last_phase(tmp_path: Path) -> None:
    with Client(state_dir=tmp_path, namespace="ml") as client:
        document = copy.deepcopy(SWEEP)
        document["metadata"]["namespace"] = "ml"
        client.store.create(parse_sweep(document))
        with pytest.raises(TimeoutError) as caught:
            client.wait_for(Sweep, "s", {SweepPhase.SUCCEEDED}, timeout=0.2)
        assert isinstance(caught.value, WaitTimeoutError)
        assert str(caught.value) == "sweep ml/s is still Pending after 0.2s (waited for Succeeded)"
        with pytest.raises(WaitTimeoutError, match=r"^sweep ml/nope does not exist after 0.1s"):
            client.wait_for(Sweep, "nope", {SweepPhase.SUCCEEDED}, timeout=0.1)
