"""The outputs of a finished step instance: parameters as values, artifacts as store locations with digests.

A job's outputs are where its ``phalanx.dev/step-outputs`` annotation says its process wrote them
(``launch``). A parameter output (``core.pipelines.steps.is_parameter``) must be a file of at most
``dag.MAX_INLINE_ARTIFACT_BYTES``: its text is the value, as KFP v1 passes it. An artifact output is a file or a
folder: its value is its location in the store and its digest that of its content (``local_tree_digest``); one
written outside the instance's folder (a legacy ``fileOutputs`` path) is copied into ``outputs/<name>/data``
first. A kfp v2 lightweight component's parameter outputs come from its executor output file. An output the
process did not write fails the attempt (a retry may mend it). With an object store, the outputs are uploaded
once all of them were read (``ArtifactStore.publish``).

A Sweep step's outputs come from its best trial: ``bestParameters`` (the best parameters as a JSON object),
``bestValue`` (the objective value), ``bestTrial`` (the trial job's name), and each declared output named after
a sweep parameter takes that parameter's best value.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from phalanx.adapters.artifacts import ArtifactStore, InstanceFolder, local_tree_digest
from phalanx.core.pipelines.dag import MAX_INLINE_ARTIFACT_BYTES, OutputDecl
from phalanx.core.pipelines.plan import OutputValue
from phalanx.core.pipelines.references import render
from phalanx.core.pipelines.steps import EXECUTOR_OUTPUT_ANNOTATION, OUTPUTS_ANNOTATION, is_parameter
from phalanx.model.jobs import TrainingJob
from phalanx.model.kfp_component import ComponentSpec, file_name_of
from phalanx.model.sweeps import Sweep
from phalanx.services.pipelines.launch import kfp_executor


class CollectError(Exception):
    """An output is missing or unusable: the sentence names it."""


def job_outputs(
    job: TrainingJob,
    declared: tuple[OutputDecl, ...],
    folder: InstanceFolder,
    store: ArtifactStore,
    component: ComponentSpec | None,
) -> dict[str, OutputValue]:
    """The outputs of a succeeded step job.

    Raises:
        CollectError: an output was not written, or is not usable as its type says.
    """
    try:
        paths: dict[str, str] = json.loads(job.metadata.annotations.get(OUTPUTS_ANNOTATION, "{}"))
    except ValueError:
        paths = {}
    from_executor = _executor_outputs(job, component)
    outputs: dict[str, OutputValue] = {}
    for decl in declared:
        if decl.name in from_executor:
            outputs[decl.name] = OutputValue(from_executor[decl.name])
            continue
        path = paths.get(decl.name)
        if path is None:
            raise CollectError(f"output {decl.name!r} has no path: the component's command line never names it")
        local = Path(path)
        if is_parameter(decl.type):
            outputs[decl.name] = OutputValue(_parameter(local, decl.name))
            continue
        if not local.exists():
            raise CollectError(f"the step did not write its output {decl.name!r} (at {local})")
        if not local.is_relative_to(folder.outputs):
            kept = folder.outputs / file_name_of(decl.name) / "data"
            kept.parent.mkdir(parents=True, exist_ok=True)
            if local.is_dir():
                shutil.copytree(local, kept, dirs_exist_ok=True)
            else:
                shutil.copy2(local, kept)
            local = kept
        digest = local_tree_digest(local)
        relative = local.relative_to(folder.outputs).as_posix()
        outputs[decl.name] = OutputValue(store.output_location(folder, relative), digest)
    store.publish(folder)
    return outputs


def _parameter(path: Path, name: str) -> str:
    if not path.is_file():
        raise CollectError(f"the step did not write its output {name!r} (a file at {path})")
    size = path.stat().st_size
    if size > MAX_INLINE_ARTIFACT_BYTES:
        raise CollectError(
            f"output {name!r} is a parameter of {size} bytes (at most {MAX_INLINE_ARTIFACT_BYTES}); give it an "
            "artifact type (e.g. Dataset) to pass it as a file"
        )
    return path.read_text(errors="replace")


def _executor_outputs(job: TrainingJob, component: ComponentSpec | None) -> Mapping[str, str]:
    output_file = job.metadata.annotations.get(EXECUTOR_OUTPUT_ANNOTATION)
    executor = kfp_executor()
    if output_file is None or executor is None or component is None:
        return {}
    try:
        text = Path(output_file).read_text()
    except OSError:
        return {}  # no parameter outputs written through the executor: the declared files must be there
    try:
        found: Mapping[str, str] = executor.executor_outputs(text, component)
    except ValueError as err:
        raise CollectError(str(err)) from None
    return found


def sweep_outputs(sweep: Sweep, declared: tuple[OutputDecl, ...]) -> dict[str, OutputValue]:
    """The outputs of a succeeded Sweep step, from its best trial.

    Raises:
        CollectError: it has no best trial, or a declared output names no sweep parameter.
    """
    best = sweep.status.best_trial
    if best is None:
        raise CollectError(f"sweep {sweep.metadata.name} finished without a best trial (no trial reported a value)")
    own = {
        "bestParameters": OutputValue(json.dumps(best.parameters, sort_keys=True)),
        "bestValue": OutputValue(json.dumps(best.value)),
        "bestTrial": OutputValue(best.name),
    }
    outputs: dict[str, OutputValue] = {}
    for decl in declared:
        if decl.name in own:
            outputs[decl.name] = own[decl.name]
        elif decl.name in best.parameters:
            outputs[decl.name] = OutputValue(render(best.parameters[decl.name]))
        else:
            known = ", ".join(sorted([*own, *best.parameters]))
            raise CollectError(f"output {decl.name!r} is neither a best-trial output nor a sweep parameter ({known})")
    return outputs
