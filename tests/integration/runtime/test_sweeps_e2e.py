"""Sweeps on the real embedded runtime: real trial processes, the real store, Optuna's study in sweeps.db.

A sweep of short Python trials that print ``phalanx-metric`` lines and write metrics.json ends with the right
best trial, never running more than parallelTrials at once; the median rule stops a bad trial (its process
ends, it is recorded Stopped with why); and a control plane killed with SIGKILL in the middle of a sweep, then
started again, ends it with exactly maxTrials trials numbered 0..N-1, none started twice.
"""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any

import pytest

from conftest import Runtime
from phalanx.core.sweeps.trials import trial_parameters
from phalanx.model.jobs import TrainingJob
from phalanx.model.sweeps import Sweep
from support.waiting import wait_until

pytest.importorskip("optuna", reason="sweeps need Optuna: the test extra installs it")

# Each trial: records its start (number, monotonic time) and end, prints the objective per step, waits for its
# gate file when told to, and writes metrics.json. loss = (x - 0.3)^2 (+ 1/step on the way), or 10 when "bad".
TRIAL = textwrap.dedent(
    """
    import json, os, sys, time
    number, x, mode, record = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
    def note(what):
        with open(record, "a") as f:
            f.write(json.dumps({"trial": number, "what": what, "t": time.monotonic()}) + "\\n")
    note("start")
    bad = mode == "bad" and number == 2
    for step in range(1, 6):
        loss = 10.0 if bad else (x - 0.3) ** 2 + 1.0 / step
        print(f"phalanx-metric step={step} loss={loss}", flush=True)
    gate = os.path.join(os.path.dirname(record), f"gate-{number}")
    deadline = time.monotonic() + 60
    while (bad or (mode == "gated" and not os.path.exists(gate))) and time.monotonic() < deadline:
        time.sleep(0.05)
    out = os.environ["PHALANX_OUTPUT_DIR"]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump({"loss": (x - 0.3) ** 2}, f)
    note("end")
    """
)


def sweep_document(runtime: Runtime, name: str, mode: str, **spec: Any) -> dict[str, Any]:
    program = runtime.work_dir / "trial.py"
    program.write_text(TRIAL)
    record = runtime.work_dir / "record.jsonl"
    command = [sys.executable, str(program), "${trial.number}", "${params.x}", mode, str(record)]
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Sweep",
        "metadata": {"name": name},
        "spec": {
            "parameters": [{"name": "x", "type": "double", "min": 0.0, "max": 1.0}],
            "algorithm": {"name": "tpe", "seed": 5},
            "objective": {"metric": "loss", "direction": "minimize"},
            "parallelTrials": 2,
            "maxTrials": 4,
            "trial": {
                "spec": {
                    "type": "generic",
                    "replicas": {
                        "worker": {"template": {"command": command, "resources": {"cpu": "100m", "memory": "64Mi"}}}
                    },
                }
            },
            **spec,
        },
    }


def submit_sweep(runtime: Runtime, document: dict[str, Any]) -> None:
    path = runtime.write_job(document["metadata"]["name"], document)
    submitted = runtime.cli("submit", "-f", str(path), check=True)
    assert f"sweep/{document['metadata']['name']} created" in submitted.stdout


def read_sweep(runtime: Runtime, name: str) -> Sweep:
    with runtime.client() as client:
        sweep = client.store.try_get(Sweep, "default", name)
    assert sweep is not None
    return sweep


def wait_done(runtime: Runtime, name: str, timeout: float = 120.0) -> Sweep:
    def done() -> Sweep | None:
        sweep = read_sweep(runtime, name)
        return sweep if sweep.status.phase in ("Succeeded", "Failed") else None

    try:
        return wait_until(done, timeout=timeout, message=f"sweep {name} to finish")  # type: ignore[no-any-return]
    except pytest.fail.Exception:
        logs = "\n".join(plane.log()[-4000:] for plane in runtime.planes)
        pytest.fail(f"sweep {name} did not finish: {read_sweep(runtime, name).status}\n{logs}")


def trial_jobs(runtime: Runtime, name: str) -> dict[int, TrainingJob]:
    with runtime.client() as client:
        jobs = client.store.list(TrainingJob, "default")
    return {int(j.metadata.labels["phalanx.dev/trial-number"]): j for j in jobs if j.metadata.name.startswith(name)}


def records(runtime: Runtime) -> list[dict[str, Any]]:
    path = runtime.work_dir / "record.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def most_at_once(notes: list[dict[str, Any]]) -> int:
    running, most = 0, 0
    for note in sorted(notes, key=lambda n: (n["t"], n["what"] == "start")):
        running += 1 if note["what"] == "start" else -1
        most = max(most, running)
    return most


