"""The sweep controller over the memory backend, with a fake study: every plan action, restarts, namesakes."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from phalanx.core.clock import VirtualClock
from phalanx.core.sweeps.substitute import PARAMETERS_ANNOTATION, SWEEP_LABEL, TRIAL_NUMBER_LABEL
from phalanx.core.sweeps.trials import STOPPED_ANNOTATION, SWEEP_UID_ANNOTATION
from phalanx.model.base import validated_copy
from phalanx.model.jobs import TrainingJob, TrainingJobStatus
from phalanx.model.katib import KATIB_STDOUT, METRICS_FORMAT_ANNOTATION
from phalanx.model.sweeps import ParamValue, Sweep, SweepPhase, TrialPhase, parse_sweep
from phalanx.services.operations import OperationError
from phalanx.services.sweeps.controller import SweepController
from phalanx.services.sweeps.study import Outcome, UnavailableStudies, optuna_studies
from support.memory_backend import MemoryBackend

SWEEP: dict[str, Any] = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "Sweep",
    "metadata": {"name": "lr", "annotations": {"phalanx.dev/submit-dir": "/src", "other": "x"}},
    "spec": {
        "parameters": [{"name": "lr", "type": "double", "min": 0.0001, "max": 1.0}],
        "algorithm": {"name": "random", "seed": 1},
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "parallelTrials": 2,
        "maxTrials": 4,
        "trial": {
            "spec": {
                "type": "generic",
                "replicas": {"worker": {"count": 1, "template": {"command": ["python", "train.py", "${params.lr}"]}}},
            }
        },
    },
}


class FakeStudy:
    """Suggestions from ``suggest(number)``; every trial asked and told kept, as Optuna's storage would."""

    def __init__(self, suggest: Callable[[int], dict[str, ParamValue]], limit: int | None) -> None:
        self.suggest = suggest
        self.limit = limit
        self.trials: dict[int, dict[str, Any]] = {}
        self.reports: dict[int, dict[int, float]] = {}

    def asked(self) -> dict[int, dict[str, ParamValue]]:
        return {n: dict(t["params"]) for n, t in self.trials.items() if t["state"] == "running"}

    def ask(self, count: int) -> dict[int, dict[str, ParamValue]]:
        made = {}
        end = len(self.trials) + count if self.limit is None else min(self.limit, len(self.trials) + count)
        for number in range(len(self.trials), end):
            made[number] = self.suggest(number)
            self.trials[number] = {"params": made[number], "state": "running", "value": None}
        return made

    def exhausted(self) -> bool:
        return self.limit is not None and len(self.trials) >= self.limit

    def report(self, number: int, intermediate: Mapping[int, float]) -> None:
        self.reports[number] = dict(intermediate)

    def tell(self, number: int, outcome: Outcome, value: float | None) -> None:
        if self.trials[number]["state"] == "running":
            self.trials[number].update(state=outcome, value=value)

    def told(self) -> set[int]:
        return {n for n, t in self.trials.items() if t["state"] != "running"}

    def states(self) -> dict[int, tuple[str, float | None]]:
        return {n: (t["state"], t["value"]) for n, t in self.trials.items()}


class FakeStudies:
    """One FakeStudy per sweep uid; it outlives the controllers (a restart reopens it)."""

    def __init__(self, suggest: Callable[[int], dict[str, ParamValue]] | None = None, limit: int | None = None):
        self.suggest = suggest or (lambda n: {"lr": round(0.1 * (n + 1), 6)})
        self.limit = limit
        self.studies: dict[str, FakeStudy] = {}
        self.deleted: list[str] = []

    def open(self, sweep: Sweep) -> FakeStudy:
        return self.studies.setdefault(sweep.metadata.uid or "", FakeStudy(self.suggest, self.limit))

    def delete(self, sweep: Sweep) -> None:
        self.deleted.append(sweep.metadata.uid or "")
        self.studies.pop(sweep.metadata.uid or "", None)


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def studies() -> FakeStudies:
    return FakeStudies()


def controller(backend: MemoryBackend, studies: Any) -> SweepController:
    return SweepController(
        backend, studies, VirtualClock(), inherited_annotations=frozenset({"phalanx.dev/submit-dir"}), log_every_s=0
    )


def submit(backend: MemoryBackend, **spec: Any) -> Sweep:
    doc = copy.deepcopy(SWEEP)
    doc["spec"].update(spec)
    backend.create(parse_sweep(doc))
    return sweep_now(backend)


