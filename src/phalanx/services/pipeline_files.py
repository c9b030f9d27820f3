"""Component files of a submitted pipeline, read into it: a stored Pipeline holds its components inline.

A step's ``component: {path: ...}`` names a KFP v1 ``component.yaml`` relative to the pipeline file's directory.
The door reads it here, before anything is validated, and the document goes on with ``component: {inline: ...}``
instead, so the stored object is whole on every backend (an operator on a cluster cannot read the submitter's
files, and a file edited after the submission must not change a pipeline already stored). Where each component
came from is kept in the annotation ``phalanx.dev/component-paths`` (step name -> path, as JSON), for ``describe``.

A file that is missing, unreadable, not YAML, not one component, or a component that does not parse is refused at
``spec.steps[i].component.path`` (``spec.pipelineSpec.steps[i]...`` in a PipelineRun), its own problems quoted with
their path in the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from phalanx.core.pipelines.components import COMPONENT_PATHS_ANNOTATION
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.kfp_component import parse_component
from phalanx.model.loading import read_documents
from phalanx.model.yaml_limits import LimitExceededError, measure_documents


def inline_component_files(
    documents: Sequence[dict[str, Any]], directory: Path | None
) -> tuple[list[dict[str, Any]], dict[int, list[FieldError]]]:
    """The documents with every Pipeline's (and inline PipelineRun's) component paths read; the problems met.

    The problems are by position of their document (with those of its files that could be read inlined).

    ``directory``: where relative component paths start (the pipeline file's directory); None: none is known
    (documents handed over without a file), so a component path is refused.
    """
    out: list[dict[str, Any]] = []
    errors: dict[int, list[FieldError]] = {}
    files = _Files(directory)
    for position, doc in enumerate(documents):
        kind = doc.get("kind")
        if kind == "Pipeline":
            doc, problems = _inlined(doc, ("spec",), files)
        elif kind == "PipelineRun":
            doc, problems = _inlined(doc, ("spec", "pipelineSpec"), files)
        else:
            problems = []
        if problems:
            errors[position] = problems
        out.append(doc)
    return out, errors


class _Files:
    """The component files of one submission, each read once however many steps name it."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.read: dict[str, tuple[Any, str | None]] = {}

    def component(self, path: str) -> tuple[Any, str | None]:
        if path not in self.read:
            self.read[path] = _read_component(self.directory, path)
        return self.read[path]


def _inlined(doc: dict[str, Any], at: tuple[str, ...], files: _Files) -> tuple[dict[str, Any], list[FieldError]]:
    spec: Any = doc
    for key in at:
        spec = spec.get(key) if isinstance(spec, Mapping) else None
    steps = spec.get("steps") if isinstance(spec, Mapping) else None
    if not isinstance(steps, list):
        return doc, []  # no steps to read: the shape check says what is wrong
    paths: dict[str, str] = {}
    errors: list[FieldError] = []
    new_steps: list[Any] = []
    for position, step in enumerate(steps):
        component = step.get("component") if isinstance(step, Mapping) else None
        path = component.get("path") if isinstance(component, Mapping) else None
        if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or len(component or ()) != 1:
            new_steps.append(step)  # nothing to read (or a bad ref): the shape check names it
            continue
        where = ".".join(at) + f".steps[{position}].component.path"
        loaded, problem = files.component(path)
        if problem is not None:
            errors.append(FieldError(where, problem))
            new_steps.append(step)
            continue
        new_steps.append({**step, "component": {"inline": loaded}})
        if isinstance(step.get("name"), str):
            paths[step["name"]] = path
    if not paths:
        return doc, errors
    # The files that could be read are inlined even when others could not: the rest of the check then speaks of
    # the unread ones alone.
    new_doc = _replaced(doc, at, {**spec, "steps": new_steps})
    metadata = new_doc.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("annotations", {}), Mapping):
        annotations = {**(metadata.get("annotations") or {}), COMPONENT_PATHS_ANNOTATION: json.dumps(paths)}
        new_doc["metadata"] = {**metadata, "annotations": annotations}
    try:  # the document as it will be stored meets a file's limits too (a component named by 500 steps...)
        measure_documents([new_doc], source=None)
    except LimitExceededError as err:
        where = ".".join([*at, "steps"])
        return doc, [*errors, FieldError(where, f"with its component files inline, {err}; split the pipeline")]
    return new_doc, errors


def _read_component(directory: Path | None, path: str) -> tuple[Any, str | None]:
    """The one document of a component file, parsed to check it, or why it cannot be used."""
    if directory is None:
        return None, (
            f"{path}: a component path is relative to the pipeline file, and these documents came from no file; "
            "submit the file, or give the component inline (component: {inline: ...})"
        )
    file = directory / path
    try:
        documents = read_documents(file)
    except SpecError as err:
        detail = "; ".join(str(item) for item in err.errors)
        if not file.exists():
            detail = f"no such file in {directory}"
        return (
            None,
            f"{path}: cannot read the component file ({detail}); fix the path (it is relative to the pipeline file)",
        )
    if len(documents) != 1:
        return None, f"{path}: a component file holds one component document, this one holds {len(documents)}"
    try:
        parse_component(documents[0])
    except SpecError as err:
        problems = "; ".join(str(item) for item in err.errors)
        return None, f"{path}: not a valid KFP v1 component: {problems}"
    return documents[0], None


def _replaced(doc: dict[str, Any], at: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with the mapping at ``at`` replaced by ``value`` (copies along the way)."""
    if not at:
        return dict(value)
    copy = dict(doc)
    copy[at[0]] = _replaced(dict(doc[at[0]]), at[1:], value) if len(at) > 1 else value
    return copy
