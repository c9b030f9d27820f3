"""The sweep controller both backends run: one level-triggered pass over every Sweep, written once over the port.

Each pass reads every Sweep and its trial jobs (``core.sweeps.trials``: labelled with the sweep's name, marked
with its uid), observes each trial (phase from its job, final metrics from ``status.metrics``, the objective's
intermediate values from the ``phalanx-metric`` lines of the first replica of the job's first role, read
through ``ObjectReader.read_log``; and Katib's ``name=value`` lines for a Sweep converted from a Katib
Experiment), asks ``core.sweeps.plan.plan_sweep`` what to do with the study's asked suggestions, and does it:

1. ask the study for new suggestions (persisted there before any job exists), and plan again with them;
2. tell the study each finished trial (complete, fail, pruned; telling twice does nothing) and abandon the
   suggestions that will never run;
3. stop trials: one write marks the job ``phalanx.dev/trial-stopped`` (the reason) and halts it
   (``spec.runPolicy.suspend``), so its replicas end and give back their resources; it ends Halted, observed
   as Stopped (``core.sweeps.trials``);
4. create trial jobs (``core.sweeps.trials.trial_job_document``, validated as any job), named ``<sweep>-<N>``;
5. write the status (phase, counts, best trial, a result per trial) and the Events that say what happened.

Nothing is remembered between passes that a restart would need: the jobs, the study and the sweep's status
hold it all. A crash between asking and creating finds the suggestion in ``asked`` and creates it then; between
creating and writing the status, the job is found by its name; a told trial is told again harmlessly. So a
sweep killed at any point ends with exactly its trials, each run once. Only the intermediate values read from
logs are cached (per job uid and replica, finished trials' for good), with where the log was read to (a
``LogCursor``), and a restart reads them again from the log's start. A running trial's log is read every
``log_every_s``, only what it gained since (complete lines: a line being written waits for its newline, but is
taken whole once the trial ended); ``due_in`` says when next, for a runtime that sleeps until something changes.
The pass lists only the trial jobs (``phalanx.dev/sweep`` label selected by the backend), not every job.

The status's ``results`` are also the sweep's record of trials whose job is gone (deleted by hand, or by
``ttlSecondsAfterFinished``): such a trial keeps counting with its last phase (an active one becomes Failed:
its job was deleted), so that the budget is never spent twice.

A deleted Sweep's study is dropped, and the trial jobs it leaves (marked with a uid no Sweep has) are deleted,
as owner references would on a cluster. The study of a sweep deleted while no controller ran stays in the study
store (it is small, and named by the sweep's uid).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from phalanx.core.clock import Clock
from phalanx.core.sweeps.metrics import (
    KATIB_DEFAULT_FORMAT,
    missing_objective,
    objective_value,
    parse_intermediate,
    parse_katib,
)
from phalanx.core.sweeps.plan import (
    ACTIVE,
    FinishSweep,
    StopTrial,
    SweepPlan,
    TrialObservation,
    plan_sweep,
    trial_result_phase,
)
from phalanx.core.sweeps.substitute import SWEEP_LABEL
from phalanx.core.sweeps.trials import (
    STOPPED_ANNOTATION,
    SWEEP_UID_ANNOTATION,
    first_replica,
    kept_results,
    stop_reason,
    trial_job_document,
    trial_parameters,
    trial_phase,
    trials_of,
)
from phalanx.model.base import validated_copy
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.katib import KATIB_STDOUT, METRICS_FILTER_ANNOTATION, METRICS_FORMAT_ANNOTATION
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.sweeps import MAX_RESULTS, ParamValue, Sweep, SweepPhase, TrialPhase, TrialResult, trial_name
from phalanx.model.validation import validate_job
from phalanx.services.port import (
    AlreadyExistsError,
    ConflictError,
    LogCursor,
    NotFoundError,
    ObjectReader,
    ObjectWriter,
    StatusWriter,
    Written,
)
from phalanx.services.sweeps.study import StudyStore, StudyUnavailableError, SweepStudy

log = logging.getLogger(__name__)

FINISHED = frozenset({TrialPhase.SUCCEEDED, TrialPhase.FAILED, TrialPhase.STOPPED})
DONE = frozenset({SweepPhase.SUCCEEDED, SweepPhase.FAILED})


def katib_formats(sweep: Sweep) -> list[str] | None:
    """The Katib StdOut expressions the sweep's trials print in (a converted Experiment), else None."""
    annotations = sweep.metadata.annotations
    if annotations.get(METRICS_FORMAT_ANNOTATION) != KATIB_STDOUT:
        return None
    try:
        formats = json.loads(annotations.get(METRICS_FILTER_ANNOTATION, "[]"))
    except json.JSONDecodeError:
        formats = []
    return [str(f) for f in formats] if isinstance(formats, list) and formats else [KATIB_DEFAULT_FORMAT]