def sweep_now(backend: MemoryBackend, name: str = "lr") -> Sweep:
    found = backend.get(Sweep, "default", name)
    assert found is not None
    return found


def jobs(backend: MemoryBackend) -> dict[str, TrainingJob]:
    return {job.metadata.name: job for job in backend.list(TrainingJob)}


def set_phase(backend: MemoryBackend, name: str, phase: str, **metrics: float) -> None:
    key = ("TrainingJob", "default", name)
    stored = backend.objects[key]
    status = TrainingJobStatus.model_validate({"phase": phase, "metrics": metrics, "message": f"it {phase}"})
    backend.objects[key] = stored.model_copy(update={"status": status})


def settle(ctl: SweepController, passes: int = 10) -> None:
    """Passes until one changes nothing (as the control plane runs them)."""
    for _ in range(passes):
        if not ctl.sync():
            return
    pytest.fail("the controller kept changing things")


def reasons(backend: MemoryBackend, sweep: Sweep) -> list[str]:
    return [event.reason for event in backend.events.get(sweep.metadata.uid or "", [])]


def messages(backend: MemoryBackend, sweep: Sweep) -> list[str]:
    return [event.message for event in backend.events.get(sweep.metadata.uid or "", [])]


def test_a_new_sweep_asks_and_creates_its_first_trials_as_jobs(backend: MemoryBackend, studies: FakeStudies) -> None:
    sweep = submit(backend)
    settle(controller(backend, studies))
    made = jobs(backend)
    assert sorted(made) == ["lr-0", "lr-1"]
    job = made["lr-1"]
    assert job.metadata.labels[SWEEP_LABEL] == "lr" and job.metadata.labels[TRIAL_NUMBER_LABEL] == "1"
    assert job.metadata.annotations[SWEEP_UID_ANNOTATION] == sweep.metadata.uid
    assert json.loads(job.metadata.annotations[PARAMETERS_ANNOTATION]) == {"lr": 0.2}
    # The annotation named as inherited is copied; the sweep's others are not.
    assert job.metadata.annotations["phalanx.dev/submit-dir"] == "/src" and "other" not in job.metadata.annotations
    assert job.spec.replicas["worker"].template.command == ["python", "train.py", "0.2"]
    status = sweep_now(backend).status
    assert (status.phase, status.trials.created, status.trials.running) == (SweepPhase.RUNNING, 2, 2)
    assert [(r.number, r.phase, r.parameters) for r in status.results] == [
        (0, TrialPhase.PENDING, {"lr": 0.1}),
        (1, TrialPhase.PENDING, {"lr": 0.2}),
    ]
    assert reasons(backend, sweep).count("TrialCreated") == 2


