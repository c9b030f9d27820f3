"""``phalanx convert FILE``: what the Kubeflow jobs (TrainingJobs, JobTypes) and Katib Experiments (Sweeps) become.

A compiled Kubeflow Pipelines v2 file (the IR YAML ``kfp.compiler`` writes) comes out as the Pipeline it becomes.

Offline: it reads the file and the built-in JobTypes (and those in the file), talks to no control plane and no
cluster, and creates nothing. What it prints is what ``phalanx submit`` to the chosen backend would accept for the
same file — that backend's refusals (pod fields the embedded runtime cannot honour, fields a named cluster
scheduler cannot) included —, so it is also the migration path: keep the printed TrainingJob as your spec from
then on (docs/kubeflow.md).
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from phalanx.entrypoints.cli.backends import BackendError, choose_backend
from phalanx.entrypoints.cli.options import BackendOption
from phalanx.entrypoints.cli.output import fail, spec_errors


class Format(StrEnum):
    """What ``convert`` writes."""

    YAML = "yaml"
    JSON = "json"


def convert(
    file: Annotated[
        Path,
        typer.Argument(
            help="A YAML/JSON file of Kubeflow jobs (PyTorchJob, TFJob, MPIJob...), Katib Experiments or a compiled "
            "KFP v2 pipeline."
        ),
    ],
    output: Annotated[Format, typer.Option("--output", "-o", help="yaml or json.")] = Format.YAML,
    backend: BackendOption = None,
) -> None:
    """Print what each Kubeflow job (a TrainingJob, any JobType) and Katib Experiment (a Sweep) in FILE becomes.

    A compiled Kubeflow Pipelines v2 pipeline (IR YAML) is printed as the Phalanx Pipeline it runs as.

    Nothing is created; other documents of the file are printed as they are. A field that cannot be honoured — by
    Phalanx, or by the backend the job would be submitted to (--backend) — is an error naming its path in the
    Kubeflow document.
    """
    from phalanx.model.errors import SpecError
    from phalanx.model.loading import builtin_jobtypes, dump_json, dump_yaml, read_documents
    from phalanx.services.operations import BackendRules, convert_documents

    try:
        choice = choose_backend(backend, os.environ)
    except BackendError as err:
        fail(str(err))
    rules: BackendRules
    if choice.kubernetes:
        from phalanx.services.kubernetes.operations import KubeBackend

        rules = BackendRules.of(KubeBackend)
    else:
        from phalanx.services.embedded.operations import SqliteBackend

        rules = BackendRules.of(SqliteBackend)
    try:
        documents = read_documents(file)
        converted = convert_documents(documents, builtin_jobtypes(), source=str(file), backend=rules)
    except SpecError as err:
        spec_errors(err.source, [(e.path, e.message) for e in err.errors])
    if output == Format.JSON:
        data = converted[0] if len(converted) == 1 else {"apiVersion": "v1", "kind": "List", "items": converted}
        sys.stdout.write(dump_json(data) + "\n")
        return
    sys.stdout.write("---\n".join(dump_yaml(doc) for doc in converted))