def _still_finished(
    sweep: Sweep, plan: SweepPlan, trials: Mapping[int, TrialObservation], asked: Mapping[int, object]
) -> SweepPlan:
    """A finished sweep stays finished as recorded: its remaining trials stopped, nothing asked or created.

    The plan alone would not always see the end again (a TrialInvalid failure is not the plan's to see).
    """
    status = sweep.status
    finish = FinishSweep(SweepPhase(status.phase), status.reason, status.message)
    active = sorted(number for number, trial in trials.items() if trial.phase in ACTIVE)
    stop = [
        StopTrial(n, trial_name(sweep.metadata.name, n), f"trial {n} stopped: the sweep ended ({status.message})")
        for n in active
    ]
    pending = sorted(number for number in asked if number not in trials)
    return replace(plan, phase=finish.phase, create=[], ask=0, abandon=pending, stop=stop, finish=finish)


class SweepPort(ObjectReader, ObjectWriter, StatusWriter, Protocol):
    """What the sweep controller uses of a backend: the object port, the status side and a job's deletion."""

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a job and its replicas, in the backend's way."""
        ...


@dataclass
class _Intermediate:
    """The objective's values by step read from one replica's log so far; ``final`` once read after it ended.

    ``cursor`` is where the log was read to; ``katib`` counts each metric's Katib reports in this log (the steps).
    """

    values: dict[int, float] = field(default_factory=dict)
    read_at: float | None = None
    final: bool = False
    cursor: LogCursor | None = None
    katib: dict[str, int] = field(default_factory=dict)


