"""The sweep study survives a control plane killed with SIGKILL, on a real PostgreSQL server and a SQLite file.

A child process (optuna_study_child.py) asks trials as the sweep controller would and is killed with SIGKILL,
either once its trials are asked or at an arbitrary moment of asking; a store opened afterwards must see every
trial the child had asked, with the same parameters, none lost, none numbered twice, none left half-suggested.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.sweeps.optuna_study import StudyStore
from phalanx.core.sweeps.substitute import check_assignment
from phalanx.model.sweeps import Sweep, parse_sweep

CHILD = Path(__file__).with_name("optuna_study_child.py")

SWEEP: dict[str, Any] = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "Sweep",
    "metadata": {"name": "restart", "namespace": "default"},
    "spec": {
        "parameters": [
            {"name": "lr", "type": "double", "min": 1e-5, "max": 1e-1, "log": True},
            {"name": "layers", "type": "int", "min": 1, "max": 6},
            {"name": "batch", "type": "discrete", "values": [32, 64, 128]},
            {"name": "optimizer", "type": "categorical", "values": ["adam", "sgd"]},
            {"name": "momentum", "type": "double", "min": 0.5, "max": 0.99, "when": {"optimizer": "sgd"}},
        ],
        "algorithm": {"name": "tpe", "seed": 7, "settings": {"n_startup_trials": 2}},
        "objective": {"metric": "val_loss"},
        "maxTrials": 1000,
        "trial": {"spec": {"type": "generic", "replicas": {"worker": {"template": {"command": ["true"]}}}}},
    },
}


@pytest.fixture(params=["postgresql", "sqlite"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'sweeps.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def sweep(tmp_path: Path) -> tuple[Sweep, Path]:
    """A sweep with a uid of its own (one study per test on the shared server), and its JSON file for the child."""
    document = json.loads(json.dumps(SWEEP))
    document["metadata"]["uid"] = uuid.uuid4().hex
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(document))
    return parse_sweep(document), path


class Child:
    """The child process and the trials it printed (each printed once it was in the database)."""

    def __init__(self, url: str, sweep_file: Path, mode: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), url, str(sweep_file), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.printed: dict[int, dict[str, Any]] = {}

    def read_until(self, enough: int | None) -> None:
        """Read printed trials until ``enough`` were printed (or "ready"); a line per trial, blocking."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == "ready":
                return
            row = json.loads(line)
            self.printed[row["number"]] = row["params"]
            if enough is not None and len(self.printed) >= enough:
                return
        pytest.fail(f"the child exited with {self.process.wait()} before printing enough trials")

    def kill(self) -> None:
        """SIGKILL, then whatever it printed before dying."""
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(timeout=30) == -signal.SIGKILL
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() and line.strip() != "ready":
                row = json.loads(line)
                self.printed[row["number"]] = row["params"]


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait(timeout=30)


def test_trials_asked_before_a_kill_are_found_again(
    storage_url: str, sweep: tuple[Sweep, Path], children: list[Child]
) -> None:
    model, sweep_file = sweep
    child = Child(storage_url, sweep_file, "3")
    children.append(child)
    child.read_until(None)
    child.kill()
    study = StudyStore(storage_url).open(model)
    assert study.asked() == child.printed
    assert sorted(child.printed) == [0, 1, 2]
    assert sorted(study.ask(1)) == [3], "the next trial takes the next number: nothing is numbered twice"


def test_a_kill_while_asking_loses_and_repeats_nothing(
    storage_url: str, sweep: tuple[Sweep, Path], children: list[Child]
) -> None:
    model, sweep_file = sweep
    child = Child(storage_url, sweep_file, "forever")
    children.append(child)
    child.read_until(6)  # past TPE's startup trials: the kill lands while it models and writes a suggestion
    child.kill()
    asked = StudyStore(storage_url).open(model).asked()
    assert sorted(asked) == list(range(len(asked))), "numbers are contiguous from 0"
    assert {number: asked[number] for number in child.printed} == child.printed
    # At most one trial was cut off between its creation and its printing; it is completed, not dropped.
    assert len(asked) - len(child.printed) <= 1
    for params in asked.values():
        assert check_assignment(model.spec, params) == []
    assert StudyStore(storage_url).open(model).asked() == asked, "reopening again changes nothing"


def test_two_stores_on_one_database_share_the_study(storage_url: str, sweep: tuple[Sweep, Path]) -> None:
    model, _ = sweep
    first, second = StudyStore(storage_url).open(model), StudyStore(storage_url).open(model)
    asked = first.ask(2)
    assert second.asked() == asked
    assert sorted(second.ask(1)) == [2]
    second.report(2, {1: 0.5})
    first.tell(2, "complete", 0.25)
    second.tell(2, "complete", 0.75)  # already told by the other: a no-op
    first.tell(0, "fail", None)
    assert second.told() == {0, 2}
    assert sorted(first.asked()) == [1]
    assert [t.value for t in second._study.get_trials() if t.number == 2] == [0.25]
