"""Workload mixes drawn from one openb pod list, the way the FGD paper's trace variants were made.

Weng et al. (USENIX ATC'23, §6) test their policy on variants of the default openb trace that stress one kind of
work. The variants are not shipped here; ``make_mix`` draws the same kinds from a pod list, seeded, keeping the
statistic each variant is named after:

- ``gpushare P``: P % of the GPU demand (GPUs times share) comes from pods that share a GPU. The number of GPU pods
  and the CPU-only pods stay; the GPU pods are drawn with replacement, so many sharing ones and the rest whole.
- ``multigpu P``: P % of the GPU demand comes from pods of several GPUs. Every pod stays, and multi-GPU pods
  drawn with replacement are added until the share is reached.
- ``cpu P``: the CPU-only pods ask for P % of the cluster's CPU capacity. The GPU pods stay; the CPU-only pods
  are drawn with replacement until their CPU demand reaches that share.
- ``gpuspec P``: P % of the GPU pods, drawn at random, may run only on some GPU models (``gpu_spec``). Each gets
  a constraint drawn from ``SPEC_FREQUENCIES`` among those some node can hold it under; a pod no constraint
  fits stays unconstrained.

Drawn pods are renamed ``<mix>-<n>`` so names stay unique. Nothing here places anything: ``fgd.run_fgd`` replays
a mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from phalanx.sim.traces import OpenbNode, OpenbPod

MILLI = 1000
KINDS = ("gpushare", "multigpu", "cpu", "gpuspec")
#: How often each GPU model constraint occurs among the constrained GPU pods of FGD's ``gpuspec33`` variant
#: (2,388 pods), alternatives joined by ``|``: what a production cluster's constraints look like.
SPEC_FREQUENCIES: tuple[tuple[str, int], ...] = (
    ("T4", 1291),
    ("G2", 331),
    ("P100", 279),
    ("V100M16|V100M32", 141),
    ("P100|V100M16|V100M32", 103),
    ("G3", 86),
    ("G2|P100|T4|V100M16|V100M32", 39),
    ("P100|T4|V100M16|V100M32", 33),
    ("A10|G2|T4|V100M16|V100M32", 24),
    ("V100M32", 20),
    ("A10|T4", 6),
    ("P100|V100M16", 4),
    ("T4|V100M16|V100M32", 3),
    ("V100M16", 3),
)


@dataclass(frozen=True, slots=True)
class Mix:
    """One mix: which kind of work it stresses, and how much (a percentage)."""

    kind: str
    percent: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"mix kind {self.kind!r}: choose one of {', '.join(KINDS)}")
        if not 0 <= self.percent <= 100:
            raise ValueError(f"mix {self.kind}: percent must be within 0..100, got {self.percent:g}")

    @property
    def label(self) -> str:
        """``gpushare60``, ``cpu38.5``: the kind and the percentage."""
        return f"{self.kind}{self.percent:g}"

    @classmethod
    def parse(cls, text: str) -> Mix:
        """``gpushare=60`` or ``gpushare60``.

        Raises:
            ValueError: not a kind and a percentage.

        """
        kind = next((k for k in KINDS if text.startswith(k)), None)
        number = text[len(kind) :].lstrip("=") if kind else ""
        try:
            return cls(kind or text, float(number))
        except ValueError as error:
            if kind is None or not number:
                raise ValueError(
                    f"mix {text!r}: write a kind and a percentage, e.g. gpushare=60 ({', '.join(KINDS)})"
                ) from None
            raise error


def _demand(pod: OpenbPod) -> int:
    return pod.num_gpu * pod.gpu_milli if pod.num_gpu else 0


def _drawn(pods: Sequence[OpenbPod], picks: np.ndarray, label: str, start: int) -> list[OpenbPod]:
    return [replace(pods[int(i)], name=f"{label}-{start + n}") for n, i in enumerate(picks)]


def make_mix(pods: Sequence[OpenbPod], mix: Mix, seed: int, nodes: Sequence[OpenbNode] = ()) -> list[OpenbPod]:
    """The pod list of ``mix``, drawn from ``pods`` with ``seed`` (``nodes``: the cluster, for ``cpu`` and ``gpuspec``).

    Raises:
        ValueError: the pod list lacks the pods the mix draws from (no sharing pod for ``gpushare``...), or
            ``nodes`` is empty for a mix that needs them.

    """
    rng = np.random.default_rng([seed, KINDS.index(mix.kind)])
    share = mix.percent / 100
    gpu = [pod for pod in pods if pod.num_gpu]
    cpu_only = [pod for pod in pods if not pod.num_gpu]
    if mix.kind == "gpushare":
        sharing = [pod for pod in gpu if pod.gpu_milli < MILLI]
        whole = [pod for pod in gpu if pod.gpu_milli >= MILLI]
        if not sharing or (share < 1 and not whole):
            raise ValueError(f"mix {mix.label}: the pod list needs GPU pods that share a GPU and ones that do not")
        mean_sharing = float(np.mean([_demand(p) for p in sharing]))
        mean_whole = float(np.mean([_demand(p) for p in whole])) if whole else 0.0
        # k sharing pods of N: k * S / (k * S + (N - k) * W) = share.
        denominator = (1 - share) * mean_sharing + share * mean_whole
        count = len(gpu) if share >= 1 else round(share * len(gpu) * mean_whole / denominator)
        drawn = _drawn(sharing, rng.integers(len(sharing), size=count), mix.label, 0)
        drawn += _drawn(whole, rng.integers(len(whole), size=len(gpu) - count), mix.label, count) if whole else []
        return cpu_only + drawn
    if mix.kind == "multigpu":
        multi = [pod for pod in gpu if pod.num_gpu > 1]
        if not multi:
            raise ValueError(f"mix {mix.label}: the pod list has no pod of several GPUs")
        total = sum(_demand(p) for p in gpu)
        held = sum(_demand(p) for p in multi)
        added: list[OpenbPod] = []
        while total and held / total < share and share < 1:
            pod = multi[int(rng.integers(len(multi)))]
            added.append(replace(pod, name=f"{mix.label}-{len(added)}"))
            held += _demand(pod)
            total += _demand(pod)
        return list(pods) + added
    if not nodes:
        raise ValueError(f"mix {mix.label}: needs the node list")
    if mix.kind == "cpu":
        if not cpu_only:
            raise ValueError(f"mix {mix.label}: the pod list has no CPU-only pod")
        target = share * sum(node.cpu_milli for node in nodes)
        drawn_cpu: list[OpenbPod] = []
        asked = 0
        while asked < target:
            pod = cpu_only[int(rng.integers(len(cpu_only)))]
            drawn_cpu.append(replace(pod, name=f"{mix.label}-{len(drawn_cpu)}"))
            asked += pod.cpu_milli
        return gpu + drawn_cpu
    return cpu_only + _constrained(gpu, share, rng, nodes)


def _constrained(
    gpu: Sequence[OpenbPod], share: float, rng: np.random.Generator, nodes: Sequence[OpenbNode]
) -> list[OpenbPod]:
    """``gpuspec``: a share of the GPU pods get a model constraint some node can hold them under."""
    chosen = set(rng.choice(len(gpu), size=round(share * len(gpu)), replace=False).tolist()) if gpu else set()
    specs = [tuple(spec.split("|")) for spec, _ in SPEC_FREQUENCIES]
    weights = np.array([count for _, count in SPEC_FREQUENCIES], dtype=np.float64)
    kinds = {(node.model, node.gpus, node.cpu_milli) for node in nodes}  # a few kinds of node, not 1,213 nodes
    result = []
    for position, pod in enumerate(gpu):
        if position not in chosen:
            result.append(pod)
            continue
        fits = np.array(
            [
                any(model in spec and gpus >= pod.num_gpu and cpu >= pod.cpu_milli for model, gpus, cpu in kinds)
                for spec in specs
            ]
        )
        if not fits.any():
            result.append(pod)
            continue
        odds = np.where(fits, weights, 0.0)
        spec = specs[int(rng.choice(len(specs), p=odds / odds.sum()))]
        result.append(replace(pod, gpu_spec=tuple(sorted(set(spec)))))
    return result
