"""``phalanx convert FILE``: the TrainingJobs (and JobTypes) that the Kubeflow jobs of a file become.

Offline: it reads the file and the built-in JobTypes (and those in the file), talks to no control plane and no
cluster, and creates nothing. What it prints is what ``phalanx submit`` would accept for the same file, so it is
also the migration path: keep the printed TrainingJob as your spec from then on (docs/kubeflow.md).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from phalanx.entrypoints.cli.output import spec_errors


class Format(StrEnum):
    """What ``convert`` writes."""

    YAML = "yaml"
    JSON = "json"


def convert(
    file: Annotated[Path, typer.Argument(help="A YAML/JSON file of Kubeflow jobs (PyTorchJob, TFJob, MPIJob...).")],
    output: Annotated[Format, typer.Option("--output", "-o", help="yaml or json.")] = Format.YAML,
) -> None:
    """Print the TrainingJob (and any JobType) each Kubeflow job in FILE becomes; nothing is created.

    Other documents of the file are printed as they are. A field that cannot be honoured is an error naming its
    path in the Kubeflow document.
    """
    from phalanx.model.errors import SpecError
    from phalanx.model.loading import builtin_jobtypes, dump_json, dump_yaml, read_documents
    from phalanx.services.operations import convert_documents

    try:
        documents = read_documents(file)
        converted = convert_documents(documents, builtin_jobtypes(), source=str(file))
    except SpecError as err:
        spec_errors(err.source, [(e.path, e.message) for e in err.errors])
    if output == Format.JSON:
        data = converted[0] if len(converted) == 1 else {"apiVersion": "v1", "kind": "List", "items": converted}
        sys.stdout.write(dump_json(data) + "\n")
        return
    sys.stdout.write("---\n".join(dump_yaml(doc) for doc in converted))
