"""Hypothesis settings of the fuzz tier (issue 13): generated and hostile inputs at every door.

Hypothesis runs under the ``phalanx-fuzz`` profile, applied per test (``FUZZ``) rather than loaded globally, so
the other tiers' property tests keep their own settings. In the gate it is deterministic (``derandomize``: the
same examples on every run, so a red gate is reproducible and never flaky), has no deadline (two shared cores
make timings noisy) and prints the blob that replays a failure. ``PHALANX_FUZZ_PROFILE=explore`` draws fresh
random examples, ten times as many, and shrinks what fails, for a longer hunt on a developer's machine.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

_COMMON = {
    "deadline": None,
    "print_blob": True,
    "database": None,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
        HealthCheck.function_scoped_fixture,
    ],
}
# The gate does not shrink: a failing example is reported as found (with its replay blob) within the tier's
# budget; shrinking one hostile document through a control plane or a 20 s timeout can take many minutes.
settings.register_profile("phalanx-fuzz-ci", derandomize=True, phases=[Phase.explicit, Phase.generate], **_COMMON)
settings.register_profile("phalanx-fuzz-explore", derandomize=False, **_COMMON)

PROFILE = os.environ.get("PHALANX_FUZZ_PROFILE", "ci")
SCALE = 10 if PROFILE == "explore" else 1
FUZZ = settings.get_profile(f"phalanx-fuzz-{PROFILE}")