def test_finished_trials_are_told_once_and_the_sweep_ends_with_its_best(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    sweep = submit(backend)
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Succeeded", val_loss=0.5)
    set_phase(backend, "lr-1", "Succeeded", val_loss=0.25)
    settle(ctl)
    assert sorted(jobs(backend)) == ["lr-0", "lr-1", "lr-2", "lr-3"]
    set_phase(backend, "lr-2", "Succeeded", val_loss=0.125)
    set_phase(backend, "lr-3", "Running")
    settle(ctl)
    assert sweep_now(backend).status.phase == SweepPhase.RUNNING
    set_phase(backend, "lr-3", "Succeeded", val_loss=0.75)
    settle(ctl)
    study = studies.studies[sweep.metadata.uid or ""]
    assert study.states() == {
        0: ("complete", 0.5),
        1: ("complete", 0.25),
        2: ("complete", 0.125),
        3: ("complete", 0.75),
    }
    status = sweep_now(backend).status
    assert (status.phase, status.reason) == (SweepPhase.SUCCEEDED, "MaxTrialsReached")
    assert status.best_trial is not None and (status.best_trial.name, status.best_trial.value) == ("lr-2", 0.125)
    assert status.best_trial.parameters == {"lr": 0.3}
    assert status.completion_time is not None and status.trials.succeeded == 4
    assert reasons(backend, sweep).count("TrialSucceeded") == 4
    assert reasons(backend, sweep).count("SweepSucceeded") == 1
    # A finished sweep is left alone: no write, no event, no study call on later passes.
    calls = len(backend.calls)
    assert ctl.sync() is False and len(backend.calls) == calls


def test_a_crash_between_asking_and_creating_creates_the_asked_trials_after_the_restart(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    sweep = submit(backend)
    backend.conflicts["create"] = 1  # the first create fails: the pass ends there, as a crash would
    controller(backend, studies).sync()
    study = studies.studies[sweep.metadata.uid or ""]
    assert sorted(study.asked()) == [0, 1] and jobs(backend) == {}
    settle(controller(backend, studies))  # a new controller: nothing remembered but the store and the study
    assert sorted(jobs(backend)) == ["lr-0", "lr-1"]
    assert len(study.trials) == 2  # nothing asked twice
    assert json.loads(jobs(backend)["lr-0"].metadata.annotations[PARAMETERS_ANNOTATION]) == {"lr": 0.1}


def test_a_crash_between_creating_and_writing_the_status_repeats_nothing(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    sweep = submit(backend)
    backend.conflicts["write_status"] = 1
    assert controller(backend, studies).sync() is True
    assert sweep_now(backend).status.trials.created == 0  # the status was lost
    settle(controller(backend, studies))
    assert sorted(jobs(backend)) == ["lr-0", "lr-1"]
    assert len(studies.studies[sweep.metadata.uid or ""].trials) == 2
    assert [c for c in backend.calls if c[0] == "create" and c[1] == "TrainingJob"] == [
        ("create", "TrainingJob", "lr-0"),
        ("create", "TrainingJob", "lr-1"),
    ]


def test_a_job_of_an_earlier_sweep_of_the_same_name_is_not_a_trial_and_is_deleted(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    old = parse_sweep(SWEEP)
    document = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": "lr-0",
            "labels": {SWEEP_LABEL: "lr", TRIAL_NUMBER_LABEL: "0"},
            "annotations": {SWEEP_UID_ANNOTATION: "an-earlier-uid", PARAMETERS_ANNOTATION: '{"lr": 0.9}'},
        },
        "spec": old.spec.trial.spec,
    }
    backend.create(TrainingJob.model_validate(document))
    set_phase(backend, "lr-0", "Succeeded", val_loss=0.0)
    sweep = submit(backend)
    ctl = controller(backend, studies)
    ctl.sync()
    status = sweep_now(backend).status
    assert status.best_trial is None and all(r.parameters != {"lr": 0.9} for r in status.results)
    assert ("delete", "TrainingJob", "lr-0") in backend.calls
    settle(ctl)
    assert jobs(backend)["lr-0"].metadata.annotations[SWEEP_UID_ANNOTATION] == sweep.metadata.uid
    assert studies.studies[sweep.metadata.uid or ""].told() == set()


def test_the_median_rule_stops_a_bad_trial_which_ends_stopped_and_frees_its_slot(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    sweep = submit(backend, earlyStopping={"rule": "median", "minTrials": 1, "startStep": 2})
    ctl = controller(backend, studies)
    settle(ctl)
    made = jobs(backend)
    for name in ("lr-0", "lr-1"):
        set_phase(backend, name, "Running")
    good = "".join(f"phalanx-metric step={s} val_loss={0.1 / s}\n" for s in (1, 2, 3))
    bad = "".join(f"phalanx-metric step={s} val_loss={0.9}\n" for s in (1, 2, 3))
    backend.logs[made["lr-0"].metadata.uid or ""] = {"worker-0": good}
    backend.logs[made["lr-1"].metadata.uid or ""] = {"worker-0": "noise\n" + bad}
    settle(ctl)
    stopped = jobs(backend)["lr-1"]
    assert stopped.spec.run_policy.suspend is True
    assert "median" in stopped.metadata.annotations[STOPPED_ANNOTATION]
    assert jobs(backend)["lr-0"].spec.run_policy.suspend is False
    assert "lr-2" not in jobs(backend)  # halting still holds its resources: no new trial yet
    assert reasons(backend, sweep).count("TrialStopped") == 1
    set_phase(backend, "lr-1", "Halted")
    settle(ctl)
    assert "lr-2" in jobs(backend)
    study = studies.studies[sweep.metadata.uid or ""]
    assert study.states()[1] == ("pruned", 0.9) and study.reports[1] == {1: 0.9, 2: 0.9, 3: 0.9}
    result = sweep_now(backend).status.result(1)
    assert result is not None and (result.phase, result.step, result.value) == (TrialPhase.STOPPED, 3, 0.9)
    assert result.reason == stopped.metadata.annotations[STOPPED_ANNOTATION]
    assert sweep_now(backend).status.trials.stopped == 1


def test_only_the_first_replica_of_the_first_role_reports_intermediate_values(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    submit(backend)
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Running")
    uid = jobs(backend)["lr-0"].metadata.uid or ""
    backend.logs[uid] = {
        "worker-0": "phalanx-metric step=4 val_loss=0.5\n",
        "worker-1": "phalanx-metric step=9 val_loss=9\n",
    }
    settle(ctl)
    result = sweep_now(backend).status.result(0)
    assert result is not None and (result.step, result.value) == (4, 0.5)


def test_a_human_halt_is_no_stop(backend: MemoryBackend, studies: FakeStudies) -> None:
    submit(backend)
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Halted")
    settle(ctl)
    result = sweep_now(backend).status.result(0)
    assert result is not None and result.phase == TrialPhase.PENDING  # waits for its resume; still counted
    assert sorted(jobs(backend)) == ["lr-0", "lr-1"]


def test_too_many_failed_trials_fail_the_sweep_and_stop_the_rest(backend: MemoryBackend, studies: FakeStudies) -> None:
    sweep = submit(backend, maxFailedTrials=0)
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Failed")
    set_phase(backend, "lr-1", "Running")
    settle(ctl)
    status = sweep_now(backend).status
    assert (status.phase, status.reason) == (SweepPhase.FAILED, "TooManyFailedTrials")
    assert jobs(backend)["lr-1"].spec.run_policy.suspend is True
    assert status.result(0) is not None and status.result(0).reason == "it Failed"  # type: ignore[union-attr]
    assert studies.studies[sweep.metadata.uid or ""].states()[0] == ("fail", None)
    assert reasons(backend, sweep).count("SweepFailed") == 1 and "TrialFailed" in reasons(backend, sweep)
    # The stopped trial halts: it is told pruned then, once, and the sweep stays Failed.
    set_phase(backend, "lr-1", "Halted")
    settle(ctl)
    assert studies.studies[sweep.metadata.uid or ""].states()[1] == ("pruned", None)
    assert sweep_now(backend).status.result(1).phase == TrialPhase.STOPPED  # type: ignore[union-attr]
    assert ctl.sync() is False


def test_a_succeeded_trial_without_the_metric_counts_as_failed(backend: MemoryBackend, studies: FakeStudies) -> None:
    sweep = submit(backend, maxFailedTrials=0)
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Succeeded", accuracy=0.9)
    settle(ctl)
    assert studies.studies[sweep.metadata.uid or ""].states()[0] == ("fail", None)
    # it names what the trial did report: a misspelt objective.metric (a new user's typo) shows at the first trial
    reason = "it reported no val_loss; its metrics.json has accuracy: is spec.objective.metric misspelt?"
    assert sweep_now(backend).status.result(0).reason == reason  # type: ignore[union-attr]
    assert f"trial lr-0 failed: {reason}" in messages(backend, sweep)
    status = sweep_now(backend).status
    assert status.phase == SweepPhase.FAILED
    # Failed wherever the sweep shows it (describe's table, `run`'s lines, the counts), not Succeeded.
    assert status.result(0).phase == TrialPhase.FAILED  # type: ignore[union-attr]
    assert (status.trials.succeeded, status.trials.failed) == (0, 1)


def test_a_trial_whose_job_is_deleted_keeps_counting(backend: MemoryBackend, studies: FakeStudies) -> None:
    submit(backend, maxTrials=2)
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Succeeded", val_loss=0.5)
    settle(ctl)
    backend.delete_job("default", "lr-0")  # by hand, or by ttlSecondsAfterFinished
    backend.delete_job("default", "lr-1")  # while it waits
    settle(controller(backend, studies))
    status = sweep_now(backend).status
    assert sorted(jobs(backend)) == []  # the budget of 2 is spent: nothing created again
    assert [(r.number, r.phase) for r in status.results] == [(0, TrialPhase.SUCCEEDED), (1, TrialPhase.FAILED)]
    assert status.results[1].reason == "its job was deleted before it finished"
    assert status.phase == SweepPhase.SUCCEEDED and status.best_trial is not None and status.best_trial.number == 0


def test_a_deleted_sweep_drops_its_study_and_its_trial_jobs(backend: MemoryBackend, studies: FakeStudies) -> None:
    sweep = submit(backend)
    ctl = controller(backend, studies)
    settle(ctl)
    backend.delete(Sweep, "default", "lr")
    settle(ctl)
    assert studies.deleted == [sweep.metadata.uid] and jobs(backend) == {}


def test_an_exhausted_search_space_ends_the_sweep(backend: MemoryBackend) -> None:
    studies = FakeStudies(limit=1)
    submit(backend)
    ctl = controller(backend, studies)
    settle(ctl)
    assert sorted(jobs(backend)) == ["lr-0"]
    set_phase(backend, "lr-0", "Succeeded", val_loss=0.5)
    settle(ctl)
    assert sweep_now(backend).status.reason == "SearchSpaceExhausted"


def test_the_goal_ends_the_sweep_stops_the_rest_and_abandons_what_was_asked(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    sweep = submit(backend, objective={"metric": "val_loss", "goal": 0.3})
    ctl = controller(backend, studies)
    settle(ctl)
    study = studies.studies[sweep.metadata.uid or ""]
    study.ask(1)  # asked, and not created yet (as after a crash between the two)
    set_phase(backend, "lr-0", "Succeeded", val_loss=0.2)
    settle(ctl)
    assert sweep_now(backend).status.reason == "GoalReached" and "lr-2" not in jobs(backend)
    assert jobs(backend)["lr-1"].metadata.annotations[STOPPED_ANNOTATION].startswith("trial 1 stopped: the sweep ended")
    assert study.states()[2] == ("fail", None)  # abandoned
    set_phase(backend, "lr-1", "Halted")
    settle(ctl)
    assert study.asked() == {} and study.states()[1] == ("pruned", None)


def test_a_suggestion_that_makes_no_valid_job_fails_the_sweep_naming_the_field(backend: MemoryBackend) -> None:
    studies = FakeStudies(suggest=lambda n: {"lr": 0.5, "cpu": "lots"})
    doc_spec = copy.deepcopy(SWEEP["spec"])
    doc_spec["parameters"].append({"name": "cpu", "type": "categorical", "values": ["1", "lots"]})
    doc_spec["trial"]["spec"]["replicas"]["worker"]["template"]["resources"] = {"cpu": "${params.cpu}"}
    sweep = submit(backend, **{k: doc_spec[k] for k in ("parameters", "trial")})
    settle(controller(backend, studies))
    status = sweep_now(backend).status
    assert (status.phase, status.reason) == (SweepPhase.FAILED, "TrialInvalid")
    assert "spec.trial.spec.replicas.worker.template.resources.cpu: invalid CPU quantity 'lots'" in status.message
    assert jobs(backend) == {}
    assert studies.studies[sweep.metadata.uid or ""].states()[0][0] == "fail"


def test_without_the_algorithm_package_a_sweep_waits_saying_how_to_install_it(backend: MemoryBackend) -> None:
    sweep = submit(backend)
    ctl = controller(backend, UnavailableStudies("sweeps need Optuna: pip install 'phalanx[sweeps]'"))
    settle(ctl)
    status = sweep_now(backend).status
    assert (status.phase, status.reason) == (SweepPhase.PENDING, "StudyUnavailable")
    assert "phalanx[sweeps]" in status.message and reasons(backend, sweep) == ["StudyUnavailable"]


def test_with_optuna_but_not_the_algorithms_library_a_sweep_waits_saying_what_is_missing(
    backend: MemoryBackend, tmp_path: Path
) -> None:
    # A cluster's door cannot know what the operator's image holds: the operator's real store refuses gp without
    # torch, and the sweep waits with that sentence instead of failing pass after pass.
    assert find_spec("torch") is None
    sweep = submit(backend, algorithm={"name": "gp", "seed": 1})
    ctl = controller(backend, optuna_studies(f"sqlite:///{tmp_path / 'sweeps.db'}", "phalanx-operator"))
    settle(ctl)
    status = sweep_now(backend).status
    assert (status.phase, status.reason) == (SweepPhase.PENDING, "StudyUnavailable")
    assert "spec.algorithm.name" in status.message and "PyTorch" in status.message, status.message
    assert reasons(backend, sweep) == ["StudyUnavailable"] and jobs(backend) == {}


def test_a_sweep_storage_that_cannot_be_used_makes_sweeps_wait_naming_it(backend: MemoryBackend) -> None:
    submit(backend)
    ctl = controller(backend, optuna_studies("mysql://db/sweeps", "phalanx-operator"))
    settle(ctl)
    status = sweep_now(backend).status
    assert (status.phase, status.reason) == (SweepPhase.PENDING, "StudyUnavailable")
    assert "phalanx-operator cannot use its sweep storage" in status.message
    assert "SQLite or PostgreSQL" in status.message


def test_a_sweep_converted_from_katib_reads_katib_name_value_lines(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    doc = copy.deepcopy(SWEEP)
    doc["metadata"]["annotations"] = {"phalanx.dev/metrics-format": "katib-stdout"}
    backend.create(parse_sweep(doc))
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Running")
    uid = jobs(backend)["lr-0"].metadata.uid or ""
    backend.logs[uid] = {"worker-0": "epoch 1 val_loss=0.5 accuracy=0.7\nval_loss = 0.25\n"}
    settle(ctl)
    result = sweep_now(backend).status.result(0)
    assert result is not None and (result.step, result.value) == (2, 0.25)


def test_a_sweep_failed_on_an_invalid_trial_stays_failed_and_stops_the_trials_it_made(backend: MemoryBackend) -> None:
    studies = FakeStudies(suggest=lambda n: {"lr": 0.5, "cpu": "1" if n == 0 else "lots"})
    doc_spec = copy.deepcopy(SWEEP["spec"])
    doc_spec["parameters"].append({"name": "cpu", "type": "categorical", "values": ["1", "lots"]})
    doc_spec["trial"]["spec"]["replicas"]["worker"]["template"]["resources"] = {"cpu": "${params.cpu}"}
    submit(backend, **{k: doc_spec[k] for k in ("parameters", "trial")})
    settle(controller(backend, studies))
    status = sweep_now(backend).status
    assert (status.phase, status.reason) == (SweepPhase.FAILED, "TrialInvalid")
    assert sorted(jobs(backend)) == ["lr-0"] and jobs(backend)["lr-0"].spec.run_policy.suspend is True
    set_phase(backend, "lr-0", "Halted")
    settle(controller(backend, studies))
    status = sweep_now(backend).status
    assert (status.phase, status.reason, status.trials.stopped) == (SweepPhase.FAILED, "TrialInvalid", 1)


def test_a_failing_study_is_named_in_the_status_and_the_other_sweeps_go_on(backend: MemoryBackend) -> None:
    class Broken(FakeStudies):
        def open(self, sweep: Sweep) -> FakeStudy:
            if sweep.metadata.name == "lr":
                raise RuntimeError("the study database is locked")
            return super().open(sweep)

    submit(backend)
    other = copy.deepcopy(SWEEP)
    other["metadata"]["name"] = "other"
    backend.create(parse_sweep(other))
    ctl = controller(backend, Broken())
    settle(ctl)
    status = sweep_now(backend).status
    assert (status.phase, status.reason) == (SweepPhase.PENDING, "SyncFailed")
    assert "the study database is locked" in status.message
    assert sorted(jobs(backend)) == ["other-0", "other-1"]


def test_the_trials_of_a_sweep_that_cannot_be_read_are_not_taken_for_orphans(studies: FakeStudies) -> None:
    class Quarantining(MemoryBackend):
        hidden = False

        def list(self, kind: Any, namespace: str | None = None, **selection: Any) -> Any:
            found = super().list(kind, namespace, **selection)
            return [o for o in found if not (self.hidden and kind is Sweep)]

        def get(self, kind: Any, namespace: str, name: str) -> Any:
            if self.hidden and kind is Sweep:
                raise OperationError(f"sweep {namespace}/{name} is stored but cannot be read; it is quarantined")
            return super().get(kind, namespace, name)

    backend = Quarantining()
    submit(backend)
    ctl = controller(backend, studies)
    settle(ctl)
    backend.hidden = True
    settle(ctl)
    assert sorted(jobs(backend)) == ["lr-0", "lr-1"]
    assert studies.deleted == []


def test_a_trial_job_that_cannot_be_read_is_not_taken_for_deleted(studies: FakeStudies) -> None:
    class Quarantining(MemoryBackend):
        hidden: set[str] = set()

        def list(self, kind: Any, namespace: str | None = None, **selection: Any) -> Any:
            return [o for o in super().list(kind, namespace, **selection) if o.metadata.name not in self.hidden]

        def get(self, kind: Any, namespace: str, name: str) -> Any:
            if name in self.hidden:
                raise OperationError(f"job {namespace}/{name} is stored but cannot be read; it is quarantined")
            return super().get(kind, namespace, name)

    backend = Quarantining()
    submit(backend, maxFailedTrials=0)
    ctl = controller(backend, studies)
    settle(ctl)
    backend.hidden = {"lr-0"}
    settle(ctl)
    backend.hidden = set()
    status = sweep_now(backend).status
    assert status.phase == SweepPhase.RUNNING and status.result(0).phase == TrialPhase.PENDING  # type: ignore[union-attr]


def test_the_backend_s_own_faults_end_the_pass_for_its_caller(backend: MemoryBackend, studies: FakeStudies) -> None:
    class StoreDownError(Exception):
        pass

    submit(backend)
    ctl = SweepController(backend, studies, VirtualClock(), passthrough=(StoreDownError,))

    def down(*_args: Any, **_kwargs: Any) -> Any:
        raise StoreDownError("database is locked")

    backend.write_status = down  # type: ignore[method-assign]
    with pytest.raises(StoreDownError):
        ctl.sync()


def test_the_next_log_read_of_a_running_trial_is_due_within_the_period(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    submit(backend)
    clock = VirtualClock()
    ctl = SweepController(backend, studies, clock, log_every_s=0.25)
    settle(ctl)
    assert ctl.due_in() is None  # nothing runs: nothing to read
    set_phase(backend, "lr-0", "Running")
    uid = jobs(backend)["lr-0"].metadata.uid or ""
    backend.logs[uid] = {"worker-0": "phalanx-metric step=1 val_loss=0.5\n"}
    settle(ctl)
    assert ctl.due_in() == 0.25
    clock.advance(0.1)
    backend.logs[uid]["worker-0"] += "phalanx-metric step=2 val_loss=0.4\n"
    assert ctl.sync() is False  # not due yet: the log is not read again
    assert ctl.due_in() == pytest.approx(0.15)
    clock.advance(0.15)
    assert ctl.sync() is True
    assert sweep_now(backend).status.result(0).step == 2  # type: ignore[union-attr]
    set_phase(backend, "lr-0", "Succeeded", val_loss=0.3)
    settle(ctl)
    assert ctl.due_in() is None


# -- reading trials' logs on from where they were read ---------------------------------------------------------------


def reads_of(backend: MemoryBackend, uid: str) -> list[tuple[int, int]]:
    """(offset, characters) of each read of the trial's first replica's log."""
    return [
        (start, size)
        for read_uid, replica, start, size in backend.log_reads
        if (read_uid, replica) == (uid, "worker-0")
    ]


def running_trial(backend: MemoryBackend, studies: FakeStudies) -> tuple[SweepController, str]:
    submit(backend)
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Running")
    return ctl, jobs(backend)["lr-0"].metadata.uid or ""


def test_a_running_trial_s_log_is_read_on_from_where_it_was_read_never_again_from_its_start(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    ctl, uid = running_trial(backend, studies)
    first = "noise\nphalanx-metric step=1 val_loss=0.9\n"
    backend.logs[uid] = {"worker-0": first}
    settle(ctl)
    second = "phalanx-metric step=2 val_loss=0.5\n"
    backend.logs[uid] = {"worker-0": first + second}
    settle(ctl)
    settle(ctl)  # nothing new: read from its end, nothing returned
    result = sweep_now(backend).status.result(0)
    assert result is not None and (result.step, result.value) == (2, 0.5)
    reads = reads_of(backend, uid)
    assert reads[0] == (0, len(first)) and (len(first), len(second)) in reads
    assert all(start >= len(first) + len(second) for start, _ in reads[reads.index((len(first), len(second))) + 1 :])
    assert sum(size for _, size in reads) == len(first + second), "no character is returned twice"


def test_a_line_being_written_waits_for_its_newline_and_is_whole_once_the_trial_ended(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    ctl, uid = running_trial(backend, studies)
    done = "phalanx-metric step=1 val_loss=0.9\n"
    backend.logs[uid] = {"worker-0": done + "phalanx-metric step=2 val_loss=0.1"}  # "0.1" may become "0.15"
    settle(ctl)
    result = sweep_now(backend).status.result(0)
    assert result is not None and (result.step, result.value) == (1, 0.9), "a half-written line is not read"
    backend.logs[uid] = {"worker-0": done + "phalanx-metric step=2 val_loss=0.15\nphalanx-metric step=3 val_loss=0.3"}
    settle(ctl)
    result = sweep_now(backend).status.result(0)
    assert result is not None and (result.step, result.value) == (2, 0.15)
    set_phase(backend, "lr-0", "Succeeded")  # its program ended without a last newline: that line is whole
    settle(ctl)
    study = studies.studies[sweep_now(backend).metadata.uid or ""]
    assert study.reports[0] == {1: 0.9, 2: 0.15, 3: 0.3} and study.states()[0] == ("complete", 0.3)


def test_a_trial_job_made_again_under_its_name_has_its_new_log_read_from_its_start(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    ctl, uid = running_trial(backend, studies)
    backend.logs[uid] = {"worker-0": "phalanx-metric step=1 val_loss=0.9\nphalanx-metric step=2 val_loss=0.8\n"}
    settle(ctl)
    key = ("TrainingJob", "default", "lr-0")  # the same trial, another incarnation (a new uid, a new log)
    backend.objects[key] = validated_copy(
        backend.objects[key], metadata=validated_copy(backend.objects[key].metadata, uid="uid-again")
    )
    backend.logs["uid-again"] = {"worker-0": "phalanx-metric step=1 val_loss=0.4\n"}
    settle(ctl)
    assert reads_of(backend, "uid-again")[0] == (0, len(backend.logs["uid-again"]["worker-0"]))
    assert (uid, "worker-0") not in ctl._logs, "the old incarnation's cursor is forgotten"
    result = sweep_now(backend).status.result(0)
    assert result is not None and (result.step, result.value) == (1, 0.4)


def test_a_restarted_controller_reads_each_log_once_from_its_start_and_then_on(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    ctl, uid = running_trial(backend, studies)
    first = "phalanx-metric step=1 val_loss=0.9\nphalanx-metric step=2 val_loss=0.8\n"
    backend.logs[uid] = {"worker-0": first}
    settle(ctl)
    backend.log_reads.clear()
    again = controller(backend, studies)  # nothing in memory: the cursor is gone
    settle(again)
    more = "phalanx-metric step=3 val_loss=0.7\n"
    backend.logs[uid] = {"worker-0": first + more}
    settle(again)
    reads = [read for read in reads_of(backend, uid) if read[1]]
    assert reads == [(0, len(first)), (len(first), len(more))]
    result = sweep_now(backend).status.result(0)
    assert result is not None and (result.step, result.value) == (3, 0.7)


def test_a_katib_sweep_numbers_its_reports_on_across_reads(backend: MemoryBackend, studies: FakeStudies) -> None:
    doc = copy.deepcopy(SWEEP)
    doc["metadata"]["annotations"] |= {METRICS_FORMAT_ANNOTATION: KATIB_STDOUT}
    backend.create(parse_sweep(doc))
    ctl = controller(backend, studies)
    settle(ctl)
    set_phase(backend, "lr-0", "Running")
    uid = jobs(backend)["lr-0"].metadata.uid or ""
    backend.logs[uid] = {"worker-0": "val_loss=0.5\nval_loss=0.4\n"}
    settle(ctl)
    backend.logs[uid] = {"worker-0": "val_loss=0.5\nval_loss=0.4\nval_loss=0.3\n"}
    settle(ctl)
    result = sweep_now(backend).status.result(0)
    assert result is not None and (result.step, result.value) == (3, 0.3)


def test_last_step_stays_when_the_final_value_comes_from_metrics_json(
    backend: MemoryBackend, studies: FakeStudies
) -> None:
    """LAST-STEP is the last step that reported the objective, also when metrics.json gave the final value."""
    submit(backend)
    clock = VirtualClock()
    ctl = SweepController(backend, studies, clock, log_every_s=0.25)
    settle(ctl)
    set_phase(backend, "lr-0", "Running")
    uid = jobs(backend)["lr-0"].metadata.uid or ""
    backend.logs[uid] = {"worker-0": "phalanx-metric step=1 val_loss=0.5\nphalanx-metric step=3 val_loss=0.4\n"}
    clock.advance(0.25)
    settle(ctl)
    set_phase(backend, "lr-0", "Succeeded", val_loss=0.35)
    settle(ctl)
    result = sweep_now(backend).status.result(0)
    assert result is not None
    assert (result.value, result.step) == (0.35, 3)