class SweepController:
    """Runs every Sweep's trials through the port, with each sweep's study from ``studies``.

    Args:
        backend: the port.
        studies: where the sweeps' studies live.
        clock: for the log-reading period and the status's times.
        inherited_annotations: annotations a trial job takes from its sweep when the sweep has them (the
            embedded runtime: the directory a submission's relative paths start from).
        log_every_s: how often a running trial's log is read again (a finished trial's is read once).
        passthrough: errors that are the backend's, not the sweep's (the store cannot be used for now): they end
            the pass for its caller to wait on, where any other error is said in the failing sweep's status.
    """

    def __init__(
        self,
        backend: SweepPort,
        studies: StudyStore,
        clock: Clock,
        *,
        inherited_annotations: frozenset[str] = frozenset(),
        log_every_s: float = 1.0,
        passthrough: tuple[type[Exception], ...] = (),
    ) -> None:
        self.backend = backend
        self.studies = studies
        self.clock = clock
        self.inherited = inherited_annotations
        self.log_every_s = log_every_s
        self.passthrough = passthrough
        self._studies: dict[str, tuple[Sweep, SweepStudy]] = {}  # by sweep uid
        self._logs: dict[tuple[str, str], _Intermediate] = {}  # by job uid and replica
        self._failing: dict[str, str] = {}  # sweep uid -> the error last logged for it
        self._seen_sweeps = False
        self._blocked: set[tuple[str, str]] = set()  # (sweep uid, job key) waiting for a namesake's job to go

    # -- the pass ------------------------------------------------------------------------------------------------

    def sync(self) -> bool:
        """One pass over every Sweep; whether anything was written."""
        sweeps = self.backend.list(Sweep)
        if not sweeps and not self._seen_sweeps and not self._studies:
            return False  # nothing to do, and no job to read: a runtime without sweeps pays one list
        self._seen_sweeps = bool(sweeps)
        jobs = self.backend.list(TrainingJob, labels={SWEEP_LABEL: None})
        changed = False
        for sweep in sweeps:
            uid = sweep.metadata.uid or ""
            try:
                changed |= self._sync_sweep(sweep, jobs)
            except StudyUnavailableError as error:
                changed |= self._wait_for_study(sweep, str(error))
            except self.passthrough:
                raise
            except Exception as error:  # one sweep's failure must not stop the others, nor the control plane
                if self._failing.get(uid) != repr(error):
                    log.exception("sweep %s: a pass failed; retrying on every pass", sweep.key)
                    self._failing[uid] = repr(error)
                    changed |= self._say_failing(sweep, error)
            else:
                self._failing.pop(uid, None)
        changed |= self._collect_orphans(sweeps, jobs)
        self._forget(sweeps, jobs)
        return changed

    def due_in(self) -> float | None:
        """Seconds until a running trial's log is due to be read again (None: no trial runs).

        A runtime that sleeps until something changes wakes by then: a trial's metric lines change nothing it
        watches, and early stopping should not wait for an unrelated wake-up.
        """
        now = self.clock.monotonic()
        due = [
            max(0.0, self.log_every_s - (now - cached.read_at))
            for cached in self._logs.values()
            if not cached.final and cached.read_at is not None
        ]
        return min(due) if due else None

    def _sync_sweep(self, sweep: Sweep, jobs: Sequence[TrainingJob]) -> bool:
        mine = trials_of(sweep, jobs)
        status = sweep.status
        if SweepPhase(status.phase) in DONE and all(
            (phase := trial_phase(job)) in FINISHED
            and (result := status.result(number)) is not None
            and result.phase == phase
            for number, job in mine.items()
        ):
            return False  # finished, and every trial ended and recorded (so told): nothing to read, ask or tell
        study = self._study(sweep)
        told = study.told()
        trials = self._observe(sweep, mine, told)
        asked = study.asked()
        plan = plan_sweep(sweep, list(trials.values()), asked, exhausted=study.exhausted())
        if SweepPhase(status.phase) in DONE:
            plan = _still_finished(sweep, plan, trials, asked)
        elif plan.ask:
            study.ask(plan.ask)
            plan = plan_sweep(sweep, list(trials.values()), study.asked(), exhausted=study.exhausted())
        changed = self._tell(sweep, study, trials, told, plan)
        for stop in plan.stop:
            changed |= self._stop(sweep, mine.get(stop.number), stop.reason)
        for create in plan.create:
            problem = self._create(sweep, create.number, create.parameters, create.reason)
            if problem is not None:
                study.tell(create.number, "fail", None)
                return self._write_status(sweep, mine, trials, plan, invalid=problem) or True
            changed = True
        return self._write_status(sweep, mine, trials, plan) or changed

    # -- observing -----------------------------------------------------------------------------------------------

    def _observe(self, sweep: Sweep, mine: Mapping[int, TrainingJob], told: set[int]) -> dict[int, TrialObservation]:
        """Every trial of the sweep: from its job; else from the status's record; else (told) as stopped."""
        metric = sweep.spec.objective.metric
        katib = katib_formats(sweep)
        recorded = {result.number: result for result in sweep.status.results}
        trials: dict[int, TrialObservation] = {}
        for number, job in mine.items():
            record = recorded.get(number)
            parameters = trial_parameters(job)
            if parameters is None:
                parameters = dict(record.parameters) if record is not None else {}
            phase = trial_phase(job)
            intermediate = self._intermediate(job, phase, metric, katib)
            if not intermediate and record is not None and record.step is not None and record.value is not None:
                intermediate = {record.step: record.value}  # its log is gone: what the sweep saw last
            trials[number] = TrialObservation(number, phase, parameters, dict(job.status.metrics), intermediate)
        for number, record in recorded.items():
            if number in trials:
                continue
            # Its job is gone: what the record says, and an active trial did not finish (its job was deleted),
            # unless its job is there but cannot be read (quarantined): it is then as it was last seen.
            phase = TrialPhase(record.phase)
            if phase in ACTIVE and not self._unreadable(sweep.metadata.namespace, record.name):
                phase = TrialPhase.FAILED
            final: dict[str, float] = {}
            values: dict[int, float] = {}
            if record.value is not None and record.step is None:
                final[metric] = record.value
            elif record.value is not None and record.step is not None:
                values[record.step] = record.value
            trials[number] = TrialObservation(number, phase, dict(record.parameters), final, values)
        if len(recorded) >= MAX_RESULTS:
            # Records were dropped (past MAX_RESULTS): a told trial with neither job nor record is one of them,
            # counted, never a candidate, never a failure. (Short of that bound, such a number is a suggestion
            # abandoned without a job.)
            for number in told - trials.keys():
                trials[number] = TrialObservation(number, TrialPhase.STOPPED, {})
        return trials

    def _unreadable(self, namespace: str, name: str) -> bool:
        """Whether the job is stored but cannot be read (left out of the list, but not gone)."""
        try:
            self.backend.get(TrainingJob, namespace, name)
        except Exception:
            return True
        return False

    def _intermediate(
        self, job: TrainingJob, phase: TrialPhase, metric: str, katib: list[str] | None
    ) -> dict[int, float]:
        """The objective's values by step from the job's log, read at most every ``log_every_s`` (once when done)."""
        replica = first_replica(job)
        cached = self._logs.setdefault((job.metadata.uid or "", replica), _Intermediate())
        if cached.final or phase == TrialPhase.PENDING:
            return dict(cached.values)
        now = self.clock.monotonic()
        if phase not in FINISHED and cached.read_at is not None and now - cached.read_at < self.log_every_s:
            return dict(cached.values)
        ended = phase in FINISHED
        chunk = self.backend.read_log(job, replica, cached.cursor)
        if chunk is not None:
            lines = chunk.text.splitlines()
            if ended and chunk.partial:
                lines.append(chunk.partial)  # its replica ended: a last line without a newline is whole
            if katib is not None:
                if cached.cursor is not None and chunk.cursor.source != cached.cursor.source:
                    # Another attempt's log: Katib numbers its reports from the log's start, so start over.
                    cached.values, cached.katib = {}, {}
                cached.values.update(parse_katib(lines, katib, cached.katib).of(metric))
            # Merged, not replaced: steps read before stay known.
            cached.values.update(parse_intermediate(lines).of(metric))
            cached.cursor = chunk.cursor
        cached.read_at, cached.final = now, ended
        return dict(cached.values)

    # -- acting --------------------------------------------------------------------------------------------------

    def _study(self, sweep: Sweep) -> SweepStudy:
        uid = sweep.metadata.uid or ""
        if uid not in self._studies:
            self._studies[uid] = (sweep, self.studies.open(sweep))
        return self._studies[uid][1]

    def _tell(
        self,
        sweep: Sweep,
        study: SweepStudy,
        trials: Mapping[int, TrialObservation],
        told: set[int],
        plan: SweepPlan,
    ) -> bool:
        """Tell the study every finished trial not told yet, and abandon the suggestions that will never run."""
        metric = sweep.spec.objective.metric
        changed = False
        for number, trial in sorted(trials.items()):
            if number in told or trial.phase not in FINISHED:
                continue
            value = objective_value(metric, trial.final, trial.intermediate)
            if trial.intermediate:
                study.report(number, trial.intermediate)
            name = trial_name(sweep.metadata.name, number)
            if trial.phase == TrialPhase.SUCCEEDED and value is not None:
                study.tell(number, "complete", value)
                self.backend.record(sweep, "TrialSucceeded", f"trial {name}: {metric}={value:.6g}")
            elif trial.phase == TrialPhase.STOPPED:
                study.tell(number, "pruned", value)
            else:
                study.tell(number, "fail", None)
                succeeded = trial.phase == TrialPhase.SUCCEEDED
                why = missing_objective(metric, trial.final) if succeeded else "its job failed"
                self.backend.record(sweep, "TrialFailed", f"trial {name} failed: {why}", warning=True)
            changed = True
        for number in plan.abandon:
            study.tell(number, "fail", None)
            changed = True
        return changed

    def _stop(self, sweep: Sweep, job: TrainingJob | None, reason: str) -> bool:
        """Mark the trial's job stopped and halt it, in one write; nothing when it is so already."""
        if job is None or (stop_reason(job) is not None and job.spec.run_policy.suspend):
            return False
        annotations = {**job.metadata.annotations, STOPPED_ANNOTATION: stop_reason(job) or reason}
        spec = validated_copy(job.spec, run_policy=validated_copy(job.spec.run_policy, suspend=True))
        stopped = validated_copy(job, metadata=validated_copy(job.metadata, annotations=annotations), spec=spec)
        try:
            self.backend.replace(stopped)
        except (ConflictError, NotFoundError):
            return True  # changed or gone meanwhile: the next pass looks again
        self.backend.record(sweep, "TrialStopped", reason)
        log.info("sweep %s: %s", sweep.key, reason)
        return True

    def _create(self, sweep: Sweep, number: int, parameters: Mapping[str, ParamValue], reason: str) -> str | None:
        """Create trial ``number``'s job; a sentence when its document is no valid job (the sweep then fails)."""
        inherited = {k: v for k, v in sweep.metadata.annotations.items() if k in self.inherited}
        document = trial_job_document(sweep, number, parameters, inherited)
        jobtypes = dict(builtin_jobtypes())  # as the door reads them: the built-ins even before they are stored
        jobtypes.update({jobtype.metadata.name: jobtype for jobtype in self.backend.list(JobType)})
        try:
            job = validate_job(document, jobtypes)
        except SpecError as error:
            first = error.errors[0]
            return (
                f"trial {trial_name(sweep.metadata.name, number)} is no valid job with {dict(parameters)}: "
                f"spec.trial.{first.path}: {first.message}"
            )
        try:
            self.backend.create(job)
        except AlreadyExistsError:
            # Ours (created before a crash, found by the next pass) or a namesake sweep's, being deleted: wait.
            existing = self.backend.get(TrainingJob, job.metadata.namespace, job.metadata.name)
            blocked = (sweep.metadata.uid or "", job.key)
            namesake = existing is not None and existing.metadata.annotations.get(SWEEP_UID_ANNOTATION) != blocked[0]
            if namesake and blocked not in self._blocked:  # said once: passes come back to it until the name is free
                self._blocked.add(blocked)
                log.info("sweep %s: waiting for job %s of an earlier sweep to go", sweep.key, job.key)
            return None
        self.backend.record(sweep, "TrialCreated", reason)
        log.info("sweep %s: %s", sweep.key, reason)
        return None

    def _write_status(
        self,
        sweep: Sweep,
        mine: Mapping[int, TrainingJob],
        trials: Mapping[int, TrialObservation],
        plan: SweepPlan,
        *,
        invalid: str | None = None,
    ) -> bool:
        """The status from the plan (and an Event when the sweep ends); whether it was written."""
        metric = sweep.spec.objective.metric
        results = []
        for number, trial in trials.items():
            job = mine.get(number)
            previous = sweep.status.result(number)
            value = objective_value(metric, trial.final, trial.intermediate)
            step = max(trial.intermediate) if trial.intermediate else None  # also when metrics.json has the value
            reason = previous.reason if previous is not None and job is None else ""
            if job is not None and trial.phase == TrialPhase.STOPPED:
                reason = stop_reason(job) or ""
            elif job is not None and trial.phase == TrialPhase.FAILED:
                reason = job.status.message or job.status.reason
            elif job is not None and trial.phase == TrialPhase.SUCCEEDED and value is None:
                reason = missing_objective(metric, trial.final)
            elif job is None and previous is not None and previous.phase in ACTIVE and trial.phase == TrialPhase.FAILED:
                reason = "its job was deleted before it finished"
            name = trial_name(sweep.metadata.name, number)
            results.append(
                TrialResult(
                    number=number,
                    name=name,
                    phase=trial_result_phase(TrialPhase(trial.phase), value),
                    parameters=dict(trial.parameters),
                    value=value,
                    step=step,
                    reason=reason,
                )
            )
        phase, reason, message = plan.phase, "", ""
        if invalid is not None:
            phase, reason, message = SweepPhase.FAILED, "TrialInvalid", invalid
        elif plan.finish is not None:
            phase, reason, message = plan.finish.phase, plan.finish.reason, plan.finish.message
        elif plan.counts.created:
            message = f"{plan.counts.running} running, {plan.counts.created} of {sweep.spec.max_trials} trials created"
        now = self.clock.now()
        changes = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "trials": plan.counts,
            "best_trial": plan.best,
            "results": kept_results(results, sweep.spec.objective.direction),
            "start_time": sweep.status.start_time or (now if phase != SweepPhase.PENDING else None),
            "completion_time": sweep.status.completion_time or (now if phase in DONE else None),
        }
        written = self.backend.write_status(sweep, changes)
        if written is Written.WROTE and phase in DONE and SweepPhase(sweep.status.phase) not in DONE:
            event = "SweepSucceeded" if phase == SweepPhase.SUCCEEDED else "SweepFailed"
            self.backend.record(sweep, event, f"{reason}: {message}", warning=phase == SweepPhase.FAILED)
            log.info("sweep %s %s: %s", sweep.key, phase.value.lower(), message)
        return written is Written.WROTE

    def _wait_for_study(self, sweep: Sweep, why: str) -> bool:
        """The study cannot be opened here: the sweep waits, its status saying why."""
        changes = {"phase": SweepPhase.PENDING, "reason": "StudyUnavailable", "message": why}
        written = self.backend.write_status(sweep, changes)
        if written is Written.WROTE:
            self.backend.record(sweep, "StudyUnavailable", why, warning=True)
        return written is Written.WROTE

    def _say_failing(self, sweep: Sweep, error: Exception) -> bool:
        """Put why the passes fail on the sweep in its status message (its phase stays), once per error."""
        message = f"the sweep controller cannot go on with this sweep, and retries on every pass: {error}"
        try:
            return self.backend.write_status(sweep, {"reason": "SyncFailed", "message": message}) is Written.WROTE
        except Exception:  # the store itself may be what fails: the log has said it
            log.debug("sweep %s: could not say why in its status", sweep.key, exc_info=True)
            return False

    # -- what deleted sweeps leave -------------------------------------------------------------------------------

    def _collect_orphans(self, sweeps: Sequence[Sweep], jobs: Sequence[TrainingJob]) -> bool:
        """Delete trial jobs whose sweep is gone (its uid names no Sweep): a namesake may need their names."""
        live = {sweep.metadata.uid for sweep in sweeps}
        changed = False
        for job in jobs:
            owner = job.metadata.annotations.get(SWEEP_UID_ANNOTATION)
            if owner is None or owner in live or job.metadata.deletion_timestamp is not None:
                continue
            if self._still_there(job.metadata.namespace, job.metadata.labels[SWEEP_LABEL], owner):
                continue
            try:
                self.backend.delete_job(job.metadata.namespace, job.metadata.name)
            except NotFoundError:
                continue
            log.info("deleted trial job %s: its sweep was deleted", job.key)
            changed = True
        return changed

    def _still_there(self, namespace: str, name: str, uid: str) -> bool:
        """Whether the sweep of ``uid`` exists after all.

        One that cannot be read (quarantined) is left out of the list but is not gone: its trials and study stay.
        """
        try:
            current = self.backend.get(Sweep, namespace, name)
        except Exception:
            return True
        return current is not None and current.metadata.uid == uid

    def _forget(self, sweeps: Sequence[Sweep], jobs: Sequence[TrainingJob]) -> None:
        """Drop the studies of deleted sweeps, and the cached logs of jobs that are gone."""
        live = {sweep.metadata.uid or "" for sweep in sweeps}
        for uid in [uid for uid in self._studies if uid not in live]:
            sweep, _study = self._studies[uid]
            if self._still_there(sweep.metadata.namespace, sweep.metadata.name, uid):
                continue
            del self._studies[uid]
            self.studies.delete(sweep)
            log.info("sweep %s was deleted; dropped its study", sweep.key)
        job_uids = {job.metadata.uid or "" for job in jobs}
        for key in [key for key in self._logs if key[0] not in job_uids]:
            del self._logs[key]
