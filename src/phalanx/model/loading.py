"""Reading and writing API objects as YAML or JSON, including multi-document YAML files.

Errors say which file and, for multi-document files, which document. Every YAML read (spec files, text handed
to the local API, the built-in JobTypes) goes through ``parse_documents``: the file limits of ``yaml_limits``
(size, documents, nesting, values once aliases are expanded), duplicate keys refused, encodings as
``textfiles`` decides. A problem with the file as a whole is one sentence that starts with the file's name.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from phalanx.model.datasets import Dataset
from phalanx.model.errors import FieldError, SpecError, from_validation_error
from phalanx.model.jobtypes import JobType
from phalanx.model.queues import Queue
from phalanx.model.scheduler_config import SCHEDULER_CONFIGURATION, SchedulerConfiguration
from phalanx.model.textfiles import MAX_FILE_BYTES, FileTextError, read_spec_text, too_large
from phalanx.model.validation import allowed_fields
from phalanx.model.yaml_limits import LimitedLoader, LimitExceededError, measure_documents


def read_documents(path: Path) -> list[dict[str, Any]]:
    """Every YAML/JSON document in a file, as mappings.

    Raises:
        SpecError: the file is missing, unreadable, too large, not text, not YAML, past a limit of
            ``yaml_limits``, or a document is not a mapping.
    """
    try:
        text = read_spec_text(path)
    except FileNotFoundError:
        raise SpecError([FieldError("", f"file not found: {path}")]) from None
    except FileTextError as err:
        raise SpecError([FieldError("", str(err))], source=str(path)) from None
    except OSError as err:
        raise SpecError([FieldError("", f"cannot read {path}: {err.strerror}")]) from None
    return parse_documents(text, source=str(path))


def parse_documents(text: str, *, source: str = "<input>") -> list[dict[str, Any]]:
    """Parse YAML (a superset of JSON) text into mappings, skipping empty documents.

    Every document is composed, and so checked against the limits and for duplicate keys, before any is
    constructed into Python objects.
    """
    # A character is at most 4 bytes: count the bytes only when the characters alone do not decide.
    if len(text) > MAX_FILE_BYTES // 4 and len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise SpecError([FieldError("", too_large(source))], source=source)
    loader: LimitedLoader | None = None
    try:
        loader = LimitedLoader(text, source=source)  # the pure-Python reader checks the characters here
        nodes = []
        while loader.check_node():
            nodes.append(loader.get_node())
        if loader.duplicates:
            many = loader.document > 1
            raise SpecError(
                [
                    FieldError(path, f"document {doc}: {problem}" if many else problem)
                    for doc, path, problem in loader.duplicates
                ],
                source=source,
            )
        documents = [doc for doc in (loader.construct_document(node) for node in nodes) if doc is not None]
    except LimitExceededError as err:
        raise SpecError([FieldError("", str(err))], source=source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        # PyYAML's context says what it was reading and where that began: often where the mistake is (a quote
        # or bracket opened lines earlier, a mapping whose indentation the problem line breaks).
        context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and context_mark is not None and context_mark is not mark:
            problem += f" ({context} that starts at line {context_mark.line + 1}, column {context_mark.column + 1})"
        elif context:
            problem += f" ({context})"
        raise SpecError([FieldError("", f"not valid YAML{where}: {problem}")], source=source) from None
    except UnicodeEncodeError as err:
        # Text from JSON may hold a lone surrogate, which no YAML reader accepts.
        raise SpecError(
            [FieldError("", f"not valid YAML: {err.reason} at character {err.start}")], source=source
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    for position, doc in enumerate(documents):
        if not isinstance(doc, dict):
            raise SpecError(
                [FieldError("", f"document {position + 1} is a {type(doc).__name__}, expected a mapping")],
                source=source,
            )
    if not documents:
        raise SpecError([FieldError("", "the file holds no document")], source=source)
    return documents


def dump_yaml(data: Any) -> str:
    """YAML for people: block style, keys in the model's order."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def dump_json(data: Any) -> str:
    """Indented JSON for scripts."""
    return json.dumps(data, indent=2, default=str)