def test_a_sweep_of_real_trials_finishes_with_the_best_of_them(runtime: Runtime) -> None:
    runtime.start_control_plane()
    submit_sweep(runtime, sweep_document(runtime, "quad", "plain"))
    sweep = wait_done(runtime, "quad")
    assert (sweep.status.phase, sweep.status.reason) == ("Succeeded", "MaxTrialsReached"), sweep.status
    jobs = trial_jobs(runtime, "quad")
    assert sorted(jobs) == [0, 1, 2, 3]
    losses = {}
    for number, job in jobs.items():
        parameters = trial_parameters(job)
        assert parameters is not None
        losses[number] = (float(parameters["x"]) - 0.3) ** 2
        assert job.status.metrics["loss"] == pytest.approx(losses[number])
    best = min(losses, key=lambda n: (losses[n], n))
    assert sweep.status.best_trial is not None
    assert (sweep.status.best_trial.number, sweep.status.best_trial.name) == (best, f"quad-{best}")
    assert sweep.status.best_trial.value == pytest.approx(losses[best])
    assert most_at_once(records(runtime)) <= 2
    assert [r.phase for r in sweep.status.results] == ["Succeeded"] * 4
    assert (runtime.state_dir / "sweeps.db").exists()

    shown = runtime.cli("sweep", "best", "quad", "-o", "json", check=True)
    assert json.loads(shown.stdout) == {
        "name": f"quad-{best}",
        "number": best,
        "parameters": dict(sweep.status.best_trial.parameters),
        "value": sweep.status.best_trial.value,
    }
    described = runtime.cli("describe", "sweep", "quad", check=True).stdout
    assert described.index(f"quad-{best} ") < min(described.index(f"quad-{n} ") for n in jobs if n != best)
    assert "SweepSucceeded" in described and "TrialCreated" in described


def test_the_median_rule_stops_a_bad_trial_whose_process_then_ends(runtime: Runtime) -> None:
    runtime.start_control_plane()
    early = {"rule": "median", "minTrials": 2, "startStep": 2}
    submit_sweep(runtime, sweep_document(runtime, "med", "bad", parallelTrials=3, maxTrials=3, earlyStopping=early))
    sweep = wait_done(runtime, "med")
    assert sweep.status.phase == "Succeeded", sweep.status
    stopped = sweep.status.result(2)
    assert stopped is not None and stopped.phase == "Stopped", sweep.status.results
    assert "median" in stopped.reason and stopped.value == 10.0
    assert sweep.status.trials.stopped == 1 and sweep.status.best_trial is not None
    assert sweep.status.best_trial.number in (0, 1)
    assert trial_jobs(runtime, "med")[2].status.phase == "Halted"
    # Its process ended by the halt, not by running to its end.
    notes = records(runtime)
    assert {"trial": 2, "what": "start"} in [{"trial": n["trial"], "what": n["what"]} for n in notes]
    assert not any(n["trial"] == 2 and n["what"] == "end" for n in notes)
    described = runtime.cli("describe", "sweep", "med", check=True).stdout
    assert "Stopped and failed trials" in described and "TrialStopped" in described

    missing = runtime.cli("sweep", "best", "nothing")
    assert missing.returncode == 1 and "sweep default/nothing not found" in missing.stderr


def test_a_control_plane_killed_mid_sweep_loses_and_repeats_no_trial(runtime: Runtime) -> None:
    plane = runtime.start_control_plane()
    submit_sweep(runtime, sweep_document(runtime, "kill", "gated", maxTrials=6))

    def started() -> list[int]:
        return [n["trial"] for n in records(runtime) if n["what"] == "start"]

    wait_until(lambda: 0 in started(), timeout=60, message="trial 0 to start")
    none_yet = runtime.cli("sweep", "best", "kill", "-o", "json")  # trial 0 waits for its gate: nothing is done
    assert none_yet.returncode == 1 and "sweep kill has no best trial yet" in none_yet.stderr
    assert none_yet.stdout == ""
    for release in range(6):
        wait_until(lambda: release in started(), timeout=60, message=f"trial {release} to start")  # noqa: B023
        (runtime.work_dir / f"gate-{release}").touch()
        if release in (0, 2, 4):
            # Killed as trial `release` ends: the next pass tells it, asks, creates the next one.
            plane.kill9()
            plane = runtime.start_control_plane()
    sweep = wait_done(runtime, "kill")
    assert sweep.status.phase == "Succeeded", sweep.status
    assert sorted(started()) == [0, 1, 2, 3, 4, 5]  # each trial's process started once
    assert sorted(trial_jobs(runtime, "kill")) == [0, 1, 2, 3, 4, 5]
    assert sweep.status.trials.created == 6 and sweep.status.trials.succeeded == 6
    assert [r.number for r in sweep.status.results] == [0, 1, 2, 3, 4, 5]


def test_deleting_a_running_sweep_ends_its_trials_and_drops_its_study(runtime: Runtime) -> None:
    import optuna

    runtime.start_control_plane()
    submit_sweep(runtime, sweep_document(runtime, "gone", "gated"))
    wait_until(lambda: len({n["trial"] for n in records(runtime)}) == 2, timeout=60, message="two trials to start")
    storage = f"sqlite:///{runtime.state_dir / 'sweeps.db'}"
    assert [name.split(".")[:2] for name in optuna.get_all_study_names(storage)] == [["default", "gone"]]
    deleted = runtime.cli("delete", "sweep", "gone", check=True).stdout
    assert "sweep/gone deleted" in deleted
    wait_until(lambda: optuna.get_all_study_names(storage) == [], timeout=30, message="the study to be dropped")
    wait_until(lambda: trial_jobs(runtime, "gone") == {}, timeout=30, message="the trial jobs to go")
    assert not any(n["what"] == "end" for n in records(runtime))  # stopped by the deletion, not run to their end
