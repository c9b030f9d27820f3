"""A Katib Experiment checked as the Sweep it becomes, every problem named at its path in the Experiment.

``model.katib`` converts (the model layer cannot validate a Sweep's trial template: substitution is core's);
``validate_experiment`` then runs the very same ``validate_sweep`` as a Sweep written by hand, with the JobTypes
the trial's conversion made (an MPIJob trial with several slots per worker), and maps each error back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.core.sweeps.substitute import validate_sweep
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.jobtypes import JobType
from phalanx.model.katib import ExperimentConversion, convert_experiment
from phalanx.model.kubeflow import with_made_jobtypes
from phalanx.model.sweeps import Sweep


def validate_experiment(
    document: Mapping[str, Any], jobtypes: Mapping[str, JobType], *, source: str | None = None
) -> tuple[list[JobType], Sweep, ExperimentConversion]:
    """The JobTypes and the validated Sweep a Katib Experiment becomes, with the conversion.

    Raises:
        SpecError: every problem, each at its path in the Experiment.
    """
    try:
        conversion = convert_experiment(document, jobtypes)
    except SpecError as error:
        raise SpecError(error.errors, source=source) from None
    known, made = with_made_jobtypes(conversion.jobtypes, jobtypes)
    try:
        sweep = validate_sweep(conversion.sweep, known)
    except SpecError as error:
        raise SpecError(
            [FieldError(conversion.upstream_path(item.path), item.message) for item in error.errors], source=source
        ) from None
    return made, sweep, conversion
