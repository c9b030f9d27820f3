"""T-shirt sizes: named resource bundles for people who would rather not count millicores (as in FfDL).

A size fills only the resource fields a template leaves unset, so ``size: large`` with ``gpu: 2`` means a large
replica with two GPUs.
"""

from __future__ import annotations

from phalanx.model.jobs import Resources, TShirtSize

# Quantities are given in the wire notation (cores, binary units) and parsed like any spec.
SIZES: dict[TShirtSize, Resources] = {
    "small": Resources.model_validate({"cpu": 1, "memory": "2Gi", "gpu": 0}),
    "medium": Resources.model_validate({"cpu": 2, "memory": "8Gi", "gpu": 0}),
    "large": Resources.model_validate({"cpu": 4, "memory": "32Gi", "gpu": 1}),
    "xlarge": Resources.model_validate({"cpu": 8, "memory": "64Gi", "gpu": 4}),
}
DEFAULT_SIZE: TShirtSize = "small"


def fill_resources(explicit: Resources, *fallbacks: Resources) -> Resources:
    """Return ``explicit`` with each unset field taken from the first fallback that sets it."""
    values = explicit.model_dump()
    for fallback in fallbacks:
        for field, value in fallback.model_dump().items():
            if values.get(field) is None and value is not None:
                values[field] = value
    if values.get("gpu_milli"):
        values["gpu"] = 0
    return Resources.model_validate(values)
