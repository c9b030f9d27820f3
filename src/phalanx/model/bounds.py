"""Every numeric and size bound of the API objects, in one place, with why (docs/limits.md lists them).

A bound exists so that nothing a user can write reaches numpy's int64 arrays, ``datetime`` arithmetic or a
per-replica loop with a value that overflows, never ends or pins the control plane. Each is far above any real
use and far below where arithmetic breaks: sums of per-replica amounts over a whole job (4096 replicas) still
fit an int64 with room to spare.
"""

from __future__ import annotations

#: CPU of one replica, in millicores: 1,000,000 cores. 4096 replicas of it are 4.1e12, far inside an int64.
MAX_REPLICA_CPU_MILLI = 10**9
#: Memory of one replica, in bytes: 1Pi. No machine has more; 4096 of it are 2**62, still an int64.
MAX_REPLICA_MEMORY = 2**50
#: Whole GPUs of one replica: no node has more.
MAX_REPLICA_GPU = 1024

#: A Queue's quota or borrowing limit: a whole cluster's worth (1e9 cores, 1Ei, 1e7 GPUs); summed in Python ints.
MAX_QUOTA_CPU_MILLI = 10**12
MAX_QUOTA_MEMORY = 2**60
MAX_QUOTA_GPU = 10**7

#: Roles of one job or JobType: real jobs have 1 to 4 (master, worker, ps, chief, evaluator, launcher...).
MAX_ROLES = 32


def few_roles(value: object, what: str) -> object:
    """``value`` (a raw roles mapping) unchanged, or ``ValueError`` past ``MAX_ROLES``.

    Checked before the roles are parsed, by the job and JobType models alike: 100,000 roles must cost a len(), not
    100,000 validations.
    """
    if isinstance(value, dict) and len(value) > MAX_ROLES:
        raise ValueError(f"{what} has at most {MAX_ROLES} roles, got {len(value)}")
    return value


#: Replicas of one role, and of a whole job over all its roles: a gang larger than this is not admitted whole.
MAX_REPLICAS = 4096

#: Any duration in seconds (deadlines, TTLs): ten years. ``datetime`` overflows near year 9999.
MAX_SECONDS = 315_360_000
#: First and longest retry delays, in seconds (kept from before: an hour and a day).
MAX_BACKOFF_SECONDS = 3600
MAX_BACKOFF_CAP_SECONDS = 86_400
#: Retries of a failed replica.
MAX_BACKOFF_LIMIT = 1000
#: Exit codes are one byte on POSIX.
MAX_EXIT_CODE = 255
#: Explicit priorities (classes map to -100..1000).
MIN_PRIORITY = -1_000_000
MAX_PRIORITY = 1_000_000_000

#: Environment entries of one template (or of one JobType's env).
MAX_ENV_ENTRIES = 1024
#: One string value in a template: an env value, a command or argument, a working directory, an image (128 KiB).
MAX_STRING_BYTES = 128 * 1024
#: Items of command and args together: Linux limits one argv to a few MiB anyway.
MAX_ARGV_ITEMS = 4096

#: Pod fields of one template (``model.pods``): items of each list (volumes, mounts, tolerations, selector terms,
#: image pull secrets...) and entries of each mapping (nodeSelector, matchLabels, envValueFrom). Kubernetes sets
#: no count of its own below its object size limit; real Pods have a handful.
MAX_POD_LIST_ITEMS = 256
MAX_POD_MAP_ENTRIES = 256
#: Init containers, and sidecars, of one template.
MAX_INIT_CONTAINERS = 32

#: MPI slots per host.
MAX_SLOTS_PER_HOST = 1024
#: A Queue's fair-share weight.
MAX_QUEUE_WEIGHT = 1_000_000

#: Node inventories (observed or simulated): CPU, core, socket and NUMA ids; GPU indices; memory per node and
#: per GPU; NVLink links between two GPUs.
MAX_CPU_ID = 65_535
MAX_CPUS_PER_NODE = 65_536
MAX_GPU_INDEX = 1023
MAX_GPUS_PER_NODE = 1024
MAX_NODE_MEMORY = 2**50
MAX_NVLINKS = 64

#: Scheduler configuration: least-attained-service band limits, in GPU-seconds (a million GPU-years is past any
#: job; datetime arithmetic on the seconds stays exact), how many of them, and the starvation limit (a ratio of
#: waiting to running time).
MAX_LAS_THRESHOLD = 3.2e13
MAX_LAS_THRESHOLDS = 16
MAX_STARVE_LIMIT = 1_000_000.0