def parse_jobtype(raw: dict[str, Any], *, source: str | None = None) -> JobType:
    """Validate a JobType document.

    Raises:
        SpecError: with field paths, e.g. ``spec.env.RANK: unknown template variable 'rnak'``.
    """
    try:
        return JobType.model_validate({k: v for k, v in raw.items() if k != "status"})
    except ValidationError as err:
        raise SpecError(
            from_validation_error(err, fields_at=lambda loc: allowed_fields(JobType, loc)), source=source
        ) from None


def parse_queue(raw: dict[str, Any], *, source: str | None = None) -> Queue:
    """Validate a Queue document (its status, written by Phalanx, is ignored).

    Raises:
        SpecError: with field paths, e.g. ``spec.priorityClasses[1]: unknown priority class 'urgent'; ...``.
    """
    try:
        return Queue.model_validate({k: v for k, v in raw.items() if k != "status"})
    except ValidationError as err:
        raise SpecError(
            from_validation_error(err, fields_at=lambda loc: allowed_fields(Queue, loc)), source=source
        ) from None


def parse_dataset(raw: dict[str, Any], *, source: str | None = None) -> Dataset:
    """Validate a Dataset document (its status, written by Phalanx, is ignored).

    Raises:
        SpecError: with field paths, e.g. ``spec.source.path: '../x' steps out of its directory with '..'; ...``.
    """
    try:
        return Dataset.model_validate({k: v for k, v in raw.items() if k != "status"})
    except ValidationError as err:
        raise SpecError(
            from_validation_error(err, fields_at=lambda loc: allowed_fields(Dataset, loc)), source=source
        ) from None


def read_scheduler_configuration(path: Path) -> SchedulerConfiguration:
    """The one SchedulerConfiguration document of a file (``--scheduler-config``, ``--config``).

    Raises:
        SpecError: the file cannot be read, holds more than one document or another kind, or a field is wrong.
    """
    documents = read_documents(path)
    if len(documents) != 1 or documents[0].get("kind") != SCHEDULER_CONFIGURATION:
        kinds = ", ".join(str(doc.get("kind")) for doc in documents)
        raise SpecError(
            [FieldError("kind", f"the file must hold one {SCHEDULER_CONFIGURATION} document, not: {kinds}")],
            source=str(path),
        )
    try:
        return SchedulerConfiguration.model_validate(documents[0])
    except ValidationError as err:
        raise SpecError(
            from_validation_error(err, fields_at=lambda loc: allowed_fields(SchedulerConfiguration, loc)),
            source=str(path),
        ) from None


BUILTIN_LABEL = "phalanx.dev/builtin"


def builtin_jobtypes() -> dict[str, JobType]:
    """The JobTypes shipped with Phalanx: pytorch, tensorflow, mpi, jax, xgboost, paddle, generic."""
    return dict(_load_builtin_jobtypes())


@functools.cache
def _load_builtin_jobtypes() -> dict[str, JobType]:
    # Read once per process: the files ship with the package and do not change under us.
    found: dict[str, JobType] = {}
    folder = resources.files("phalanx.model") / "jobtypes"
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".yaml"):
            (raw,) = parse_documents(entry.read_text(encoding="utf-8"), source=entry.name)
            raw.setdefault("metadata", {}).setdefault("labels", {})[BUILTIN_LABEL] = "true"
            jobtype = parse_jobtype(raw, source=entry.name)
            found[jobtype.metadata.name] = jobtype
    return found


def check_documents(documents: Sequence[Any], *, source: str | None = None) -> None:
    """Refuse documents that arrive parsed (JSON, SDK mappings) past the limits a file has, before validation.

    Raises:
        SpecError: one sentence naming the document and the limit.
    """
    try:
        measure_documents(documents, source=source)
    except LimitExceededError as err:
        raise SpecError([FieldError("", str(err))], source=source) from None


def iter_kinds(documents: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Pairs of (kind, document), defaulting a missing kind to TrainingJob."""
    for doc in documents:
        yield str(doc.get("kind", "TrainingJob")), doc
