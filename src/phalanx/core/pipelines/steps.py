"""Pure pieces of running a step: the names of the objects it creates, ``${inputs.NAME}`` filled in, output kinds.

- ``step_object_name``: a step instance's job (or Sweep) is ``<run>-<step>[-<item>]-<attempt>``: deterministic, so
  a controller that crashed after creating it finds it again instead of starting it twice. Past
  ``MAX_STEP_OBJECT_NAME`` characters the readable part is cut and a hash of the whole added, so two instances
  never share a name. The bound leaves room for the replica names a job's name becomes part of
  (``<job>-<role>-<index>``, a DNS label of at most 63).
- ``fill_inputs``: a trainingJob/sweep step's spec with ``${inputs.NAME}`` replaced by the argument values (an
  artifact input by its local path).
- ``is_parameter``: which outputs are *parameters* (small values passed by value: the output's type is one of
  KFP's parameter types, String included) and which are *artifacts* (files or folders passed by location and
  content digest: any other type, or none). A parameter output's file is read as its value, up to
  ``dag.MAX_INLINE_ARTIFACT_BYTES``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from pydantic import JsonValue

from phalanx.core.pipelines.dag import normal_type
from phalanx.model.pipelines import PIPELINERUN_LABEL

#: The longest job or Sweep name a step instance gets: 63 (a DNS label) less room for ``-<role>-<index>``.
MAX_STEP_OBJECT_NAME = 47
_HASH_CHARS = 10
_INPUT_PLACEHOLDER = re.compile(r"\$\{inputs\.([^}]*)\}")
_PARAMETER_TYPES = frozenset({"String", "Integer", "Float", "Boolean", "JsonObject", "JsonArray"})


def step_object_name(run: str, step: str, item: int | None, attempt: int) -> str:
    """The name of the job (or Sweep) of one attempt of a step instance."""
    parts = [run, step, *([] if item is None else [str(item)]), str(attempt)]
    name = "-".join(parts)
    if len(name) <= MAX_STEP_OBJECT_NAME:
        return name
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:_HASH_CHARS]
    tail = f"-{digest}-{attempt}"
    head = "-".join(parts[:-1])[: MAX_STEP_OBJECT_NAME - len(tail)].rstrip("-")
    return f"{head}{tail}"


def fill_inputs(template: JsonValue, values: Mapping[str, str]) -> JsonValue:
    """``template`` with every ``${inputs.NAME}`` in its strings replaced by ``values[NAME]``.

    An unknown name is left as written (the door refused those before the run, so none is expected).
    """
    if isinstance(template, str):
        return _INPUT_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)
    if isinstance(template, dict):
        return {key: fill_inputs(item, values) for key, item in template.items()}
    if isinstance(template, list):
        return [fill_inputs(item, values) for item in template]
    return template


def is_parameter(output_type: str | None) -> bool:
    """Whether an output of this type is a parameter (its file's text is the value) rather than an artifact."""
    if output_type is None:
        return False
    if output_type.strip().lower() in ("string", "str"):
        return True
    return normal_type(output_type) in _PARAMETER_TYPES


#: Labels of every object a step instance creates: which run (and which incarnation of its name), step, item,
#: attempt. The controller finds a run's jobs by them after a restart.
RUN_LABEL = PIPELINERUN_LABEL
RUN_UID_LABEL = "phalanx.dev/pipelinerun-uid"
STEP_LABEL = "phalanx.dev/step"
ITEM_LABEL = "phalanx.dev/item"
ATTEMPT_LABEL = "phalanx.dev/attempt"
#: A trainingJob step's outputs folder, in every replica's environment: output NAME is ``$PHALANX_OUTPUTS/NAME``.
#: A ``PHALANX_`` name (users may not set those): the runtime lets this one through from the job's template.
OUTPUTS_ENV = "PHALANX_OUTPUTS"
#: On a step's job: output name -> the local path its process writes it to (JSON), read back when it finished.
OUTPUTS_ANNOTATION = "phalanx.dev/step-outputs"
#: On a step's job running a kfp v2 lightweight component: where the kfp executor writes its output file.
EXECUTOR_OUTPUT_ANNOTATION = "phalanx.dev/step-executor-output"
