"""The pipeline controller both backends run: one level-triggered pass over every PipelineRun, over the port.

A pass, for each run not finished: read its pipeline (``pipelineRef``: the stored Pipeline; or its inline
``pipelineSpec``) and bind its arguments; **observe** the objects its step instances created (TrainingJobs and
Sweeps labelled ``phalanx.dev/pipelinerun=<run>`` with the run's uid, ``phalanx.dev/step``, ``phalanx.dev/item``,
``phalanx.dev/attempt``) into the run's status: a job found for an attempt the status does not know yet (a crash
between creating it and writing the status) is adopted as Running; a finished one has its outputs collected
(``collect``), its cache entry written (``ArtifactStore.cache_put``, only once every output is complete) and
its instance marked Succeeded or Failed; then **plan** (``core.pipelines.plan.plan_run``, on the status just
observed and the store's cache index) and **act**:

- ``FanOut``/``FanIn``/``SkipStep``/``FailStep``/``FinishRun``: recorded in the status;
- ``UseCache``: the cached artifacts are copied into the instance's folder and the instance is Succeeded from
  the cache (``cacheHit``); no job, no process (a cached artifact that is gone drops the entry: the step runs);
- ``StartStep``/``RetryStep``: the instance's job (or Sweep) is built (``launch``) and created; a step that
  cannot start with its arguments fails at once, without a retry.

The status is written once per pass, on the resourceVersion read; Events (StepStarted, StepCached,
StepSkipped, StepRetried, StepSucceeded, StepFailed, FannedOut, FannedIn, RunSucceeded, RunFailed) follow a
write that succeeded. A write that was lost is redone by the next pass from what is observed then.

Idempotent across crashes: object names are deterministic (``steps.step_object_name``), so an instance whose job
exists is never started again (creating it again finds it and adopts it); outputs collected twice give the
same values and digests; the cache index is written whole. A job of an earlier run of the same name (another
uid) is never taken for this run's.

A run reads its stored Pipeline on every pass and records what each step runs (``status.componentDigests``)
when it starts. A Pipeline submitted again with steps that run something else (or steps added or removed) while
a run of it is not finished fails that run, naming the steps: its instances and cache keys were made for the
old steps. Editing ``retries``, ``cache`` or a condition changes no digest and the run goes on under the new spec.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx.adapters.artifacts import ArtifactStore, ArtifactStoreError
from phalanx.core.clock import Clock
from phalanx.core.pipelines.cache import step_definition_digest
from phalanx.core.pipelines.components import component_interface
from phalanx.core.pipelines.dag import PipelineGraph, StepInterface, check_pipeline
from phalanx.core.pipelines.parameters import bind_parameters
from phalanx.core.pipelines.plan import (
    Action,
    FailStep,
    FanIn,
    FanOut,
    FinishRun,
    OutputValue,
    RetryStep,
    SkipStep,
    StartStep,
    UseCache,
    instance_name,
    observation,
    plan_run,
)
from phalanx.core.pipelines.step_files import StepFiles
from phalanx.core.pipelines.steps import ATTEMPT_LABEL, ITEM_LABEL, RUN_LABEL, RUN_UID_LABEL, STEP_LABEL
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.kfp_component import ComponentSpec, component_digest, parse_component
from phalanx.model.pipelines import (
    Pipeline,
    PipelineRun,
    PipelineSpec,
    RunPhase,
    Step,
    StepPhase,
    StepStatus,
)
from phalanx.model.sweeps import Sweep, SweepPhase
from phalanx.services.pipelines.collect import CollectError, job_outputs, sweep_outputs
from phalanx.services.pipelines.launch import Instance, LaunchError, build_object
from phalanx.services.port import AlreadyExistsError, ObjectReader, ObjectWriter, StatusWriter, Written

log = logging.getLogger(__name__)

_FINISHED = (RunPhase.SUCCEEDED, RunPhase.FAILED)


class PipelineBackend(ObjectReader, ObjectWriter, StatusWriter, Protocol):
    """What the controller needs of a backend: the object port, the status side, and how steps see the store."""

    step_files: StepFiles
    """How a step job's replicas reach the artifact store's files (``core.pipelines.step_files``): on the
    controller's own file system (embedded), or through a PersistentVolumeClaim (Kubernetes), or not at all."""


