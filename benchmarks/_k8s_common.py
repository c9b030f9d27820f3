"""What the Kubernetes benchmarks (``k8s_gang.py``, ``k8s_bind_throughput.py``) share.

- **A fresh control plane per run** (``hack/k8s_testenv.py``: etcd, kube-apiserver, kube-controller-manager, kwok
  and, for the stock runs, kube-scheduler), fake GPU nodes, one namespace for the workload.
- **Pods that never finish on their own.** Every Pod is annotated ``phalanx.dev/sim-hang: "true"`` (the raw Pods
  directly, the TrainingJobs' through their replica template's ``metadata.annotations``), and the benchmark's kwok
  stages are the e2e tier's minus ``phalanx-pod-finish`` besides: a bound Pod turns Running and stays so until
  deleted. The benchmark driver decides when a job is done.
- **The workloads**, the same for every scheduler: a job is ``pods`` replicas named ``<job>-worker-<i>``, each
  asking ``gpus_per_pod`` GPUs, 1 CPU and 1 GiB; as raw Pods for kube-scheduler (labels as Phalanx renders them,
  ``phalanx.dev/job`` the group label), with a PodGroup (``scheduling.k8s.io/v1alpha2``, gang ``minCount`` = all)
  for kube-scheduler's alpha gang scheduling, or as TrainingJobs (type ``generic``) for Phalanx.
- **Phalanx's operator and scheduler** as subprocesses with the admin kubeconfig (``deploy/install.yaml`` less its
  workloads is applied first), ready when their ``/readyz`` answers.
- **One pod informer** (LIST once, then WATCH) feeding the measurements, stamped on arrival.
- **API requests counted by the API server**: ``apiserver_request_total`` from its ``/metrics`` before and after a
  run, by verb and resource, so a run reports what each job cost the API server in writes.

The parts are modules beside it: ``_k8s_cluster`` (the control plane, nodes, Phalanx's components, the pod
informer), ``_k8s_workloads`` (jobs and their manifests), ``_k8s_measure`` (gang accounting, percentiles, API
request counts) and ``_k8s_report`` (the table). This module re-exports them for the benchmarks.

The arithmetic — the seeded job mix, gang accounting and idle GPU-seconds, percentiles — is pure and unit tested
(``tests/unit/test_benchmarks_k8s_common.py``).
"""

from __future__ import annotations

from _k8s_cluster import (
    Cluster,
    PodView,
    Process,
    benchmark_stages,
    create_all,
    delete_quietly,
    phalanx_missing,
    remove_tree,
    watch_pods,
)
from _k8s_measure import (
    BACKGROUND_RESOURCES,
    WRITE_VERBS,
    GangAccounting,
    job_writes,
    parse_request_totals,
    per_second,
    percentile,
    reads_between,
    request_totals,
    writes_between,
)
from _k8s_report import (
    fmt,
    machine,
    table,
)
from _k8s_workloads import (
    GANG_FEATURE_GATES,
    GANG_RUNTIME_CONFIG,
    PODGROUPS,
    GangJob,
    gang_mix,
    interleaved,
    pod_group_manifest,
    pod_manifest,
    training_job_manifest,
    uniform_jobs,
)

__all__ = [
    "BACKGROUND_RESOURCES",
    "GANG_FEATURE_GATES",
    "GANG_RUNTIME_CONFIG",
    "PODGROUPS",
    "WRITE_VERBS",
    "Cluster",
    "GangAccounting",
    "GangJob",
    "PodView",
    "Process",
    "benchmark_stages",
    "create_all",
    "delete_quietly",
    "fmt",
    "gang_mix",
    "interleaved",
    "job_writes",
    "machine",
    "parse_request_totals",
    "per_second",
    "percentile",
    "phalanx_missing",
    "pod_group_manifest",
    "pod_manifest",
    "reads_between",
    "remove_tree",
    "request_totals",
    "table",
    "training_job_manifest",
    "uniform_jobs",
    "watch_pods",
    "writes_between",
]