@dataclass
class _Pipeline:
    """A run's pipeline, ready to plan: its graph, components, digests and bound parameters."""

    spec: PipelineSpec
    graph: PipelineGraph
    components: dict[str, ComponentSpec]
    digests: dict[str, str]
    parameters: dict[str, str]

    def step(self, name: str) -> Step:
        found = self.spec.step(name)
        assert found is not None
        return found


@dataclass
class _Pass:
    """What one pass decided for one run: the status being built, and the Events to record once it is written."""

    run: PipelineRun
    instances: dict[tuple[str, int | None], StepStatus]
    fanouts: dict[str, list[Any]]
    joined: list[str]
    phase: RunPhase
    message: str | None
    events: list[tuple[str, str, bool]] = field(default_factory=list)

    def say(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((reason, message, warning))


class PipelineController:
    """Runs every PipelineRun of a backend, one level-triggered pass at a time."""

    def __init__(
        self,
        backend: PipelineBackend,
        artifacts: ArtifactStore,
        clock: Clock,
        *,
        passthrough: tuple[type[Exception], ...] = (),
    ) -> None:
        """A controller over ``backend`` and ``artifacts``.

        Args:
            backend: the port (objects and statuses).
            artifacts: where steps read and write their artifacts, and the step cache.
            clock: the time steps start and end at.
            passthrough: the backend's own faults (a store that cannot be used for now): they end the pass for
                its caller to back off, where any other error of one run is logged and the other runs go on.
        """
        self.backend = backend
        self.artifacts = artifacts
        self.clock = clock
        self.passthrough = passthrough
        self._failed: dict[str, str] = {}

    def sync(self) -> bool:
        """One pass over every PipelineRun; whether anything changed."""
        changed = False
        for run in self.backend.list(PipelineRun):
            if run.status.phase in _FINISHED:
                continue
            try:
                changed |= self._sync_run(run)
            except self.passthrough:
                raise
            except (OSError, ArtifactStoreError) as err:
                # The artifact store failed us (a full disk, an unreachable bucket): say so; the next pass retries.
                log.warning("pipelinerun %s/%s: %s", run.metadata.namespace, run.metadata.name, err)
                message = f"the artifact store failed: {err}; retrying"
                changed |= self.backend.write_status(run, {"message": message}) is Written.WROTE
            except Exception as err:
                # One run a pass fails on must not stop the others, nor the passes of the job controller after
                # this one: logged once per distinct error, retried every pass.
                if self._failed.get(run.metadata.uid or "") != repr(err):
                    log.exception("pipelinerun %s/%s: a pass failed", run.metadata.namespace, run.metadata.name)
                    self._failed[run.metadata.uid or ""] = repr(err)
            else:
                self._failed.pop(run.metadata.uid or "", None)
        return changed

    # -- one run -----------------------------------------------------------------------------------------------

    def _sync_run(self, run: PipelineRun) -> bool:
        pipeline, problem = self._pipeline(run)
        if pipeline is None:
            assert problem is not None
            return self._refuse(run, problem)
        changed = _changed_steps(run.status.component_digests, pipeline.digests)
        if changed:
            return self._fail_changed(run, changed)
        work = _Pass(
            run=run,
            instances={(entry.step, entry.item): entry for entry in run.status.instances},
            fanouts={name: list(items) for name, items in run.status.fanouts.items()},
            joined=list(run.status.joined),
            phase=run.status.phase,
            message=run.status.message,
        )
        self._observe(work, pipeline)
        status = run.status.model_copy(update=self._changes(work, pipeline))
        plan = plan_run(
            pipeline.graph,
            pipeline.parameters,
            observation(status),
            component_digests=pipeline.digests,
            cache=self.artifacts.cache_view(),
            namespace=run.metadata.namespace,
        )
        for action in plan.actions:
            self._act(work, pipeline, action)
        if plan.actions and work.phase == RunPhase.PENDING:
            work.phase = RunPhase.RUNNING
        written = self.backend.write_status(run, self._changes(work, pipeline))
        if written is Written.WROTE:
            for reason, message, warning in work.events:
                self.backend.record(run, reason, message, warning=warning)
        return written is not Written.UNCHANGED

    def _pipeline(self, run: PipelineRun) -> tuple[_Pipeline | None, str | None]:
        spec = run.spec.pipeline_spec
        if spec is None:
            assert run.spec.pipeline_ref is not None
            stored = self.backend.get(Pipeline, run.metadata.namespace, run.spec.pipeline_ref.name)
            if stored is None:
                return None, (
                    f"spec.pipelineRef.name: pipeline {run.spec.pipeline_ref.name} is not stored in namespace "
                    f"{run.metadata.namespace}; submit it"
                )
            spec = stored.spec
        components: dict[str, ComponentSpec] = {}
        interfaces: dict[str, StepInterface] = {}
        digests: dict[str, str] = {}
        try:
            for position, step in enumerate(spec.steps):
                if step.component is not None:
                    if step.component.inline is None:
                        return None, f"spec.steps[{position}].component: the component is not stored inline"
                    component = parse_component(step.component.inline, prefix=["steps", position, "component"])
                    components[step.name] = component
                    interfaces[step.name] = component_interface(component)
                    digests[step.name] = component_digest(component)
                else:
                    digests[step.name] = step_definition_digest(step)
            graph = check_pipeline(spec, interfaces)
            parameters = bind_parameters(spec, run.spec.arguments)
        except SpecError as err:
            return None, "; ".join(f"{item.path}: {item.message}" for item in err.errors)
        return _Pipeline(spec, graph, components, digests, parameters), None

    def _fail_changed(self, run: PipelineRun, changed: list[str]) -> bool:
        """The stored Pipeline changed under a started run: what it already ran no longer matches, so it fails."""
        assert run.spec.pipeline_ref is not None
        message = (
            f"the run failed: pipeline {run.spec.pipeline_ref.name} changed while it ran (steps "
            f"{', '.join(changed)} differ from what it started with); start a new run of it"
        )
        written = self.backend.write_status(run, {"phase": RunPhase.FAILED, "message": message})
        if written is Written.WROTE:
            self.backend.record(run, "RunFailed", message, warning=True)
        return written is not Written.UNCHANGED

    def _refuse(self, run: PipelineRun, problem: str) -> bool:
        """The run cannot be planned: it waits (a missing Pipeline may still come) with the reason as message."""
        if run.status.message == problem:
            return False
        return self.backend.write_status(run, {"message": problem}) is not Written.UNCHANGED

    def _changes(self, work: _Pass, pipeline: _Pipeline) -> dict[str, Any]:
        order = {name: position for position, name in enumerate(pipeline.graph.order)}
        instances = sorted(
            work.instances.values(), key=lambda e: (order.get(e.step, len(order)), -1 if e.item is None else e.item)
        )
        return {
            "phase": work.phase,
            "instances": instances,
            "fanouts": work.fanouts,
            "joined": work.joined,
            "component_digests": pipeline.digests,
            "message": work.message,
        }

    # -- observing what the steps created ----------------------------------------------------------------------

    def _owned(self, run: PipelineRun) -> dict[tuple[str, int | None], TrainingJob | Sweep]:
        """The run's jobs and Sweeps by (step, item), the latest attempt of each."""
        found: dict[tuple[str, int | None], TrainingJob | Sweep] = {}
        # Selected by the backend (SQL, a label selector, the informer's cache): not every job of the namespace.
        mine = {RUN_LABEL: run.metadata.name, RUN_UID_LABEL: run.metadata.uid or ""}
        jobs: list[TrainingJob | Sweep] = [*self.backend.list(TrainingJob, run.metadata.namespace, labels=mine)]
        jobs += self.backend.list(Sweep, run.metadata.namespace, labels=mine)
        for obj in jobs:
            labels = obj.metadata.labels
            try:
                key = (labels[STEP_LABEL], int(labels[ITEM_LABEL]) if labels.get(ITEM_LABEL) else None)
                attempt = int(labels[ATTEMPT_LABEL])
            except (KeyError, ValueError):
                continue
            current = found.get(key)
            if current is None or attempt > int(current.metadata.labels[ATTEMPT_LABEL]):
                found[key] = obj
        return found

    def _observe(self, work: _Pass, pipeline: _Pipeline) -> None:
        objects = self._owned(work.run)
        for key, obj in objects.items():
            step = pipeline.spec.step(key[0])
            if step is None:
                continue
            attempt = int(obj.metadata.labels[ATTEMPT_LABEL])
            entry = work.instances.get(key)
            if entry is None or entry.attempts < attempt:
                # Created by a pass that crashed (or lost its status write) before saying so: adopt it.
                entry = StepStatus(
                    step=key[0],
                    item=key[1],
                    phase=StepPhase.RUNNING,
                    attempts=attempt,
                    job=obj.metadata.name,
                    start_time=self.clock.now(),
                )
                work.instances[key] = entry
            if entry.phase == StepPhase.RUNNING and entry.attempts == attempt:
                self._finish_if_done(work, pipeline, step, entry, obj)
        for key, entry in list(work.instances.items()):
            if entry.phase == StepPhase.RUNNING and key not in objects:
                label = instance_name(*key)
                message = f"{label}: its {'job' if entry.job else 'object'} {entry.job or ''} is gone"
                work.instances[key] = self._ended(entry, StepPhase.FAILED, message)
                work.say("StepFailed", message, warning=True)

    def _finish_if_done(
        self, work: _Pass, pipeline: _Pipeline, step: Step, entry: StepStatus, obj: TrainingJob | Sweep
    ) -> None:
        key = (entry.step, entry.item)
        label = instance_name(*key)
        if isinstance(obj, Sweep):
            done, failed = obj.status.phase == SweepPhase.SUCCEEDED, obj.status.phase == SweepPhase.FAILED
            why = obj.status.message
        else:
            done, failed = obj.status.phase == Phase.SUCCEEDED, obj.status.phase == Phase.FAILED
            why = obj.status.message
        if failed:
            message = f"{label} failed on attempt {entry.attempts}: {why or 'its job failed'}"
            work.instances[key] = self._ended(entry, StepPhase.FAILED, message)
            work.say("StepFailed", message, warning=True)
            return
        if not done:
            return
        declared = pipeline.graph.interfaces[step.name].outputs
        folder = self._folder(work.run, entry.step, entry.item, entry.attempts)
        try:
            if isinstance(obj, Sweep):
                outputs = sweep_outputs(obj, declared)
            else:
                outputs = job_outputs(obj, declared, folder, self.artifacts, pipeline.components.get(step.name))
        except CollectError as err:
            message = f"{label} failed on attempt {entry.attempts}: {err}"
            work.instances[key] = self._ended(entry, StepPhase.FAILED, message)
            work.say("StepFailed", message, warning=True)
            return
        if entry.cache_key is not None and step.cache:
            source = f"{work.run.metadata.namespace}/{obj.metadata.name}"
            self.artifacts.cache_put(entry.cache_key, outputs, source=source)
        message = f"{label} succeeded on attempt {entry.attempts}"
        work.instances[key] = self._ended(entry, StepPhase.SUCCEEDED, message, outputs)
        work.say("StepSucceeded", message)

    def _ended(
        self,
        entry: StepStatus,
        phase: StepPhase,
        message: str,
        outputs: Mapping[str, OutputValue] | None = None,
    ) -> StepStatus:
        changes: dict[str, Any] = {"phase": phase, "message": message, "completion_time": self.clock.now()}
        if outputs is not None:
            changes["outputs"] = {name: out.value for name, out in outputs.items()}
            changes["output_digests"] = {name: out.digest for name, out in outputs.items() if out.digest is not None}
        return entry.model_copy(update=changes)

    def _folder(self, run: PipelineRun, step: str, item: int | None, attempt: int) -> Any:
        return self.artifacts.instance(
            run.metadata.namespace, run.metadata.name, run.metadata.uid or "", step, item, attempt
        )

    # -- acting on the plan ------------------------------------------------------------------------------------

    def _act(self, work: _Pass, pipeline: _Pipeline, action: Action) -> None:
        if isinstance(action, StartStep | RetryStep):
            self._start(work, pipeline, action)
        elif isinstance(action, UseCache):
            self._use_cache(work, action)
        elif isinstance(action, SkipStep):
            now = self.clock.now()
            work.instances[(action.step, action.item)] = StepStatus(
                step=action.step, item=action.item, phase=StepPhase.SKIPPED, message=action.reason, completion_time=now
            )
            work.say("StepSkipped", action.reason)
        elif isinstance(action, FailStep):
            previous = work.instances.get((action.step, action.item))
            work.instances[(action.step, action.item)] = StepStatus(
                step=action.step,
                item=action.item,
                phase=StepPhase.FAILED,
                attempts=previous.attempts if previous is not None else 0,
                retryable=False,
                message=action.reason,
                completion_time=self.clock.now(),
            )
            work.say("StepFailed", action.reason, warning=True)
        elif isinstance(action, FanOut):
            work.fanouts[action.step] = list(action.items)
            work.say("FannedOut", action.reason)
        elif isinstance(action, FanIn):
            if action.step not in work.joined:
                work.joined.append(action.step)
            work.say("FannedIn", action.reason)
        elif isinstance(action, FinishRun):
            work.phase = action.phase
            work.message = action.reason
            succeeded = action.phase == RunPhase.SUCCEEDED
            work.say("RunSucceeded" if succeeded else "RunFailed", action.reason, warning=not succeeded)

    def _start(self, work: _Pass, pipeline: _Pipeline, action: StartStep | RetryStep) -> None:
        step = pipeline.step(action.step)
        instance = Instance(work.run, step, action.item, action.attempt, action.arguments, action.artifact_inputs)
        key = (action.step, action.item)
        label = instance_name(*key)
        folder = self._folder(work.run, action.step, action.item, action.attempt)
        entry = StepStatus(
            step=action.step,
            item=action.item,
            phase=StepPhase.RUNNING,
            attempts=action.attempt,
            cache_key=action.cache_key,
            job=instance.object_name,
            start_time=self.clock.now(),
            message=action.reason,
        )
        try:
            obj = build_object(
                instance,
                pipeline.components.get(step.name),
                folder,
                self.artifacts,
                self._jobtypes(),
                self.backend.step_files,
            )
        except LaunchError as err:
            message = f"{label} cannot start: {err}"
            work.instances[key] = entry.model_copy(
                update={"phase": StepPhase.FAILED, "retryable": False, "message": message, "job": None}
            )
            work.say("StepFailed", message, warning=True)
            return
        try:
            self.backend.create(obj)
        except AlreadyExistsError:
            existing: TrainingJob | Sweep | None = (
                self.backend.get(Sweep, obj.metadata.namespace, obj.metadata.name)
                if isinstance(obj, Sweep)
                else self.backend.get(TrainingJob, obj.metadata.namespace, obj.metadata.name)
            )
            ours = existing is not None and existing.metadata.labels.get(RUN_UID_LABEL) == (work.run.metadata.uid or "")
            if not ours:
                # An earlier run of this name left it: wait for it to go rather than take it for ours.
                work.message = f"{label} waits: {obj.metadata.name} of an earlier run of this name still exists"
                return
        work.instances[key] = entry
        if isinstance(action, RetryStep):
            work.say("StepRetried", action.reason)
        else:
            work.say("StepStarted", f"{action.reason}; {type(obj).__name__} {obj.metadata.name}")

    def _use_cache(self, work: _Pass, action: UseCache) -> None:
        folder = self._folder(work.run, action.step, action.item, 1)
        outputs: dict[str, OutputValue] = {}
        try:
            for name, out in action.outputs.items():
                if out.digest is None:
                    outputs[name] = out
                    continue
                relative = out.value.split("/outputs/", 1)[-1]
                target = self.artifacts.output_location(folder, relative)
                self.artifacts.copy(out.value, target)
                outputs[name] = OutputValue(target, out.digest)
        except ArtifactStoreError as err:
            # The cached artifacts are gone: forget the entry, and the next pass starts the step.
            self.artifacts.cache_forget(action.cache_key)
            work.say("CacheMiss", f"{instance_name(action.step, action.item)}: {err}; running it", warning=True)
            return
        now = self.clock.now()
        entry = StepStatus(
            step=action.step,
            item=action.item,
            phase=StepPhase.SUCCEEDED,
            attempts=0,
            cache_hit=True,
            cache_key=action.cache_key,
            start_time=now,
            completion_time=now,
            message=action.reason,
        )
        work.instances[(action.step, action.item)] = self._ended(entry, StepPhase.SUCCEEDED, action.reason, outputs)
        work.say("StepCached", action.reason)

    def _jobtypes(self) -> dict[str, JobType]:
        return {jobtype.metadata.name: jobtype for jobtype in self.backend.list(JobType)}


def _changed_steps(recorded: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """Steps whose digest differs from the one the run recorded when it started (none recorded: none)."""
    if not recorded:
        return []
    return sorted(name for name in {*recorded, *current} if recorded.get(name) != current.get(name))
